// Tests of rtclient.js. They run in a browser and in Node.js (20 with
// --experimental-websocket, or later): import this module and await
// run(); it resolves with {passed, failures}. The examples/chat tests run
// it in headless Chromium and in Node (test_node.js).
//
// The unit tests drive the client through a fake WebSocket and a fake
// clock, so every delay it chooses is seen exactly and nothing waits on
// real time. With run({url}), the URL of a running chat example
// (examples/chat), the live tests also run against it over a real
// WebSocket.

import * as rtclient from "./rtclient.js";
import { backoff, connect, parseRetryAfterMs, RPCError } from "./rtclient.js";

const tests = [];
const test = (name, fn) => tests.push({ name, fn });
const liveTests = [];
const live = (name, fn) => liveTests.push({ name, fn });

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}
function eq(got, want, msg) {
  const g = JSON.stringify(got);
  const w = JSON.stringify(want);
  if (g !== w) throw new Error(`${msg}: got ${g}, want ${w}`);
}

// A tiny deterministic PRNG for the property tests (mulberry32).
function prng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = seed;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// --- backoff ---

test("backoff without a hint is full jitter under a doubling cap", () => {
  const rnd = prng(1);
  for (let i = 0; i < 5000; i++) {
    const min = 1 + Math.floor(rnd() * 1000);
    const max = min + Math.floor(rnd() * 30000);
    const attempt = Math.floor(rnd() * 40);
    const r = rnd();
    const d = backoff(attempt, min, max, 0, r);
    const cap = Math.min(max, min * 2 ** Math.min(attempt, 60));
    assert(d >= 0 && d <= cap, `backoff(${attempt}, ${min}, ${max}, 0, ${r}) = ${d}, cap ${cap}`);
  }
  eq(backoff(0, 500, 20000, 0, 0.5), 250, "attempt 0");
  eq(backoff(3, 500, 20000, 0, 0.5), 2000, "attempt 3");
  eq(backoff(30, 500, 20000, 0, 0.5), 10000, "capped at max");
  eq(backoff(2, 500, 100, 0, 1), 500, "max below min counts as min");
});

test("backoff with a hint never waits less than the hint, nor past max(hint, max)", () => {
  const rnd = prng(2);
  for (let i = 0; i < 5000; i++) {
    const min = 1 + Math.floor(rnd() * 1000);
    const max = min + Math.floor(rnd() * 30000);
    const hint = 1 + Math.floor(rnd() * 40000);
    const attempt = Math.floor(rnd() * 40);
    const r = rnd();
    const d = backoff(attempt, min, max, hint, r);
    assert(d >= hint, `backoff(${attempt}, ${min}, ${max}, ${hint}, ${r}) = ${d} < hint`);
    assert(d <= Math.max(hint, max), `backoff(${attempt}, ${min}, ${max}, ${hint}, ${r}) = ${d} > max(hint, max)`);
  }
  eq(backoff(0, 100, 1000, 700, 0.5), 750, "hint plus jitter over min(cap, max-hint)");
  eq(backoff(0, 100, 1000, 5000, 0.9), 5000, "a hint past max: exactly the hint");
});

test("backoff never decreases as attempts grow, for a fixed r", () => {
  const rnd = prng(3);
  for (let i = 0; i < 2000; i++) {
    const min = 1 + Math.floor(rnd() * 1000);
    const max = min + Math.floor(rnd() * 30000);
    const hint = rnd() < 0.5 ? 0 : Math.floor(rnd() * 40000);
    const r = rnd();
    let prev = -1;
    for (let a = 0; a < 40; a++) {
      const d = backoff(a, min, max, hint, r);
      assert(d >= prev, `backoff decreased at attempt ${a}: ${prev} -> ${d}`);
      prev = d;
    }
  }
});

test("parseRetryAfterMs", () => {
  const cases = [
    ["retry_after_ms=1234", 1234],
    ["draining retry_after_ms=50 bye", 50],
    ["retry_after_ms=", 0],
    ["retry_after_ms=abc", 0],
    ["retry_after_ms=0", 0],
    ["retry_after_ms=-5", 0],
    ["retry_after_ms=12x", 12],
    ["retry_after_ms=99999999999", 600000],
    ["", 0],
    [undefined, 0],
    ["retry_after=5", 0],
  ];
  for (const [give, want] of cases) eq(parseRetryAfterMs(give), want, `parseRetryAfterMs(${give})`);
});

// --- the client over a fake socket ---

// Harness: a fake WebSocket class, a fake clock, and the sockets made.
function harness() {
  const h = { sockets: [], timers: [], time: 0, states: [], system: [], errors: [] };
  class FakeWS {
    constructor(url, protocols) {
      this.url = url;
      this.protocols = protocols;
      this.sent = [];
      this.closedWith = null;
      this.at = h.time;
      h.sockets.push(this);
    }
    send(text) {
      if (this.closedWith) throw new Error("closed");
      this.sent.push(JSON.parse(text));
    }
    close(code) {
      this.closedWith = code;
    }
    // Test side:
    open() {
      this.onopen && this.onopen({});
    }
    recv(v) {
      this.onmessage && this.onmessage({ data: typeof v === "string" ? v : JSON.stringify(v) });
    }
    drop(code, reason = "") {
      this.onclose && this.onclose({ code, reason });
    }
  }
  h.WebSocket = FakeWS;
  h.last = () => h.sockets[h.sockets.length - 1];
  h.opts = (extra = {}) => ({
    WebSocket: FakeWS,
    fallback: false, // a browser's real EventSource must not answer for FakeWS
    random: () => 0.5,
    now: () => h.time,
    setTimeout: (f, ms) => {
      const t = { f, at: h.time + ms, ms, live: true };
      h.timers.push(t);
      return t;
    },
    clearTimeout: (t) => {
      if (t) t.live = false;
    },
    onState: (s, info) => h.states.push([s, info]),
    onSystem: (p) => h.system.push(p),
    onError: (e) => h.errors.push(e),
    minBackoffMs: 100,
    maxBackoffMs: 1000,
    ...extra,
  });
  // advance runs every live timer due within ms, in order.
  h.advance = async (ms) => {
    const end = h.time + ms;
    for (;;) {
      const due = h.timers.filter((t) => t.live && t.at <= end).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      due.live = false;
      h.time = Math.max(h.time, due.at);
      due.f();
      await tick();
    }
    h.time = end;
  };
  // The delay of the pending reconnect timer (the newest live one).
  h.pendingDelay = () => {
    const live = h.timers.filter((t) => t.live);
    return live.length ? live[live.length - 1].ms : null;
  };
  return h;
}

// tick lets promise callbacks (and the client's async open) run.
const tick = () => new Promise((r) => setTimeout(r, 0));

// answer replies to every request in ws.sent from index `from` on with result.
function answerAll(ws, from = 0, result = {}) {
  for (const m of ws.sent.slice(from)) if (m.id !== undefined) ws.recv({ jsonrpc: "2.0", id: m.id, result });
}

