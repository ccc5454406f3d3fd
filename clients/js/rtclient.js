// rtclient.js: a dependency-free client for rtserver (the wire protocol of
// docs/protocol.md), in browsers and Node.js. JSON-RPC 2.0 over one
// WebSocket, id-matched calls, topic subscriptions that survive reconnects
// (recovering what history topics missed), and reconnection with full-jitter
// exponential backoff that never returns sooner than the server asked.
//
// Rules it keeps (the same as the Go client in package client):
//   - A call already sent when the connection drops is rejected with code
//     "DISCONNECTED", never re-sent: the caller decides whether it is safe
//     to repeat. Calls and notifications made while disconnected wait in a
//     bounded queue and go out once a connection is up.
//   - Close codes 1002, 1003, 1007, 1008 and 1009 are refusals that waiting
//     will not change: no reconnect, and calls sent on that connection fail
//     with "CLOSED" naming the close (its code and reason in err.data).
//     Neither after close(). The exception
//     is 1008 "token expired" when the token option is a function: a fresh
//     token changes it, so the client reconnects.
//   - With a token function, a "tokenExpiring" system event is answered
//     with a new token through the "refresh" method, so the connection
//     outlives its token (docs/authentication.md).
//   - A topic the server takes away (system event "unsubscribed") is
//     forgotten, not re-sent after a reconnect; a subscribe refused with
//     -32003 (or any other error) is final: ready rejects, no retry.
//   - retry_after_ms=N in a close reason (1012 while draining, 1013 when
//     shed or too slow) is a floor: the next attempt waits N plus jitter.
//     A "draining" system event's reconnectAfterMs is the fallback hint.
//   - A browser cannot read the HTTP status of a refused upgrade (503, 429,
//     401 all look like close 1006), so those are retried with plain backoff.
//   - Where no WebSocket passes (FALLBACK_AFTER attempts in a row that
//     failed or closed abnormally before the server's first frame), the
//     client switches to Server-Sent Events down and HTTP POST up
//     (docs/transports.md) for the rest of its life, with the same API and
//     rules, and says so through onTransport.
//   - History topics (docs/history.md): a subscription keeps its position
//     (epoch, offset), set by the subscribe result and advanced by every
//     message's offset in frame order; after every reconnect and on the
//     server's "resync" event it subscribes with recover and since, drops
//     any message at or below its position, and reports each recovery to
//     onRecovery. A resubscription the server sheds (-32001, -32002) is
//     re-sent after the hint, a few times. publishAt retries a publish that
//     was shed or cut off by a reconnect with the same idempotencyKey: the
//     one retry the client makes, because the server makes it safe.

// VERSION is the rtserver release this client ships with (the VERSION file
// of the repository; package.json says the same, and a test checks both).
export const VERSION = "0.1.0";

const PERMANENT_CLOSE = new Set([1002, 1003, 1007, 1008, 1009]);

// The close reason of a connection whose token expired unrefreshed.
const TOKEN_EXPIRED = "token expired";

// A bogus huge hint must not park a client for days (same cap as the Go client).
const MAX_HINT_MS = 10 * 60 * 1000;

// A connection counts as established, so the next drop starts the backoff
// from scratch, once a server frame arrived or it stayed open this long. A
// shed upgrade in close mode opens and closes at once: that is a failed
// attempt, and the backoff keeps growing.
const STABLE_MS = 1000;

// Calls and notifications queued while disconnected, at most.
const MAX_QUEUED = 1024;

// Attempts in a row whose WebSocket failed, or closed abnormally (1005,
// 1006, 1015) before the server's first frame, after which the client
// falls back to Server-Sent Events and POST.
const FALLBACK_AFTER = 3;

// How often one connection re-sends a subscription the server shed
// (OVERLOADED, RATE_LIMITED) before giving it up (as the Go client).
const RESUBSCRIBE_ROUNDS = 3;

// JSON-RPC codes the client retries after the server's hint.
// connect's error when there is no WebSocket to use: a plain TypeError
// from new undefined() would not say what to do.
const NO_WEBSOCKET = "no global WebSocket: use Node 22+, Node 20 with --experimental-websocket, or pass options.WebSocket";

const OVERLOADED = -32001;
const RATE_LIMITED = -32002;

/**
 * The wait before reconnect attempt number `attempt` (0 for the first after
 * a drop), with r uniform in [0, 1).
 *
 * Without a hint: full jitter, uniform in [0, cap] with
 * cap = min(maxMs, minMs * 2^attempt). With a hint: hint plus a jitter
 * uniform in [0, min(cap, maxMs - hint)], so never shorter than the hint and
 * never longer than max(hint, maxMs). For a fixed r it never decreases as
 * attempt grows.
 */
export function backoff(attempt, minMs, maxMs, hintMs, r) {
  if (maxMs < minMs) maxMs = minMs;
  let cap = minMs;
  for (let i = 0; i < attempt && cap < maxMs; i++) cap *= 2;
  cap = Math.min(cap, maxMs);
  if (!(hintMs > 0)) return r * cap;
  const window = Math.min(cap, Math.max(maxMs - hintMs, 0));
  return hintMs + r * window;
}

/**
 * The N of "retry_after_ms=N" in a close reason, in milliseconds; 0 when
 * absent or malformed. Capped at ten minutes.
 */