test("calls are matched by id; errors carry code and data", async () => {
  const h = harness();
  const c = connect("ws://x/ws", h.opts());
  await tick();
  const ws = h.last();
  ws.open();
  const a = c.call("a", { n: 1 });
  const b = c.call("b");
  eq(ws.sent.map((m) => [m.method, m.params]), [["a", { n: 1 }], ["b", undefined]], "sent");
  assert(ws.sent[0].jsonrpc === "2.0" && ws.sent[0].id !== ws.sent[1].id, "ids");
  ws.recv({ jsonrpc: "2.0", id: ws.sent[1].id, error: { code: -32002, message: "rate limited", data: { retryAfterMs: 40 } } });
  ws.recv({ jsonrpc: "2.0", id: ws.sent[0].id, result: { ok: true } });
  eq(await a, { ok: true }, "a's result");
  const err = await b.then(
    () => null,
    (e) => e,
  );
  assert(err instanceof RPCError && err instanceof Error, "b rejects with an RPCError");
  eq([err.code, err.data], [-32002, { retryAfterMs: 40 }], "b's error");
  c.close();
});

test("a batch frame delivers messages and responses in order", async () => {
  const h = harness();
  const c = connect("ws://x/ws", h.opts({ batch: true }));
  await tick();
  const ws = h.last();
  eq(ws.protocols, ["rt.batch"], "subprotocol offered");
  ws.open();
  const got = [];
  const off = c.subscribe("t", (data, topic) => got.push([topic, data]));
  const p = c.call("x");
  const sub = ws.sent.find((m) => m.method === "subscribe");
  const call = ws.sent.find((m) => m.method === "x");
  ws.recv([
    { jsonrpc: "2.0", id: sub.id, result: {} },
    { jsonrpc: "2.0", method: "message", params: { topic: "t", data: 1 } },
    { jsonrpc: "2.0", id: call.id, result: "r" },
    { jsonrpc: "2.0", method: "message", params: { topic: "t", data: { two: 2 } } },
    { jsonrpc: "2.0", method: "message", params: { topic: "other", data: 3 } },
    { jsonrpc: "2.0", method: "system", params: { event: "degraded" } },
  ]);
  await off.ready;
  eq(await p, "r", "call answered from inside a batch");
  eq(got, [["t", 1], ["t", { two: 2 }]], "messages");
  eq(h.system, [{ event: "degraded" }], "system events");
  c.close();
});

test("presence, presenceAll and presenceStats; presence notifications reach onPresence", async () => {
  const h = harness();
  const diffs = [];
  const c = connect("ws://x/ws", h.opts({ onPresence: (d) => diffs.push(d) }));
  await tick();
  const ws = h.last();
  ws.open();
  const all = c.presenceAll("room");
  await tick();
  let req = ws.sent[ws.sent.length - 1];
  eq([req.method, req.params], ["presence", { topic: "room" }], "first page asked");
  ws.recv({ jsonrpc: "2.0", id: req.id, result: { clients: [{ client: "i.1", user: "a" }], cursor: "i.1" } });
  await tick();
  req = ws.sent[ws.sent.length - 1];
  eq([req.method, req.params], ["presence", { topic: "room", cursor: "i.1" }], "next page asked with the cursor");
  ws.recv({ jsonrpc: "2.0", id: req.id, result: { clients: [{ client: "j.2", user: "b" }], cursor: "" } });
  eq(await all, [{ client: "i.1", user: "a" }, { client: "j.2", user: "b" }], "every page");
  const st = c.presenceStats("room");
  req = ws.sent[ws.sent.length - 1];
  eq([req.method, req.params], ["presenceStats", { topic: "room" }], "stats asked");
  ws.recv({ jsonrpc: "2.0", id: req.id, result: { clients: 2, users: 2 } });
  eq(await st, { clients: 2, users: 2 }, "stats");
  ws.recv({ jsonrpc: "2.0", method: "presence", params: { topic: "room", joins: [{ client: "k.3", user: "c" }], leaves: [] } });
  ws.recv({ jsonrpc: "2.0", method: "presence", params: { topic: "room", leaves: [{ client: "i.1", user: "a" }] } });
  eq(
    diffs,
    [
      { topic: "room", joins: [{ client: "k.3", user: "c" }], leaves: [] },
      { topic: "room", joins: [], leaves: [{ client: "i.1", user: "a" }] },
    ],
    "diffs",
  );
  c.close();
});

test("the token goes in the query string, asked again on every attempt", async () => {
  const h = harness();
  let n = 0;
  const c = connect("ws://x/ws?a=1", h.opts({ token: async () => "tok" + ++n }));
  await tick();
  eq(h.last().url, "ws://x/ws?a=1&token=tok1", "first url");
  h.last().drop(1006);
  await h.advance(1000);
  eq(h.last().url, "ws://x/ws?a=1&token=tok2", "second url");
  c.close();
});

test("close 1013 with retry_after_ms: the next attempt waits the hint plus jitter", async () => {
  const h = harness();
  const c = connect("ws://x/ws", h.opts());
  await tick();
  h.last().open();
  h.last().drop(1013, "retry_after_ms=700");
  // r = 0.5, min 100, max 1000: 700 + 0.5 * min(100, 300).
  eq(h.pendingDelay(), 750, "delay");
  const info = h.states[h.states.length - 1];
  eq([info[0], info[1].code, info[1].retryAfterMs], ["disconnected", 1013, 700], "state");
  await h.advance(749);
  eq(h.sockets.length, 1, "no attempt before the delay");
  await h.advance(1);
  eq(h.sockets.length, 2, "an attempt at the delay");
  c.close();
});

test("a timer that fires early is re-armed: never sooner than the delay", async () => {
  const h = harness();
  const opts = h.opts();
  const realSet = opts.setTimeout;
  // This clock's timers fire up to 5 ms early.
  opts.setTimeout = (f, ms) => realSet(f, ms - Math.min(5, ms / 2));
  const c = connect("ws://x/ws", opts);
  await tick();
  h.last().drop(1012, "retry_after_ms=300");
  const dropped = h.time;
  await h.advance(296);
  eq(h.sockets.length, 1, "no attempt before the hint");
  await h.advance(2000);
  eq(h.sockets.length, 2, "attempted");
  const gap = h.last().at - dropped;
  assert(gap >= 300, `attempt ${gap} ms after the close, hint 300`);
  c.close();
});

test("a draining event's reconnectAfterMs is the hint when the close has none", async () => {
  const h = harness();
  const c = connect("ws://x/ws", h.opts({ maxBackoffMs: 100 }));
  await tick();
  h.last().open();
  h.last().recv({ jsonrpc: "2.0", method: "system", params: { event: "draining", reconnectAfterMs: 900 } });
  h.last().drop(1012, "");
  eq(h.pendingDelay(), 900, "delay");
  c.close();
});

for (const code of [1002, 1003, 1007, 1008, 1009]) {
  test(`close ${code} is final: no reconnect, calls rejected`, async () => {
    const h = harness();
    const c = connect("ws://x/ws", h.opts());
    await tick();
    h.last().open();
    const p = c.call("x");
    const later = c.subscribe("t", () => {});
    h.last().drop(code, "policy");
    await h.advance(60000);
    eq(h.sockets.length, 1, "sockets");
    eq(c.state, "closed", "state");
    const inflight = await p.catch((e) => e);
    eq([inflight.code, inflight.data], ["CLOSED", { code, reason: "policy" }], "in-flight call fails with the close");
    assert(inflight.message.includes(`${code} "policy"`), `in-flight call's message: ${inflight.message}`);
    eq((await later.ready.catch((e) => e)).code, "CLOSED", "subscription");
    eq((await c.call("y").catch((e) => e)).code, "CLOSED", "call after");
  });
}

test("publishAt fails with the close its message caused, not retried", async () => {
  const { h, c, ws } = await opened();
  const p = c.publishAt("room:1", "x".repeat(70000));
  await tick();
  eq(ws.sent.filter((m) => m.method === "publish").length, 1, "sent once");
  ws.drop(1009, "message larger than limits.maxMessageBytes (65536)");
  await h.advance(60000);
  const err = await p.catch((e) => e);
  eq([err.code, err.data && err.data.code], ["CLOSED", 1009], "the 1009 close");
  assert(err.message.includes("limits.maxMessageBytes"), `message: ${err.message}`);
  eq(h.sockets.length, 1, "no reconnect");
});

// --- authentication ---

test("tokenExpiring is answered with a fresh token through refresh", async () => {
  const h = harness();
  let n = 0;
  const c = connect("ws://x/ws", h.opts({ token: async () => "tok" + ++n }));
  await tick();
  const ws = h.last();
  ws.open();
  ws.recv({ jsonrpc: "2.0", method: "system", params: { event: "tokenExpiring", expiresInMs: 30000 } });
  await tick();
  const refresh = ws.sent.find((m) => m.method === "refresh");
  eq(refresh && refresh.params, { token: "tok2" }, "refresh params");
  eq(h.system, [{ event: "tokenExpiring", expiresInMs: 30000 }], "onSystem still told");
  ws.recv({ jsonrpc: "2.0", id: refresh.id, result: { expiresAt: 1796000000 } });
  await tick();
  eq(h.errors.length, 0, "no error");
  c.close();
});

test("tokenExpiring with a fixed token only reaches onSystem", async () => {
  const h = harness();
  const c = connect("ws://x/ws", h.opts({ token: "fixed" }));
  await tick();
  const ws = h.last();
  ws.open();
  ws.recv({ jsonrpc: "2.0", method: "system", params: { event: "tokenExpiring", expiresInMs: 30000 } });
  await tick();
  eq(ws.sent.filter((m) => m.method === "refresh").length, 0, "no refresh");
  eq(h.system.length, 1, "onSystem told");
  c.close();
});

test("a refused refresh is reported, and the connection stays", async () => {
  const h = harness();
  const c = connect("ws://x/ws", h.opts({ token: () => "t" }));
  await tick();
  const ws = h.last();
  ws.open();
  ws.recv({ jsonrpc: "2.0", method: "system", params: { event: "tokenExpiring", expiresInMs: 1000 } });
  await tick();
  const refresh = ws.sent.find((m) => m.method === "refresh");
  ws.recv({ jsonrpc: "2.0", id: refresh.id, error: { code: -32003, message: "FORBIDDEN" } });
  await tick();
  eq(h.errors.map((e) => e.code), [-32003], "reported");
  eq(c.state, "open", "still open");
  eq(h.sockets.length, 1, "same socket");
  c.close();
});

test("close 1008 token expired reconnects with a fresh token when token is a function", async () => {
  const h = harness();
  let n = 0;
  const c = connect("ws://x/ws", h.opts({ token: () => "tok" + ++n }));
  await tick();
  h.last().open();
  h.last().drop(1008, "token expired");
  await h.advance(1000);
  eq(h.sockets.length, 2, "reconnected");
  eq(h.last().url, "ws://x/ws?token=tok2", "with a fresh token");
  h.last().open();
  h.last().drop(1008, "repeated invalid requests");
  await h.advance(60000);
  eq([h.sockets.length, c.state], [2, "closed"], "any other 1008 is final");
});

test("close 1008 token expired is final with a fixed token", async () => {
  const h = harness();
  const c = connect("ws://x/ws", h.opts({ token: "fixed" }));
  await tick();
  h.last().open();
  h.last().drop(1008, "token expired");
  await h.advance(60000);
  eq([h.sockets.length, c.state], [1, "closed"], "no reconnect");
});

test("a topic the server took away (unsubscribed) is not re-sent after a reconnect", async () => {
  const h = harness();
  const c = connect("ws://x/ws", h.opts());
  await tick();
  let ws = h.last();
  ws.open();
  const got = [];
  c.subscribe("kept", () => {});
  c.subscribe("taken", (d) => got.push(d));
  answerAll(ws);
  ws.recv({ jsonrpc: "2.0", method: "system", params: { event: "unsubscribed", topic: "taken" } });
  ws.recv({ jsonrpc: "2.0", method: "message", params: { topic: "taken", data: 1 } });
  eq(got, [], "no delivery after unsubscribed");
  eq(h.system, [{ event: "unsubscribed", topic: "taken" }], "onSystem told");
  ws.drop(1006);
  await h.advance(1000);
  ws = h.last();
  ws.open();
  eq(ws.sent.filter((m) => m.method === "subscribe").map((m) => m.params.topic), ["kept"], "resubscribed");
  c.close();
});

test("close() is final and rejects everything waiting", async () => {
  const h = harness();
  const c = connect("ws://x/ws", h.opts());
  await tick();
  h.last().open();
  const inflight = c.call("x");
  c.close();
  eq(h.last().closedWith, 1000, "closed with 1000");
  h.last().drop(1000);
  await h.advance(60000);
  eq(h.sockets.length, 1, "no reconnect");
  eq((await inflight.catch((e) => e)).code, "CLOSED", "in-flight call");
  eq(h.states[h.states.length - 1][0], "closed", "state");
});

test("a dropped connection rejects calls in flight once, and sends queued ones after reconnecting", async () => {
  const h = harness();
  const c = connect("ws://x/ws", h.opts());
  await tick();
  h.last().open();
  const inflight = c.call("sent");
  h.last().drop(1006);
  const queued = c.call("queued", { q: 1 });
  c.notify("note", { n: 1 });
  eq((await inflight.catch((e) => e)).code, "DISCONNECTED", "in-flight call");
  await h.advance(1000);
  const ws = h.last();
  eq(h.sockets.length, 2, "reconnected");
  ws.open();
  eq(ws.sent.map((m) => m.method), ["queued", "note"], "queued frames sent in order, the in-flight one not re-sent");
  eq(ws.sent[1].id, undefined, "a notification has no id");
  answerAll(ws);
  eq(await queued, {}, "queued call answered");
  c.close();
});