export function parseRetryAfterMs(reason) {
  const key = "retry_after_ms=";
  const i = typeof reason === "string" ? reason.indexOf(key) : -1;
  if (i < 0) return 0;
  const digits = /^[0-9]*/.exec(reason.slice(i + key.length))[0];
  return hintMs(digits === "" ? 0 : Number(digits));
}

function hintMs(v) {
  if (!Number.isFinite(v) || v <= 0) return 0;
  return Math.min(Math.floor(v), MAX_HINT_MS);
}

// The retryAfterMs of a -32001/-32002 error's data, capped; 0 when absent.
function errorHintMs(err) {
  return hintMs(err && err.data ? Number(err.data.retryAfterMs) : 0);
}

// A fresh idempotency key: 24 hex digits from the platform's CSPRNG.
function newIdempotencyKey() {
  const b = new Uint8Array(12);
  globalThis.crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** An error answer from the server, or a client-side failure of a call. */
export class RPCError extends Error {
  constructor(code, message, data) {
    super(message);
    this.name = "RPCError";
    this.code = code; // a JSON-RPC code (number), or "DISCONNECTED" / "CLOSED" / "QUEUE_FULL"
    this.data = data;
  }
}

/**
 * Opens a client. Options (all optional):
 *   token          string, or a function returning one (or a Promise of one),
 *                  asked again before every attempt (sent as ?token=) and
 *                  when the server says the token is expiring (sent with
 *                  the "refresh" method)
 *   batch          offer the "rt.batch" subprotocol (the server may then send
 *                  several messages in one frame as a JSON array)
 *   binary         speak the binary protocol, "rt.msgpack" (docs/protocol.md):
 *                  frames of MessagePack, in which a Uint8Array in data goes
 *                  as raw bytes, and bytes arrive as Uint8Array (also over
 *                  the Server-Sent Events fallback, where they travel as
 *                  {"$bin": base64}). Without it a Uint8Array is sent in
 *                  that JSON form, and arrives as it
 *   minBackoffMs   default 500
 *   maxBackoffMs   default 20000
 *   onSystem(params)        server "system" notifications (degraded, recovered,
 *                  draining, tokenExpiring, unsubscribed), after the client
 *                  acted on them
 *   onRecovery(topic, recovered, reason)  after every resubscription of a
 *                  history topic (a reconnect, a resync): recovered true when
 *                  every missed message came (they follow, each once, in
 *                  order); false with reason "epoch" | "trimmed" | "tooMany"
 *                  when they are gone: reload the topic's state
 *   onPresence(diff)        server "presence" notifications: {topic, joins,
 *                  leaves}, each entry {client, user}; the coalesced joins
 *                  and leaves of a subscribed topic with joinLeave
 *   onState(state, info)    "connecting" | "open" | "disconnected" | "closed";
 *                  "open" comes after every subscription was re-sent and
 *                  answered; "disconnected" carries {code, reason,
 *                  retryAfterMs, delayMs}; "closed" is final
 *   onTransport(name, info)  "sse" when the client falls back to
 *                  Server-Sent Events and POST (docs/transports.md) after
 *                  {failures} WebSocket attempts that failed before the
 *                  server's first frame; it keeps that transport
 *   fallback       false: never fall back (default true where EventSource
 *                  and fetch exist)
 *   sseUrl         the event stream's URL (default: url with ws(s) as
 *                  http(s) and its path's last "/ws" as "/sse")
 *   onError(err)   a failed resubscription, an unparsable frame, a handler
 *                  that threw; default console.error
 * For tests: WebSocket and EventSource (constructors), fetch, random() in [0, 1), now() in ms,
 * setTimeout, clearTimeout.
 * Throws when there is no WebSocket: neither a global one nor
 * opts.WebSocket.
 */
export function connect(url, opts = {}) {
  return new Client(url, opts);
}

class Client {
  constructor(url, opts) {
    this._url = url;
    this._token = opts.token;
    this._binary = !!opts.binary;
    this._protocols = this._binary ? [BINARY_PROTOCOL] : opts.batch ? ["rt.batch"] : [];
    this._min = opts.minBackoffMs ?? 500;
    this._max = opts.maxBackoffMs ?? 20000;
    this._onSystem = opts.onSystem || (() => {});
    this._onPresence = opts.onPresence || (() => {});
    this._onRecovery = opts.onRecovery || (() => {});
    this._onState = opts.onState || (() => {});
    this._onError = opts.onError || ((e) => console.error("rtclient:", e));
    this._WS = opts.WebSocket || globalThis.WebSocket;
    if (typeof this._WS !== "function") throw new Error(NO_WEBSOCKET);
    this._ES = opts.EventSource || globalThis.EventSource;
    this._fetch = opts.fetch || (globalThis.fetch ? (u, o) => globalThis.fetch(u, o) : undefined);
    this._fallback = opts.fallback !== false && typeof this._ES === "function" && typeof this._fetch === "function";
    this._sseUrl = opts.sseUrl;
    this._onTransport = opts.onTransport || (() => {});
    this._transport = "websocket";
    this._wsFails = 0; // attempts in a row that failed before a frame (FALLBACK_AFTER)
    this._heard = false; // the current socket delivered a frame
    this._random = opts.random || Math.random;
    this._now = opts.now || (() => performance.now());
    this._setTimeout = opts.setTimeout || ((f, ms) => setTimeout(f, ms));
    this._clearTimeout = opts.clearTimeout || ((t) => clearTimeout(t));

    this._ws = null; // the current socket, null while disconnected
    this._wsOpen = false; // its open event fired
    this._established = false; // see STABLE_MS
    this._drainHint = 0; // reconnectAfterMs of a draining event on this socket
    this._attempt = 0;
    this._timer = null; // reconnect or stability timer
    this._stopped = false;
    this._state = "";
    this._nextId = 1;
    this._pending = new Map(); // id -> {resolve, reject, ws}
    this._queue = []; // frames waiting for a connection: {text, id}
    this._subs = new Map(); // topic -> Topic
    this._open();
  }

  /** The transport in use: "websocket", or "sse" after a fallback. */
  get transport() {
    return this._transport;
  }

  /** The current state: "connecting", "open", "disconnected" or "closed". */
  get state() {
    return this._state;
  }

  /**
   * Calls method with params; resolves with the result, rejects with an
   * RPCError whose code and data are the server's.
   */
  call(method, params) {
    return this._call(method, params, null);
  }

  // _call is call with a hook run on the result as it is read, before the
  // frames that follow it (a promise's then would run after them).
  _call(method, params, hook) {
    if (this._stopped) return Promise.reject(new RPCError("CLOSED", "rtclient: closed"));
    const id = this._nextId++;
    const req = { jsonrpc: "2.0", id, method };
    if (params !== undefined) req.params = params;
    const text = JSON.stringify(req, bytesReplacer);
    return new Promise((resolve, reject) => {
      const p = { resolve, reject, ws: null, hook };
      this._pending.set(id, p);
      this._sendOrQueue(text, id);
    });
  }

  /** Sends a notification: no id, no answer. */
  notify(method, params) {
    if (this._stopped) return;
    const req = { jsonrpc: "2.0", method };
    if (params !== undefined) req.params = params;
    this._sendOrQueue(JSON.stringify(req, bytesReplacer), 0);
  }

  /**
   * Publishes data (any JSON value) to topic, once: a publish cut off by a
   * reconnect rejects with "DISCONNECTED" and may or may not have been
   * delivered. Resolves with the server's result ({epoch, offset} on a
   * history topic).
   */
  publish(topic, data) {
    return this.call("publish", { topic, data });
  }

  /**
   * Publishes data on topic with an idempotency key of its own and retries
   * with the same key until it is answered, the client is closed or
   * opts.signal aborts (AbortSignal.timeout(ms) is a deadline): a publish
   * the connection dropped before the answer is sent again on the next
   * connection as soon as it is up, however long the outage; one the server
   * shed (-32001: BUS, HISTORY_UNAVAILABLE, ...) after its retry hint (at
   * most twice the hint). On a history topic the message is stored and
   * delivered once however often it is sent. Resolves with its position
   * {epoch, offset} ({} on a topic without history, where a retry after a
   * lost answer may deliver twice).
   */
  async publishAt(topic, data, opts = {}) {
    const params = { topic, data, idempotencyKey: newIdempotencyKey() };
    const signal = opts.signal;
    for (let attempt = 0; ; ) {
      if (signal && signal.aborted) throw signal.reason;
      let wait = 0;
      try {
        return await this._callUntil("publish", params, signal);
      } catch (err) {
        if (signal && signal.aborted) throw signal.reason;
        if (err.code === "DISCONNECTED") {
          // Sent again at once: queued until the next connection is up.
          // Only a socket whose drop is not yet handled waits a turn.
          if (this._wsOpen) await this._sleep(0, signal);
          continue;
        }
        if (err.code !== OVERLOADED) throw err;
        wait = errorHintMs(err);
      }
      await this._sleep(backoff(attempt++, this._min, Math.max(2 * wait, this._min), wait, this._random()), signal);
    }
  }

  // _callUntil is call, given up when signal aborts: a call still queued
  // for a connection is taken off the queue (it is never sent), and a late
  // answer is discarded.
  _callUntil(method, params, signal) {
    if (!signal || this._stopped) return this.call(method, params);
    const id = this._nextId;
    const p = this.call(method, params);
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        this._queue = this._queue.filter((q) => q.id !== id);
        this._pending.delete(id);
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      p.then(
        (v) => {
          signal.removeEventListener("abort", onAbort);
          resolve(v);
        },
        (e) => {
          signal.removeEventListener("abort", onAbort);
          reject(e);
        },
      );
    });
  }

  /**
   * The messages of a history topic: the newest `limit` (1 to 1000,
   * default 100), or with `since` ({epoch, offset}) the ones after it,
   * oldest first. Resolves with {epoch, offset, messages: [{offset,
   * data}]}. Needs the subscribe grant (-32003); a topic without history
   * answers -32602.
   */
  history(topic, opts = {}) {
    const params = { topic };
    if (opts.since) params.since = { epoch: opts.since.epoch, offset: opts.since.offset };
    if (opts.limit !== undefined) params.limit = opts.limit;
    return this.call("history", params);
  }

  /**
   * One page (at most 1000) of topic's presence after cursor ("" or
   * omitted for the first): resolves with {clients: [{client, user}],
   * cursor}, cursor "" when done. Needs the subscribe grant (-32003).
   */
  presence(topic, cursor = "") {
    return this.call("presence", cursor ? { topic, cursor } : { topic });
  }

  /** Every page of topic's presence: resolves with [{client, user}]. */
  async presenceAll(topic) {
    const all = [];
    let cursor = "";
    do {
      const page = await this.presence(topic, cursor);
      all.push(...page.clients);
      cursor = page.cursor;
    } while (cursor);
    return all;
  }

  /** Counts topic's presence: resolves with {clients, users}. */
  presenceStats(topic) {
    return this.call("presenceStats", { topic });
  }

  /**
   * Calls handler(data, topic, offset) for every message on topic (offset:
   * the message's place in a history topic, else undefined), until the
   * returned function is called. The subscription is re-sent after every
   * reconnect, with recover on a history topic. The returned function has a
   * `ready` Promise: resolved when the server confirmed the subscription,
   * rejected (and the subscription dropped) when it refused it; and
   * `position()`: the last {epoch, offset} of a history topic, null
   * otherwise.
   *
   * opts.since ({epoch, offset}, e.g. from a history result) starts a new
   * subscription there: the server replays what came after it, and
   * onRecovery reports whether it could. Ignored when topic is already
   * subscribed.
   */
  subscribe(topic, handler, opts = {}) {
    let t = this._subs.get(topic);
    if (this._stopped) {
      t = new Topic();
      t.fail(new RPCError("CLOSED", "rtclient: closed"));
    } else if (!t) {
      t = new Topic();
      if (opts.since) t.pos = { epoch: opts.since.epoch, offset: opts.since.offset };
      this._subs.set(topic, t);
      if (this._wsOpen) this._sendSubscribe(topic, t);
    }
    const entry = { handler };
    t.handlers.add(entry);
    const off = () => {
      if (!t.handlers.delete(entry) || t.handlers.size > 0) return;
      if (this._subs.get(topic) !== t) return;
      this._subs.delete(topic);
      t.fail(new RPCError("CLOSED", "rtclient: unsubscribed"));
      if (this._wsOpen) this.call("unsubscribe", { topic }).catch(() => {});
    };
    off.ready = t.ready;
    off.position = () => (t.pos ? { epoch: t.pos.epoch, offset: t.pos.offset } : null);
    return off;
  }

  /** Closes the connection (code 1000) for good: no reconnect. */
  close() {
    if (this._stopped) return;
    this._stopped = true;
    this._clearTimer();
    const ws = this._ws;
    this._ws = null;
    this._wsOpen = false;
    if (ws) {
      try {
        ws.close(1000);
      } catch (e) {
        // already closing
      }
    }
    const err = new RPCError("CLOSED", "rtclient: closed");
    this._failPending(() => true, err);
    this._queue = [];
    for (const t of this._subs.values()) t.fail(err);
    this._setState("closed", {});
  }

  // --- connection lifecycle ---

  async _open() {
    if (this._stopped) return;
    this._setState("connecting", { attempt: this._attempt });
    let url, token;
    try {
      token = typeof this._token === "function" ? await this._token() : this._token;
      if (this._stopped) return;
      url = wsURL(this._url, token);
    } catch (e) {
      this._onError(e);
      this._dropped(null, 1006, "");
      return;
    }
    let ws;
    try {
      ws =
        this._transport === "sse"
          ? new SSESocket(sseURL(this._sseUrl || this._url, token), this._ES, this._fetch)
          : new this._WS(url, this._protocols);
    } catch (e) {
      // A malformed URL will not get better by waiting.
      this._onError(e);
      this._stop({ code: 0, reason: String(e) });
      return;
    }
    if (this._binary && this._transport !== "sse") ws.binaryType = "arraybuffer";
    this._ws = ws;
    this._wsOpen = false;
    this._heard = false;
    this._established = false;
    this._drainHint = 0;
    ws.onopen = () => this._opened(ws);
    ws.onmessage = (ev) => this._frame(ws, ev.data);
    ws.onclose = (ev) => this._dropped(ws, ev.code, ev.reason);
    // A browser follows an error with a close event; Node 20's WebSocket
    // does not when the connection is refused or the upgrade is answered
    // with anything but 101, so an error while connecting is the drop
    // itself (1006), once: the close that may follow finds ws let go of.
    ws.onerror = () => {
      if (ws === this._ws && !this._wsOpen) this._dropped(ws, 1006, "");
    };
  }

  _opened(ws) {
    if (ws !== this._ws) return;
    this._wsOpen = true;
    this._clearTimer();
    this._timer = this._setTimeout(() => {
      this._timer = null;
      if (ws === this._ws) this._established = true;
    }, STABLE_MS);
    // Subscriptions first, so queued calls run with them in place.
    const confirms = [];
    for (const [topic, t] of this._subs) confirms.push(this._sendSubscribe(topic, t));
    const queued = this._queue;
    this._queue = [];
    for (const q of queued) this._send(ws, q.text, q.id);
    Promise.allSettled(confirms).then(() => {
      if (ws === this._ws && this._wsOpen) this._setState("open", {});
    });
  }

  // _sendSubscribe subscribes to topic: with recover from its position
  // when it has one. A resubscription the server sheds is re-sent after
  // the hint on the same connection, up to RESUBSCRIBE_ROUNDS times; any
  // other refusal is final, except after a resync: the subscription the
  // server still has stays, and the next reconnect or resync recovers it.
  // It resolves once settled.
  _sendSubscribe(topic, t, round = 0, resync = false) {
    const recovering = t.pos !== null;
    const params = recovering ? { topic, recover: true, since: { epoch: t.pos.epoch, offset: t.pos.offset } } : { topic };
    const ws = this._ws;
    return this._call("subscribe", params, (r) => this._subscribed(topic, t, r, recovering)).then(
      () => t.confirm(),
      async (err) => {
        if (err.code === "DISCONNECTED" || err.code === "CLOSED") return; // re-sent on the next connection
        if (this._subs.get(topic) !== t) return;
        const shed = err.code === OVERLOADED || err.code === RATE_LIMITED;
        if (shed && t.confirmed && round + 1 < RESUBSCRIBE_ROUNDS) {
          await this._sleep(backoff(round, this._min, this._max, errorHintMs(err), this._random()));
          if (ws === this._ws && this._wsOpen && this._subs.get(topic) === t) return this._sendSubscribe(topic, t, round + 1, resync);
          return; // a new connection re-sends it
        }
        if (resync) {
          this._onError(err);
          return;
        }
        this._subs.delete(topic);
        t.fail(err);
        this._onError(err);
      },
    );
  }

  // _subscribed runs on a subscribe result as it is read: it sets the
  // position (a recovered subscription keeps its own, the replay follows),
  // and after a recovery attempt tells the application how it went.
  _subscribed(topic, t, r, recovering) {
    if (this._subs.get(topic) !== t || !r || typeof r.epoch !== "string" || r.epoch === "") return;
    const recovered = r.recovered === true;
    if (!recovered || t.pos === null || t.pos.epoch !== r.epoch) t.pos = { epoch: r.epoch, offset: r.offset };
    if (recovering && typeof r.recovered === "boolean") {
      try {
        this._onRecovery(topic, recovered, r.reason || "");
      } catch (err) {
        this._onError(err);
      }
    }
  }

  // _resync answers the server's resync event: subscribe again from the
  // position, so the server replays what this subscription missed.
  _resync(topic) {
    const t = this._subs.get(topic);
    if (t && this._wsOpen) this._sendSubscribe(topic, t, 0, true);
  }

  // _sleep resolves after ms on the client's clock; it rejects at once when
  // signal aborts, and with "CLOSED" when the client is closed meanwhile.
  _sleep(ms, signal) {
    return new Promise((resolve, reject) => {
      let timer = null;
      const onAbort = () => {
        this._clearTimeout(timer);
        reject(signal.reason);
      };
      timer = this._setTimeout(() => {
        if (signal) signal.removeEventListener("abort", onAbort);
        if (this._stopped) reject(new RPCError("CLOSED", "rtclient: closed"));
        else resolve();
      }, Math.ceil(ms));
      if (signal) signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  _dropped(ws, code, reason) {
    if (ws !== this._ws) return; // a socket close() already let go of
    this._ws = null;
    this._wsOpen = false;
    this._clearTimer();
    const fresh = code === 1008 && reason === TOKEN_EXPIRED && typeof this._token === "function";
    const permanent = PERMANENT_CLOSE.has(code) && !fresh;
    // Only calls sent on this socket: queued ones were never sent (ws is
    // null when the attempt failed before a socket existed). After a
    // permanent close they fail with it: a call that caused it (1009, too
    // large) must not be retried as if the connection had just dropped.
    const err = permanent
      ? new RPCError("CLOSED", `rtclient: connection closed by server: ${code} ${JSON.stringify(reason)}`, { code, reason })
      : new RPCError("DISCONNECTED", "rtclient: disconnected");
    this._failPending((p) => ws !== null && p.ws === ws, err);
    if (this._stopped) return;
    if (permanent) {
      this._stop({ code, reason });
      return;
    }
    this._countFailure(ws, code);
    let hint = parseRetryAfterMs(reason);
    if (!hint) hint = this._drainHint;
    if (this._established) this._attempt = 0;
    const delay = backoff(this._attempt, this._min, this._max, hint, this._random());
    this._attempt++;
    this._setState("disconnected", { code, reason, retryAfterMs: hint, delayMs: delay });
    this._wait(delay);
  }

  // _countFailure counts WebSocket attempts that ended abnormally before
  // the server's first frame (what a proxy that breaks WebSocket causes),
  // and falls back to SSE and POST after FALLBACK_AFTER in a row.
  _countFailure(ws, code) {
    if (this._transport !== "websocket" || ws === null) return;
    if (this._heard || (code !== 1005 && code !== 1006 && code !== 1015)) {
      this._wsFails = 0;
      return;
    }
    this._wsFails++;
    if (!this._fallback || this._wsFails < FALLBACK_AFTER) return;
    this._transport = "sse";
    this._attempt = 0;
    try {
      this._onTransport("sse", { failures: this._wsFails });
    } catch (err) {
      this._onError(err);
    }
  }

  // _wait opens the next connection after delay ms, and never sooner:
  // timers may fire a little early against the clock, so it checks.
  _wait(delay) {
    const due = this._now() + delay;
    const tick = () => {
      this._timer = null;
      const left = due - this._now();
      if (left > 0) {
        this._timer = this._setTimeout(tick, Math.ceil(left));
        return;
      }
      this._open();
    };
    this._timer = this._setTimeout(tick, Math.ceil(delay));
  }

  _stop(info) {
    this._stopped = true;
    const err = new RPCError("CLOSED", `rtclient: refused for good (close ${info.code})`);
    this._failPending(() => true, err);
    this._queue = [];
    for (const t of this._subs.values()) t.fail(err);
    this._setState("closed", info);
  }

  // --- frames ---

  _sendOrQueue(text, id) {
    if (this._wsOpen) {
      this._send(this._ws, text, id);
      return;
    }
    if (this._queue.length >= MAX_QUEUED) {
      this._settle(id, new RPCError("QUEUE_FULL", "rtclient: too many calls waiting for a connection"));
      return;
    }
    this._queue.push({ text, id });
  }

  _send(ws, text, id) {
    const p = id ? this._pending.get(id) : null;
    if (id && !p) return; // given up meanwhile
    if (p) p.ws = ws;
    try {
      // Queued requests are JSON text, whichever transport sends them.
      ws.send(ws.protocol === BINARY_PROTOCOL ? encodeMsgpack(JSON.parse(text, bytesReviver)) : text);
    } catch (e) {
      this._settle(id, new RPCError("DISCONNECTED", "rtclient: disconnected"));
    }
  }

  _frame(ws, text) {
    const binary = text instanceof ArrayBuffer && ws.protocol === BINARY_PROTOCOL;
    if (ws !== this._ws || (typeof text !== "string" && !binary)) return;
    this._established = true;
    this._heard = true;
    let v;
    try {
      v = binary ? decodeMsgpack(new Uint8Array(text)) : JSON.parse(text, this._binary ? bytesReviver : undefined);
    } catch (e) {
      this._onError(new Error("rtclient: unparsable frame from the server"));
      return;
    }
    if (Array.isArray(v)) {
      for (const m of v) this._message(m);
    } else {
      this._message(v);
    }
  }

  _message(m) {
    if (m === null || typeof m !== "object") return;
    if (typeof m.method === "string") {
      if (m.id !== undefined) return; // the server sends no requests
      const params = m.params || {};
      if (m.method === "message") {
        const t = this._subs.get(params.topic);
        if (!t) return;
        const offset = typeof params.offset === "number" ? params.offset : undefined;
        if (offset !== undefined && t.pos !== null) {
          if (offset <= t.pos.offset) return; // a duplicate of what this subscription already had
          t.pos.offset = offset;
        }
        for (const e of [...t.handlers]) {
          try {
            e.handler(params.data, params.topic, offset);
          } catch (err) {
            this._onError(err);
          }
        }
      } else if (m.method === "system") {
        if (params.event === "draining") this._drainHint = hintMs(params.reconnectAfterMs);
        else if (params.event === "tokenExpiring") this._refresh();
        else if (params.event === "unsubscribed") this._subs.delete(params.topic);
        else if (params.event === "resync") this._resync(params.topic);
        try {
          this._onSystem(params);
        } catch (err) {
          this._onError(err);
        }
      } else if (m.method === "presence") {
        try {
          this._onPresence({ topic: params.topic, joins: params.joins || [], leaves: params.leaves || [] });
        } catch (err) {
          this._onError(err);
        }
      }
      return;
    }
    if (typeof m.id !== "number") return;
    if (m.error) {
      const e = m.error;
      this._settle(m.id, new RPCError(e.code, e.message || "error " + e.code, e.data));
    } else {
      this._settle(m.id, null, m.result);
    }
  }

  // _refresh answers tokenExpiring: a new token from the token function,
  // sent with "refresh". When it fails the server closes with 1008 "token
  // expired" at exp and the client reconnects with a token asked for then.
  async _refresh() {
    if (typeof this._token !== "function") return;
    try {
      const token = await this._token();
      if (this._stopped) return;
      await this.call("refresh", { token });
    } catch (err) {
      if (!this._stopped) this._onError(err);
    }
  }

  _settle(id, err, result) {
    const p = this._pending.get(id);
    if (!p) return;
    this._pending.delete(id);
    if (err) {
      p.reject(err);
      return;
    }
    if (p.hook) p.hook(result);
    p.resolve(result);
  }

  _failPending(match, err) {
    for (const [id, p] of this._pending) {
      if (match(p)) {
        this._pending.delete(id);
        p.reject(err);
      }
    }
  }

  _clearTimer() {
    if (this._timer !== null) {
      this._clearTimeout(this._timer);
      this._timer = null;
    }
  }

  _setState(state, info) {
    this._state = state;
    try {
      this._onState(state, info);
    } catch (err) {
      this._onError(err);
    }
  }
}

// Topic is one subscribed topic: its handlers and the promise of its first
// confirmation.
// --- bytes and the binary protocol ---

// The WebSocket subprotocol of the binary protocol.
const BINARY_PROTOCOL = "rt.msgpack";

// bytesReplacer writes a Uint8Array as the JSON form of bytes,
// {"$bin": base64} (docs/protocol.md).
function bytesReplacer(_key, v) {
  return v instanceof Uint8Array ? { $bin: toBase64(v) } : v;
}

// bytesReviver reads the JSON form of bytes back as a Uint8Array.
function bytesReviver(_key, v) {
  if (v !== null && typeof v === "object" && !Array.isArray(v) && typeof v.$bin === "string") {
    const keys = Object.keys(v);
    if (keys.length === 1) {
      try {
        return fromBase64(v.$bin);
      } catch {
        return v;
      }
    }
  }
  return v;
}

function toBase64(b) {
  let s = "";
  for (let i = 0; i < b.length; i += 0x8000) s += String.fromCharCode.apply(null, b.subarray(i, i + 0x8000));
  return btoa(s);
}

function fromBase64(s) {
  const bin = atob(s);
  const b = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) b[i] = bin.charCodeAt(i);
  return b;
}

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder("utf-8", { fatal: true });

// encodeMsgpack encodes a JSON value, with Uint8Arrays as bins, as
// MessagePack. Members whose value is undefined are left out, as
// JSON.stringify leaves them out.
export function encodeMsgpack(value) {
  let buf = new Uint8Array(256);
  let view = new DataView(buf.buffer);
  let n = 0;
  const room = (k) => {
    if (n + k <= buf.length) return;
    let size = buf.length * 2;
    while (size < n + k) size *= 2;
    const next = new Uint8Array(size);
    next.set(buf.subarray(0, n));
    buf = next;
    view = new DataView(buf.buffer);
  };
  const byte = (b) => {
    room(1);
    buf[n++] = b;
  };
  const head = (len, fix, fixMax, f8, f16, f32) => {
    room(5);
    if (len <= fixMax) buf[n++] = fix | len;
    else if (f8 && len < 0x100) (buf[n++] = f8), (buf[n++] = len);
    else if (len < 0x10000) (buf[n++] = f16), view.setUint16(n, len), (n += 2);
    else (buf[n++] = f32), view.setUint32(n, len), (n += 4);
  };
  const bytes = (b) => {
    room(b.length);
    buf.set(b, n);
    n += b.length;
  };
  const enc = (v) => {
    if (v === null || v === undefined) return byte(0xc0);
    if (v === false) return byte(0xc2);
    if (v === true) return byte(0xc3);
    if (typeof v === "number") {
      room(9);
      if (Number.isInteger(v) && v >= 0 && v <= 0xffffffff) {
        if (v < 0x80) buf[n++] = v;
        else if (v < 0x100) (buf[n++] = 0xcc), (buf[n++] = v);
        else if (v < 0x10000) (buf[n++] = 0xcd), view.setUint16(n, v), (n += 2);
        else (buf[n++] = 0xce), view.setUint32(n, v), (n += 4);
      } else if (Number.isInteger(v) && v < 0 && v >= -0x80000000) {
        if (v >= -32) buf[n++] = v & 0xff;
        else (buf[n++] = 0xd2), view.setInt32(n, v), (n += 4);
      } else if (Number.isFinite(v)) {
        (buf[n++] = 0xcb), view.setFloat64(n, v), (n += 8);
      } else {
        buf[n++] = 0xc0; // NaN and the infinities: null, as JSON.stringify writes them
      }
      return;
    }
    if (typeof v === "string") {
      const b = utf8Encoder.encode(v);
      head(b.length, 0xa0, 31, 0xd9, 0xda, 0xdb);
      return bytes(b);
    }
    if (v instanceof Uint8Array) {
      head(v.length, 0, -1, 0xc4, 0xc5, 0xc6);
      return bytes(v);
    }
    if (typeof v.toJSON === "function") return enc(v.toJSON());
    if (Array.isArray(v)) {
      head(v.length, 0x90, 15, 0, 0xdc, 0xdd);
      for (const e of v) enc(e === undefined || typeof e === "function" ? null : e);
      return;
    }
    const keys = Object.keys(v).filter((k) => v[k] !== undefined && typeof v[k] !== "function");
    head(keys.length, 0x80, 15, 0, 0xde, 0xdf);
    for (const k of keys) {
      enc(k);
      enc(v[k]);
    }
  };
  enc(value);
  return buf.slice(0, n);
}

// decodeMsgpack decodes one MessagePack value: maps as objects, bins as
// Uint8Arrays. It throws on anything else, or on bytes left over.
export function decodeMsgpack(b) {
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  let i = 0;
  const need = (k) => {
    if (i + k > b.length) throw new Error("rtclient: truncated MessagePack");
  };
  const str = (len) => {
    need(len);
    const s = utf8Decoder.decode(b.subarray(i, i + len));
    i += len;
    return s;
  };
  const bin = (len) => {
    need(len);
    const s = b.slice(i, i + len);
    i += len;
    return s;
  };
  const arr = (len) => {
    const a = new Array(len);
    for (let k = 0; k < len; k++) a[k] = dec();
    return a;
  };
  const map = (len) => {
    const o = {};
    for (let k = 0; k < len; k++) {
      const key = dec();
      if (typeof key !== "string") throw new Error("rtclient: MessagePack map key is not a string");
      o[key] = dec();
    }
    return o;
  };
  const u = (size) => {
    need(size);
    let v;
    if (size === 1) v = view.getUint8(i);
    else if (size === 2) v = view.getUint16(i);
    else if (size === 4) v = view.getUint32(i);
    else v = Number(view.getBigUint64(i));
    i += size;
    return v;
  };
  const dec = () => {
    need(1);
    const c = b[i++];
    if (c < 0x80) return c;
    if (c >= 0xe0) return c - 0x100;
    if (c < 0x90) return map(c & 0x0f);
    if (c < 0xa0) return arr(c & 0x0f);
    if (c < 0xc0) return str(c & 0x1f);
    switch (c) {
      case 0xc0:
        return null;
      case 0xc2:
        return false;
      case 0xc3:
        return true;
      case 0xc4:
      case 0xc5:
      case 0xc6:
        return bin(u(1 << (c - 0xc4)));
      case 0xca: {
        need(4);
        const f = view.getFloat32(i);
        i += 4;
        return f;
      }
      case 0xcb: {
        need(8);
        const f = view.getFloat64(i);
        i += 8;
        return f;
      }
      case 0xcc:
      case 0xcd:
      case 0xce:
      case 0xcf:
        return u(1 << (c - 0xcc));
      case 0xd0:
        need(1);
        return view.getInt8(i++);
      case 0xd1: {
        need(2);
        const v = view.getInt16(i);
        i += 2;
        return v;
      }
      case 0xd2: {
        need(4);
        const v = view.getInt32(i);
        i += 4;
        return v;
      }
      case 0xd3: {
        need(8);
        const v = Number(view.getBigInt64(i));
        i += 8;
        return v;
      }
      case 0xd9:
      case 0xda:
      case 0xdb:
        return str(u(1 << (c - 0xd9)));
      case 0xdc:
      case 0xdd:
        return arr(u(2 << (c - 0xdc)));
      case 0xde:
      case 0xdf:
        return map(u(2 << (c - 0xde)));
    }
    throw new Error("rtclient: unsupported MessagePack type 0x" + c.toString(16));
  };
  const v = dec();
  if (i !== b.length) throw new Error("rtclient: bytes after the MessagePack value");
  return v;
}

class Topic {
  constructor() {
    this.handlers = new Set();
    this.pos = null; // {epoch, offset} on a history topic, once known
    this.confirmed = false; // the server confirmed it once
    this.ready = new Promise((resolve, reject) => {
      this._resolve = resolve;
      this._reject = reject;
    });
    this.ready.catch(() => {}); // nobody has to look
  }
  confirm() {
    this.confirmed = true;
    this._resolve();
  }
  fail(err) {
    this._reject(err);
  }
}

// SSESocket is the part of the WebSocket interface the client uses
// (onopen, onmessage, onclose, onerror, send, close), over an event stream
// of every server frame (GET /sse?rpc) and a POST per frame sent to its
// session (docs/transports.md). POSTs go one at a time, in order: the
// server runs a connection's frames in the order they came.
class SSESocket {
  constructor(url, EventSourceCtor, fetchFn) {
    this.onopen = this.onmessage = this.onclose = this.onerror = null;
    this._fetch = fetchFn;
    this._out = [];
    this._posting = false;
    this._ended = false;
    this._post = "";
    const es = new EventSourceCtor(url);
    this._es = es;
    es.addEventListener("session", (ev) => {
      let id = "";
      try {
        id = JSON.parse(ev.data).session;
      } catch (e) {
        // not a session event of ours
      }
      if (typeof id !== "string" || id === "" || this._post) return;
      const u = new URL(url);
      u.search = "";
      u.searchParams.set("session", id);
      this._post = u.toString();
      if (this.onopen) this.onopen({});
    });
    es.onmessage = (ev) => {
      if (!this._ended && this.onmessage) this.onmessage({ data: ev.data });
    };
    es.addEventListener("close", (ev) => {
      let c = { code: 1006, reason: "" };
      try {
        c = JSON.parse(ev.data);
      } catch (e) {
        // keep 1006
      }
      this._end(c.code, c.reason || "");
    });
    // EventSource would reconnect by itself: the client decides instead.
    es.onerror = () => this._end(1006, "");
  }

  send(text) {
    if (this._ended || !this._post) throw new Error("rtclient: event stream not open");
    this._out.push(text);
    this._pump();
  }

  async _pump() {
    if (this._posting) return;
    this._posting = true;
    while (this._out.length > 0 && !this._ended) {
      const body = this._out.shift();
      let ok = false;
      try {
        // text/plain: a simple request, no CORS preflight.
        const r = await this._fetch(this._post, { method: "POST", body, headers: { "Content-Type": "text/plain" } });
        ok = r.status === 202;
      } catch (e) {
        ok = false;
      }
      if (!ok) this._end(1006, "");
    }
    this._posting = false;
  }

  close(code) {
    this._end(code || 1000, "");
  }

  _end(code, reason) {
    if (this._ended) return;
    this._ended = true;
    this._es.close();
    this._out = [];
    if (this.onclose) this.onclose({ code, reason });
  }
}

// sseURL is the event stream URL for url (the WebSocket URL, or sseUrl):
// http(s), the path's last "/ws" as "/sse", with rpc and the token.
function sseURL(url, token) {
  const base = globalThis.location ? globalThis.location.href : undefined;
  const u = new URL(url, base);
  if (u.protocol === "ws:") u.protocol = "http:";
  else if (u.protocol === "wss:") u.protocol = "https:";
  u.pathname = u.pathname.replace(/\/ws$/, "/sse");
  u.searchParams.set("rpc", "");
  if (token) u.searchParams.set("token", token);
  return u.toString();
}

// wsURL resolves url against the page (a path like "/ws" works), turns
// http(s) into ws(s) and adds the token query parameter.
function wsURL(url, token) {
  const base = globalThis.location ? globalThis.location.href : undefined;
  const u = new URL(url, base);
  if (u.protocol === "http:") u.protocol = "ws:";
  else if (u.protocol === "https:") u.protocol = "wss:";
  if (token) u.searchParams.set("token", token);
  return u.toString();
}