test("an attempt that fails before a socket exists keeps the queued calls", async () => {
  const h = harness();
  let n = 0;
  const c = connect("ws://x/ws", h.opts({
    token: async () => {
      if (++n === 1) throw new Error("no token yet");
      return "t";
    },
  }));
  const queued = c.call("q");
  await tick();
  eq(h.sockets.length, 0, "no socket without a token");
  eq(h.errors.length, 1, "the failure reported");
  await h.advance(1000);
  eq(h.sockets.length, 1, "retried");
  h.last().open();
  eq(h.last().sent.map((m) => m.method), ["q"], "queued call sent");
  answerAll(h.last());
  eq(await queued, {}, "answered");
  c.close();
  eq((await c.subscribe("t", () => {}).ready.catch((e) => e)).code, "CLOSED", "subscribe after close");
});

test("an error while connecting with no close after it (Node 20) is a drop: the next attempt follows, once", async () => {
  const h = harness();
  const c = connect("ws://x/ws", h.opts());
  await tick();
  const first = h.last();
  first.onerror({});
  eq(h.states.map((s) => s[0]), ["connecting", "disconnected"], "dropped on the error");
  eq(h.states[1][1].code, 1006, "as 1006");
  first.drop(1006); // a browser's close after the error changes nothing
  eq(h.states.length, 2, "the close after the error is ignored");
  await h.advance(1000);
  eq(h.sockets.length, 2, "the next attempt");
  h.last().open();
  h.last().onerror({}); // an error once open: the close follows and decides
  eq(h.states.map((s) => s[0]), ["connecting", "disconnected", "connecting"], "an error on an open socket waits for its close");
  h.last().drop(1006);
  eq(h.states[h.states.length - 1][0], "disconnected", "its close drops it");
  c.close();
});

test("connect without a WebSocket says what to use", () => {
  const saved = globalThis.WebSocket;
  try {
    globalThis.WebSocket = undefined;
    let err = null;
    try {
      connect("ws://x/ws", { onError: () => {} });
    } catch (e) {
      err = e;
    }
    eq(err && err.message, "no global WebSocket: use Node 22+, Node 20 with --experimental-websocket, or pass options.WebSocket", "error");
  } finally {
    globalThis.WebSocket = saved;
  }
});

test("every live subscription is re-sent after a reconnect; open comes after they are confirmed", async () => {
  const h = harness();
  const c = connect("ws://x/ws", h.opts());
  await tick();
  let ws = h.last();
  ws.open();
  const got = [];
  const offA = c.subscribe("a", (d) => got.push("a" + d));
  c.subscribe("b", (d) => got.push("b" + d));
  const offC = c.subscribe("c", () => {});
  answerAll(ws);
  await offA.ready;
  offC();
  eq(ws.sent.map((m) => [m.method, m.params.topic]), [["subscribe", "a"], ["subscribe", "b"], ["subscribe", "c"], ["unsubscribe", "c"]], "first connection");

  ws.drop(1012, "retry_after_ms=10");
  await h.advance(1000);
  ws = h.last();
  ws.open();
  eq(ws.sent.map((m) => [m.method, m.params.topic]), [["subscribe", "a"], ["subscribe", "b"]], "resubscribed");
  await tick();
  assert(c.state !== "open", "open before the subscriptions were confirmed");
  answerAll(ws);
  await tick();
  eq(c.state, "open", "state after confirmation");
  ws.recv({ jsonrpc: "2.0", method: "message", params: { topic: "a", data: 1 } });
  ws.recv({ jsonrpc: "2.0", method: "message", params: { topic: "b", data: 2 } });
  eq(got, ["a1", "b2"], "delivered after resubscribing");
  c.close();
});

// Any error on subscribe is final: -32003 (the topic's grants refuse) as
// well as -32004 (too many subscriptions).
for (const refusal of [
  { code: -32003, message: "FORBIDDEN", data: { topic: "t" } },
  { code: -32004, message: "too many", data: { limit: 1 } },
]) {
  test(`a subscription refused with ${refusal.code} is dropped and reported: ready rejects, never re-sent`, async () => {
    const h = harness();
    const c = connect("ws://x/ws", h.opts());
    await tick();
    let ws = h.last();
    ws.open();
    const off = c.subscribe("t", () => {});
    ws.recv({ jsonrpc: "2.0", id: ws.sent[0].id, error: refusal });
    const err = await off.ready.catch((e) => e);
    eq([err.code, err.data], [refusal.code, refusal.data], "ready rejects with the server's error");
    eq(h.errors.length, 1, "reported");
    await h.advance(60000);
    eq(ws.sent.filter((m) => m.method === "subscribe").length, 1, "not retried");
    ws.drop(1006);
    await h.advance(1000);
    ws = h.last();
    ws.open();
    eq(ws.sent, [], "not re-sent after a reconnect");
    c.close();
  });
}

test("backoff grows over attempts that fail, and restarts after an established connection", async () => {
  const h = harness();
  const c = connect("ws://x/ws", h.opts({ random: () => 0.999, minBackoffMs: 100, maxBackoffMs: 10000 }));
  await tick();
  const delays = [];
  for (let i = 0; i < 4; i++) {
    // Opens and closes at once, as a shed upgrade in close mode does.
    h.last().open();
    h.last().drop(1006);
    delays.push(h.pendingDelay());
    await h.advance(20000);
  }
  eq(delays, [100, 200, 400, 800], "doubling (timers are armed with the delay rounded up)");
  // A connection that got a frame is established: the next drop starts over.
  h.last().open();
  c.call("x");
  answerAll(h.last());
  h.last().drop(1006);
  eq(h.pendingDelay(), 100, "reset");
  c.close();
});

test("a throwing handler does not stop delivery to the others", async () => {
  const h = harness();
  const c = connect("ws://x/ws", h.opts());
  await tick();
  const ws = h.last();
  ws.open();
  const got = [];
  c.subscribe("t", () => {
    throw new Error("boom");
  });
  c.subscribe("t", (d) => got.push(d));
  eq(ws.sent.length, 1, "one subscribe for two handlers");
  ws.recv({ jsonrpc: "2.0", method: "message", params: { topic: "t", data: 7 } });
  eq(got, [7], "second handler ran");
  eq(h.errors.length, 1, "the throw reported");
  c.close();
});

// --- history topics: positions, recovery, resync, publishAt ---

// opened connects a client over the fake socket with h.opts(extra) and
// opens its first socket.
async function opened(extra) {
  const h = harness();
  const c = connect("ws://x/ws", h.opts(extra));
  await tick();
  const ws = h.last();
  ws.open();
  return { h, c, ws };
}

// reconnect drops ws and opens the next socket once the backoff passed.
async function reconnect(h, ws) {
  ws.drop(1006, "");
  await h.advance(60000);
  const next = h.last();
  assert(next !== ws, "a new socket");
  next.open();
  return next;
}

const msg = (topic, offset, data = offset) => ({ jsonrpc: "2.0", method: "message", params: { topic, offset, data } });

test("a history subscription recovers after a reconnect: every offset once, in order", async () => {
  const recoveries = [];
  let { h, c, ws } = await opened({ batch: true, onRecovery: (...a) => recoveries.push(a) });
  const got = [];
  const off = c.subscribe("room:1", (data, topic, offset) => got.push([offset, data]));
  const sub = ws.sent.find((m) => m.method === "subscribe");
  eq(sub.params, { topic: "room:1" }, "the first subscribe has no since");
  // The result and the first messages in one frame: the position is set
  // before the messages that follow it are read.
  ws.recv([{ jsonrpc: "2.0", id: sub.id, result: { epoch: "e1", offset: 3 } }, msg("room:1", 4), msg("room:1", 5)]);
  await off.ready;
  eq(off.position(), { epoch: "e1", offset: 5 }, "position after two messages");
  eq(recoveries, [], "the first subscribe is not a recovery");

  ws = await reconnect(h, ws);
  const again = ws.sent.find((m) => m.method === "subscribe");
  eq(again.params, { topic: "room:1", recover: true, since: { epoch: "e1", offset: 5 } }, "resubscribed from the position");
  ws.recv([
    { jsonrpc: "2.0", id: again.id, result: { epoch: "e1", offset: 7, recovered: true } },
    msg("room:1", 5), // already had it
    msg("room:1", 6),
    msg("room:1", 7),
    msg("room:1", 7), // a duplicate of the replay
    msg("room:1", 8),
  ]);
  await tick();
  eq(got.map((g) => g[0]), [4, 5, 6, 7, 8], "each offset once, in order");
  eq(recoveries, [["room:1", true, ""]], "recovered reported once");
  eq(off.position(), { epoch: "e1", offset: 8 }, "position");
  c.close();
});

test("property: across drops, resyncs, replays and duplicates each offset is delivered once, in order", async () => {
  const rnd = prng(7);
  for (let run = 0; run < 40; run++) {
    const { h, c, ws: first } = await opened({ batch: rnd() < 0.5 });
    let ws = first;
    const got = [];
    c.subscribe("t", (data, topic, offset) => got.push(offset));
    let last = 0; // the server's last offset
    // serve answers the newest subscribe on ws: the position now, then
    // (with recover) the replay since.offset+1..last, after stale
    // duplicates at or below since, as the contract allows to arrive.
    const serve = () => {
      const sub = ws.sent.filter((m) => m.method === "subscribe").pop();
      const frames = [];
      if (sub.params.recover) {
        const since = sub.params.since.offset;
        for (let o = Math.max(1, since - 2); o <= since; o++) if (rnd() < 0.3) frames.push(msg("t", o));
        frames.push({ jsonrpc: "2.0", id: sub.id, result: { epoch: "e1", offset: last, recovered: true } });
        for (let o = since + 1; o <= last; o++) frames.push(msg("t", o));
      } else {
        frames.push({ jsonrpc: "2.0", id: sub.id, result: { epoch: "e1", offset: last } });
      }
      for (const f of frames) ws.recv(f);
    };
    serve();
    for (let step = 0; step < 60; step++) {
      const r = rnd();
      if (r < 0.6) {
        last++;
        ws.recv(msg("t", last));
        if (rnd() < 0.1) ws.recv(msg("t", last)); // a duplicate
      } else if (r < 0.75) {
        const missed = Math.floor(rnd() * 4); // published while away
        ws.drop(1006, "");
        last += missed;
        await h.advance(60000);
        ws = h.last();
        ws.open();
        serve();
      } else if (r < 0.9) {
        ws.recv({ jsonrpc: "2.0", method: "system", params: { event: "resync", topic: "t" } });
        const live = Math.floor(rnd() * 3); // live while the resubscribe is in flight
        for (let i = 0; i < live; i++) ws.recv(msg("t", ++last));
        serve();
      } else {
        last++; // lost on the way: the next replay brings it
        ws.recv({ jsonrpc: "2.0", method: "system", params: { event: "resync", topic: "t" } });
        serve();
      }
    }
    eq(got, Array.from({ length: last }, (_, i) => i + 1), `run ${run}: offsets delivered`);
    c.close();
  }
});

test("recovered false: the new epoch's position, the reason reported, live from there", async () => {
  const recoveries = [];
  let { h, c, ws } = await opened({ onRecovery: (...a) => recoveries.push(a) });
  const got = [];
  const off = c.subscribe("room:1", (data, topic, offset) => got.push(offset));
  answerAll(ws, 0, { epoch: "e1", offset: 50 });
  ws.recv(msg("room:1", 51));
  ws = await reconnect(h, ws);
  const again = ws.sent.find((m) => m.method === "subscribe");
  eq(again.params.since, { epoch: "e1", offset: 51 }, "since");
  ws.recv({ jsonrpc: "2.0", id: again.id, result: { epoch: "e2", offset: 2, recovered: false, reason: "epoch" } });
  // Lower offsets of the new epoch are not duplicates of the old one.
  ws.recv(msg("room:1", 3));
  eq(got, [51, 3], "delivered");
  eq(recoveries, [["room:1", false, "epoch"]], "reported");
  eq(off.position(), { epoch: "e2", offset: 3 }, "position in the new epoch");
  c.close();
});

test("a topic without history keeps no position and resubscribes plainly", async () => {
  const recoveries = [];
  let { h, c, ws } = await opened({ onRecovery: (...a) => recoveries.push(a) });
  const off = c.subscribe("plain", () => {});
  answerAll(ws);
  await off.ready;
  eq(off.position(), null, "no position");
  ws = await reconnect(h, ws);
  eq(ws.sent.find((m) => m.method === "subscribe").params, { topic: "plain" }, "no recover");
  answerAll(ws);
  await tick();
  eq(recoveries, [], "nothing to report");
  c.close();
});

test("resync: subscribe again from the position on the same connection", async () => {
  const recoveries = [];
  const { h, c, ws } = await opened({ onRecovery: (...a) => recoveries.push(a) });
  const got = [];
  c.subscribe("room:1", (data, topic, offset) => got.push(offset));
  answerAll(ws, 0, { epoch: "e1", offset: 0 });
  ws.recv(msg("room:1", 1));
  ws.recv({ jsonrpc: "2.0", method: "system", params: { event: "resync", topic: "room:1" } });
  const again = ws.sent[ws.sent.length - 1];
  eq([again.method, again.params], ["subscribe", { topic: "room:1", recover: true, since: { epoch: "e1", offset: 1 } }], "resubscribed");
  ws.recv(msg("room:1", 3)); // live, while the resubscribe is answered
  ws.recv({ jsonrpc: "2.0", id: again.id, result: { epoch: "e1", offset: 3, recovered: true } });
  ws.recv(msg("room:1", 2));
  ws.recv(msg("room:1", 3));
  ws.recv(msg("room:1", 4));
  eq(got, [1, 3, 4], "at or below the position is dropped");
  eq(recoveries, [["room:1", true, ""]], "reported");
  eq(h.system.map((e) => e.event), ["resync"], "onSystem told");
  c.close();
});

test("a resync the server refuses keeps the subscription", async () => {
  const { h, c, ws } = await opened();
  const got = [];
  c.subscribe("room:1", (data, topic, offset) => got.push(offset));
  answerAll(ws, 0, { epoch: "e1", offset: 0 });
  ws.recv({ jsonrpc: "2.0", method: "system", params: { event: "resync", topic: "room:1" } });
  const again = ws.sent[ws.sent.length - 1];
  ws.recv({ jsonrpc: "2.0", id: again.id, error: { code: -32003, message: "forbidden" } });
  await tick();
  await tick();
  ws.recv(msg("room:1", 1));
  eq(got, [1], "still delivered");
  eq(h.errors.map((e) => e.code), [-32003], "reported");
  c.close();
});

test("a resubscription shed with -32001 is re-sent after the hint, then given up", async () => {
  let { h, c, ws } = await opened();
  const off = c.subscribe("room:1", () => {});
  answerAll(ws, 0, { epoch: "e1", offset: 4 });
  await off.ready;
  ws = await reconnect(h, ws);
  const shed = { code: -32001, message: "overloaded", data: { reason: "HISTORY_UNAVAILABLE", retryAfterMs: 700 } };
  for (let round = 0; round < 3; round++) {
    const subs = ws.sent.filter((m) => m.method === "subscribe");
    eq(subs.length, round + 1, `round ${round}: subscribes sent`);
    ws.recv({ jsonrpc: "2.0", id: subs[round].id, error: shed });
    await tick();
    await tick();
    if (round < 2) {
      const before = h.time;
      await h.advance(699);
      eq(ws.sent.filter((m) => m.method === "subscribe").length, round + 1, "not before the hint");
      await h.advance(1000);
      assert(h.time - before >= 700, "waited the hint");
    }
  }
  await tick();
  eq(h.errors.map((e) => e.code), [-32001], "given up after three rounds, reported");
  eq(c.state, "open", "the connection stays");
  c.close();
});

test("subscribe with since starts from that position and reports the recovery", async () => {
  const recoveries = [];
  const { h, c, ws } = await opened({ onRecovery: (...a) => recoveries.push(a) });
  const got = [];
  const off = c.subscribe("room:1", (data, topic, offset) => got.push(offset), { since: { epoch: "e1", offset: 10 } });
  eq(off.position(), { epoch: "e1", offset: 10 }, "position before the answer");
  const sub = ws.sent[0];
  eq(sub.params, { topic: "room:1", recover: true, since: { epoch: "e1", offset: 10 } }, "sent with since");
  ws.recv({ jsonrpc: "2.0", id: sub.id, result: { epoch: "e1", offset: 11, recovered: true } });
  ws.recv(msg("room:1", 10));
  ws.recv(msg("room:1", 11));
  eq(got, [11], "only what came after since");
  eq(recoveries, [["room:1", true, ""]], "reported");
  c.close();
});

test("publishAt retries a shed or cut-off publish with the same idempotencyKey", async () => {
  let { h, c, ws } = await opened();
  const done = c.publishAt("room:1", { text: "hi" });
  await tick();
  const first = ws.sent[ws.sent.length - 1];
  eq(first.method, "publish", "published");
  const key = first.params.idempotencyKey;
  assert(/^[0-9a-f]{24}$/.test(key), `key ${key}`);
  ws.recv({ jsonrpc: "2.0", id: first.id, error: { code: -32001, message: "overloaded", data: { reason: "BUS", retryAfterMs: 400 } } });
  await tick();
  await h.advance(399);
  eq(ws.sent.filter((m) => m.method === "publish").length, 1, "not before the hint");
  await h.advance(1000);
  const second = ws.sent[ws.sent.length - 1];
  eq([second.method, second.params], ["publish", first.params], "the same params and key");
  ws = await reconnect(h, ws); // the answer is lost
  await h.advance(1000);
  const third = ws.sent.find((m) => m.method === "publish");
  eq(third && third.params.idempotencyKey, key, "the same key after the reconnect");
  ws.recv({ jsonrpc: "2.0", id: third.id, result: { epoch: "e1", offset: 9 } });
  eq(await done, { epoch: "e1", offset: 9 }, "the position");
  // Other errors are the caller's.
  const refused = c.publishAt("room:1", 1);
  await tick();
  const req = ws.sent[ws.sent.length - 1];
  ws.recv({ jsonrpc: "2.0", id: req.id, error: { code: -32003, message: "forbidden" } });
  eq((await refused.catch((e) => e)).code, -32003, "not retried");
  c.close();
});

test("publishAt stops when its signal aborts or the client closes", async () => {
  const { h, c, ws } = await opened();
  const ctl = new AbortController();
  const p = c.publishAt("t", 1, { signal: ctl.signal });
  await tick();
  ws.recv({ jsonrpc: "2.0", id: ws.sent[0].id, error: { code: -32001, message: "overloaded", data: { retryAfterMs: 5000 } } });
  await tick();
  ctl.abort(new Error("gave up"));
  eq((await p.catch((e) => e)).message, "gave up", "aborted while waiting");
  const q = c.publishAt("t", 2);
  await tick();
  c.close();
  eq((await q.catch((e) => e)).code, "CLOSED", "closed");
});

test("publishAt keeps to the hint through a long refusal and resends at once on the next connection", async () => {
  let { h, c, ws } = await opened({ minBackoffMs: 500, maxBackoffMs: 20000 });
  const done = c.publishAt("room:1", 1, { signal: new AbortController().signal });
  await tick();
  const publishes = () => ws.sent.filter((m) => m.method === "publish");
  const key = publishes()[0].params.idempotencyKey;
  // Redis down for a while: every try refused with a 1 s hint, and each
  // next try comes within twice the hint, however many came before.
  for (let i = 1; i <= 6; i++) {
    const last = publishes()[publishes().length - 1];
    ws.recv({ jsonrpc: "2.0", id: last.id, error: { code: -32001, message: "overloaded", data: { reason: "HISTORY_UNAVAILABLE", retryAfterMs: 1000 } } });
    await tick();
    await h.advance(2000);
    eq(publishes().length, i + 1, `try ${i + 1} within twice the hint`);
  }
  // The connection drops with the last try in flight: the publish goes
  // out on the next connection as soon as it opens.
  const before = h.sockets.length;
  ws.drop(1006, "");
  await tick();
  while (h.sockets.length === before) await h.advance(50);
  ws = h.last();
  ws.open();
  await tick();
  const resent = publishes();
  eq(resent.length, 1, "sent on the new connection at once");
  eq(resent[0].params.idempotencyKey, key, "with the same key");
  ws.recv({ jsonrpc: "2.0", id: resent[0].id, result: { epoch: "e1", offset: 1 } });
  eq(await done, { epoch: "e1", offset: 1 }, "the position");
  // A publishAt whose signal aborts while it waits for a connection is
  // never sent.
  ws.drop(1006, "");
  await tick();
  const ctl = new AbortController();
  const late = c.publishAt("room:1", 2, { signal: ctl.signal });
  await tick();
  ctl.abort(new Error("deadline"));
  eq((await late.catch((e) => e)).message, "deadline", "rejected at the deadline");
  await h.advance(60000);
  h.last().open();
  await tick();
  eq(h.last().sent.filter((m) => m.method === "publish").length, 0, "never sent");
  c.close();
});

test("history asks for a topic's messages", async () => {
  const { h, c, ws } = await opened();
  const p = c.history("room:1", { limit: 2, since: { epoch: "e1", offset: 3, extra: 1 } });
  const req = ws.sent[0];
  eq([req.method, req.params], ["history", { topic: "room:1", since: { epoch: "e1", offset: 3 }, limit: 2 }], "params");
  const res = { epoch: "e1", offset: 5, messages: [{ offset: 4, data: "a" }, { offset: 5, data: "b" }] };
  ws.recv({ jsonrpc: "2.0", id: req.id, result: res });
  eq(await p, res, "result");
  c.history("room:1").catch(() => {}); // rejected by close
  eq(ws.sent[1].params, { topic: "room:1" }, "defaults");
  c.close();
});

// --- the fallback to Server-Sent Events and POST ---

test("three WebSocket attempts that fail before a frame switch to SSE and POST, announced", async () => {
  const h = harness();
  const posts = [];
  const streams = [];
  class FakeES {
    constructor(url) {
      this.url = url;
      this.listeners = {};
      this.closed = false;
      streams.push(this);
    }
    addEventListener(type, f) {
      this.listeners[type] = f;
    }
    close() {
      this.closed = true;
    }
    emit(type, data) {
      const ev = { data: JSON.stringify(data) };
      if (type === "message") this.onmessage(ev);
      else this.listeners[type](ev);
    }
  }
  const transports = [];
  const c = connect(
    "ws://x/ws",
    h.opts({
      fallback: true,
      token: "tk",
      EventSource: FakeES,
      fetch: async (url, o) => {
        posts.push({ url, body: JSON.parse(o.body) });
        return { status: 202 };
      },
      onTransport: (name, info) => transports.push([name, info.failures]),
    }),
  );
  // A refusal the server sends (1013) is not a broken network: it resets the count.
  h.last().drop(1006);
  await h.advance(1000);
  h.last().drop(1013, "retry_after_ms=1");
  await h.advance(1000);
  for (let i = 0; i < 3; i++) {
    eq(c.transport, "websocket", "before the third failure in a row");
    h.last().drop(1006);
    await h.advance(1000);
  }
  eq(transports, [["sse", 3]], "announced once");
  eq(c.transport, "sse", "transport");
  eq(streams.length, 1, "one stream");
  const es = streams[0];
  eq(es.url, "http://x/sse?rpc=&token=tk", "stream URL");
  es.emit("session", { session: "s1" });
  const p = c.publish("t", 1);
  await tick();
  eq(posts.length, 1, "one POST");
  eq(posts[0].url, "http://x/sse?session=s1", "POST URL");
  eq(posts[0].body.method, "publish", "the frame");
  es.emit("message", { jsonrpc: "2.0", id: posts[0].body.id, result: {} });
  eq(await p, {}, "the answer came on the stream");
  es.emit("close", { code: 1012, reason: "retry_after_ms=5" });
  eq(es.closed, true, "the stream is closed, not left to reconnect by itself");
  eq(h.states[h.states.length - 1][1].retryAfterMs, 5, "the close's hint holds");
  c.close();
});

// --- the public surface: what rtclient.d.ts declares ---

test("the module exports and the client's methods are the declared ones", () => {
  eq(Object.keys(rtclient).sort(), ["RPCError", "VERSION", "backoff", "connect", "decodeMsgpack", "encodeMsgpack", "parseRetryAfterMs"], "exports");
  const h = harness();
  const c = connect("ws://x/ws", h.opts());
  const proto = Object.getPrototypeOf(c);
  const methods = Object.getOwnPropertyNames(proto).filter((k) => !k.startsWith("_") && k !== "constructor");
  eq(methods.sort(), ["call", "close", "history", "notify", "presence", "presenceAll", "presenceStats", "publish", "publishAt", "state", "subscribe", "transport"], "client");
  const off = c.subscribe("t", () => {});
  eq([typeof off, typeof off.position, off.ready instanceof Promise], ["function", "function", true], "subscription");
  c.close();
});

// --- real sockets ---

// closed: the URL of a loopback port nothing listens on (run's
// closedURL, found by test_node.js). A refused connection must be a drop
// the client retries, whatever events the runtime's WebSocket fires.
const closedTests = [];
closedTests.push({
  name: "a refused connection reaches the next attempt",
  fn: async (url) => {
    const states = [];
    const c = connect(url, { minBackoffMs: 1, maxBackoffMs: 1, onState: (s, info) => states.push([s, info.attempt]), onError: () => {} });
    try {
      await waitFor(() => states.some(([s, attempt]) => s === "connecting" && attempt >= 1), "a second attempt");
    } finally {
      c.close();
    }
  },
});

// --- the binary protocol's MessagePack ---

test("MessagePack: values round trip, bytes as Uint8Array, in the wire's forms", () => {
  const { encodeMsgpack, decodeMsgpack } = rtclient;
  eq([...encodeMsgpack({ a: 1, b: new Uint8Array([0, 255]) })], [0x82, 0xa1, 0x61, 0x01, 0xa1, 0x62, 0xc4, 0x02, 0x00, 0xff], "encoding");
  const rnd = prng(7);
  for (let i = 0; i < 300; i++) {
    const v = {
      n: [Math.floor(rnd() * 2 ** 32), -Math.floor(rnd() * 2 ** 31), rnd(), -33, 127, 128, 65536],
      s: "é".repeat(Math.floor(rnd() * 300)),
      b: new Uint8Array(Math.floor(rnd() * 70000)).map(() => Math.floor(rnd() * 256)),
      l: new Array(Math.floor(rnd() * 20)).fill(null),
      t: [true, false, null, {}],
    };
    const back = decodeMsgpack(encodeMsgpack(v));
    assert(back.b instanceof Uint8Array && back.b.length === v.b.length && back.b.every((x, k) => x === v.b[k]), "bytes");
    back.b = v.b = null;
    eq(back, v, "value " + i);
  }
  for (const bad of [[0xc1], [0xa2, 0x61], [0x81, 0x01, 0x01], [0xc0, 0xc0], [0xa1, 0xff]]) {
    let threw = false;
    try {
      decodeMsgpack(new Uint8Array(bad));
    } catch {
      threw = true;
    }
    assert(threw, `decodeMsgpack(${bad}) did not throw`);
  }
});

test("binary: offers rt.msgpack, sends MessagePack with bytes as bins, reads bytes back as Uint8Array", async () => {
  const h = harness();
  const { encodeMsgpack, decodeMsgpack } = rtclient;
  class BinWS extends h.WebSocket {
    constructor(url, protocols) {
      super(url, protocols);
      this.protocol = "rt.msgpack"; // the server chose it
    }
    send(b) {
      if (!(b instanceof Uint8Array)) throw new Error("a text frame on the binary protocol");
      this.sent.push(decodeMsgpack(b));
    }
    recvBin(v) {
      this.onmessage && this.onmessage({ data: encodeMsgpack(v).slice().buffer });
    }
  }
  const c = connect("ws://x/ws", h.opts({ binary: true, WebSocket: BinWS }));
  await tick();
  const ws = h.last();
  eq(ws.protocols, ["rt.msgpack"], "subprotocol offered");
  eq(ws.binaryType, "arraybuffer", "binary frames read as ArrayBuffers");
  ws.open();
  const got = [];
  const off = c.subscribe("doc", (data) => got.push(data));
  const sub = ws.sent.find((m) => m.method === "subscribe");
  ws.recvBin({ id: sub.id, result: {} });
  await off.ready;
  const p = c.publish("doc", { update: new Uint8Array([1, 0, 255]) });
  const pub = ws.sent.find((m) => m.method === "publish");
  assert(pub.params.data.update instanceof Uint8Array, "the bytes went as a bin");
  eq([...pub.params.data.update], [1, 0, 255], "the bytes");
  ws.recvBin({ id: pub.id, result: {} });
  await p;
  ws.recvBin({ method: "message", params: { topic: "doc", data: new Uint8Array([9, 8]) } });
  ws.recvBin({ method: "message", params: { topic: "doc", data: { text: "json" } } });
  assert(got[0] instanceof Uint8Array, "bytes arrive as a Uint8Array");
  eq([[...got[0]], got[1]], [[9, 8], { text: "json" }], "messages");
  c.close();
});

test("binary over a text transport: bytes travel as {$bin: base64} and still arrive as Uint8Array", async () => {
  const h = harness();
  const c = connect("ws://x/ws", h.opts({ binary: true })); // FakeWS: no protocol chosen, as an event stream
  await tick();
  const ws = h.last();
  ws.open();
  const got = [];
  const off = c.subscribe("doc", (data) => got.push(data));
  answerAll(ws);
  await off.ready;
  c.publish("doc", new Uint8Array([0, 1, 255])).catch(() => {}); // never answered: closed below
  eq(ws.sent[ws.sent.length - 1].params.data, { $bin: "AAH/" }, "published in the JSON form");
  ws.recv({ jsonrpc: "2.0", method: "message", params: { topic: "doc", data: { $bin: "CQg=" } } });
  ws.recv({ jsonrpc: "2.0", method: "message", params: { topic: "doc", data: { $bin: "CQg=", other: 1 } } });
  assert(got[0] instanceof Uint8Array, "the JSON form arrives as a Uint8Array");
  eq([[...got[0]], got[1]], [[9, 8], { $bin: "CQg=", other: 1 }], "messages");
  c.close();
});

// --- live: against a running chat example (examples/chat) ---

// waitFor polls pred on the real clock until it is truthy.
async function waitFor(pred, what, ms = 20000) {
  const t0 = Date.now();
  for (;;) {
    const v = pred();
    if (v) return v;
    if (Date.now() - t0 > ms) throw new Error("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const liveRoom = () => "live" + Math.floor(Math.random() * 1e9);

live("a room's messages carry offsets; history returns them", async (url) => {
  const room = liveRoom();
  const c = connect(url, { onError: () => {} });
  try {
    const got = [];
    const off = c.subscribe("room:" + room, (data, topic, offset) => got.push({ text: data.text, offset }));
    await off.ready;
    const start = off.position();
    assert(start && start.epoch && start.offset === 0, `a new room's position ${JSON.stringify(start)}`);
    await c.call("chat.say", { room, text: "one", name: "js" });
    await waitFor(() => got.length === 1, "the message");
    eq(got, [{ text: "one", offset: 1 }], "delivered with its offset");
    eq(off.position(), { epoch: start.epoch, offset: 1 }, "position");
    const h = await c.history("room:" + room);
    eq([h.epoch, h.offset, h.messages.map((m) => [m.offset, m.data.text])], [start.epoch, 1, [[1, "one"]]], "history");
    eq((await c.publishAt("room:" + room, "x").catch((e) => e)).code, -32003, "a refused publishAt is not retried");
  } finally {
    c.close();
  }
});

live("a dropped connection recovers what was said meanwhile, each once, in order", async (url) => {
  const room = liveRoom();
  const topic = "room:" + room;
  const states = [];
  const recoveries = [];
  // random 1 and minBackoffMs 300: the reconnect waits 300 ms, time for
  // the other client's messages to be said while this one is away.
  const a = connect(url, {
    random: () => 1,
    minBackoffMs: 300,
    maxBackoffMs: 300,
    onState: (s) => states.push(s),
    onRecovery: (...r) => recoveries.push(r),
    onError: () => {},
  });
  const b = connect(url, { onError: () => {} });
  try {
    const got = [];
    const off = a.subscribe(topic, (data, t, offset) => got.push(offset));
    await off.ready;
    await b.call("chat.say", { room, text: "before", name: "b" });
    await waitFor(() => got.length === 1, "the first message");
    a._ws.close(); // as a network drop would
    await waitFor(() => states.includes("disconnected"), "the drop");
    for (const text of ["while", "away", "again"]) await b.call("chat.say", { room, text, name: "b" });
    await waitFor(() => got.length >= 4 && a.state === "open", "the recovered messages");
    await b.call("chat.say", { room, text: "after", name: "b" });
    await waitFor(() => got.length >= 5, "the live message");
    eq(got, [1, 2, 3, 4, 5], "each offset once, in order");
    eq(recoveries, [[topic, true, ""]], "recovered");
  } finally {
    a.close();
    b.close();
  }
});

export async function run(opts = {}) {
  const failures = [];
  let passed = 0;
  const all = [...tests];
  if (opts.url) all.push(...liveTests.map((t) => ({ name: "live: " + t.name, fn: () => t.fn(opts.url) })));
  if (opts.closedURL) all.push(...closedTests.map((t) => ({ name: "closed port: " + t.name, fn: () => t.fn(opts.closedURL) })));
  for (const t of all) {
    try {
      await t.fn();
      passed++;
    } catch (e) {
      failures.push(`${t.name}: ${e && e.stack ? e.stack : e}`);
    }
  }
  return { passed, failures };
}
