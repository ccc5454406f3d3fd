// Type declarations of rtclient.js: every public call, option and event.
// The wire protocol they describe is docs/protocol.md; history topics are
// docs/history.md, presence docs/presence.md.

/** The rtserver release this client ships with (e.g. "0.1.0"). */
export declare const VERSION: string;

/** Any JSON value: what a message's data and a call's params may be. */
export type JSONValue = null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue };

/** A place in a history topic's stream. */
export interface Position {
  epoch: string;
  offset: number;
}

/**
 * What publish and publishAt resolve with on a topic without history: no
 * position ({} on the wire). Test `result.epoch !== undefined` to narrow
 * a PublishResult to a Position (and its else branch to NoPosition).
 */
export interface NoPosition {
  epoch?: undefined;
  offset?: undefined;
}

/** publish's and publishAt's result: a Position on a history topic, else NoPosition. */
export type PublishResult = Position | NoPosition;

/** How the client reaches the server. */
export type Transport = "websocket" | "sse";

/** The client's state; "closed" is final. */
export type State = "connecting" | "open" | "disconnected" | "closed";

/** What onState hears with each state. */
export interface StateInfo {
  /** "connecting": the attempt number, 0 for the first after a drop. */
  attempt?: number;
  /** "disconnected" and "closed": the close code (1006 when none was received). */
  code?: number;
  /** "disconnected" and "closed": the close reason. */
  reason?: string;
  /** "disconnected": the server's hint (retry_after_ms, or a draining event's reconnectAfterMs); 0 when none. */
  retryAfterMs?: number;
  /** "disconnected": how long the client waits before the next attempt. */
  delayMs?: number;
}

/** The client-side codes of an RPCError, beside the server's JSON-RPC codes. */
export type ClientErrorCode = "DISCONNECTED" | "CLOSED" | "QUEUE_FULL";

/** An error answer from the server, or a client-side failure of a call. */
export class RPCError extends Error {
  constructor(code: number | ClientErrorCode, message: string, data?: unknown);
  name: "RPCError";
  /** A JSON-RPC code (-32001 OVERLOADED, -32002 RATE_LIMITED, -32003 FORBIDDEN, ...) or a client-side code. */
  code: number | ClientErrorCode;
  /** The error's data, e.g. {class, reason, retryAfterMs} for -32001. */
  data: any;
}

/** A server "system" notification's params. */
export interface SystemEvent {
  event: "degraded" | "recovered" | "draining" | "tokenExpiring" | "unsubscribed" | "resync" | "gap" | (string & {});
  /** draining: when to reconnect. */
  reconnectAfterMs?: number;
  /** tokenExpiring: how long the token has left. */
  expiresInMs?: number;
  /** unsubscribed, resync, gap: the topic concerned. */
  topic?: string;
  [key: string]: unknown;
}

/** One connection in a topic's presence. */
export interface PresenceEntry {
  /** A connection id, unique across the fleet. */
  client: string;
  /** Its user ("" when anonymous). */
  user: string;
  /** The display name it connected with (?name= on the URL given to connect), if any: the client's own word, at most 64 bytes. */
  name?: string;
}

/** A presence notification: the coalesced joins and leaves of a topic. */
export interface PresenceDiff {
  topic: string;
  joins: PresenceEntry[];
  leaves: PresenceEntry[];
}

/** Why a recovery did not recover: the missed messages are gone. */
export type RecoveryReason = "epoch" | "trimmed" | "tooMany";

export interface Options {
  /** A token, or a function returning one, asked before every attempt (sent as ?token=) and when the server says it is expiring (sent with "refresh"). */
  token?: string | (() => string | Promise<string>);
  /** Offer the "rt.batch" subprotocol: the server may send several messages in one frame. */
  batch?: boolean;
  /**
   * Speak the binary protocol, "rt.msgpack" (docs/protocol.md): frames of
   * MessagePack, in which a Uint8Array in data goes as raw bytes, and bytes
   * published by anyone arrive as a Uint8Array (also over the Server-Sent
   * Events fallback, where they travel as {"$bin": base64}). Without it a
   * Uint8Array is sent in that JSON form, and bytes arrive in it.
   */
  binary?: boolean;
  /** Default 500. */
  minBackoffMs?: number;
  /** Default 20000. */
  maxBackoffMs?: number;
  /** Server "system" notifications, after the client acted on them. */
  onSystem?: (event: SystemEvent) => void;
  /** Presence diffs of subscribed topics with joinLeave. */
  onPresence?: (diff: PresenceDiff) => void;
  /**
   * After every resubscription of a history topic (a reconnect, a resync, a
   * subscribe with since): recovered true when every missed message came
   * (they follow, each once, in order); false when they are gone, with the
   * reason: reload the topic's state. reason is "" when recovered.
   */
  onRecovery?: (topic: string, recovered: boolean, reason: RecoveryReason | "") => void;
  /** State changes; "open" comes once every subscription was re-sent and answered. */
  onState?: (state: State, info: StateInfo) => void;
  /** A failed resubscription, an unparsable frame, a handler that threw, a token function that failed. Default: console.error. */
  onError?: (err: unknown) => void;
  /**
   * The transport changed: "sse" once the client falls back to Server-Sent
   * Events and POST (docs/transports.md) after info.failures WebSocket
   * attempts in a row failed before the server's first frame. It keeps
   * that transport; the API and its rules stay the same.
   */
  onTransport?: (transport: Transport, info: { failures: number }) => void;
  /** false: never fall back to Server-Sent Events (default true where EventSource and fetch exist). */
  fallback?: boolean;
  /** The event stream's URL; default: the WebSocket URL with http(s) and its last "/ws" as "/sse". */
  sseUrl?: string;
  /** The EventSource constructor (default globalThis.EventSource). */
  EventSource?: new (url: string) => EventSource;
  /** For tests: fetch (default globalThis.fetch). */
  fetch?: (url: string, init: { method: string; body: string; headers: Record<string, string> }) => Promise<{ status: number }>;
  /** The WebSocket constructor (default globalThis.WebSocket): pass one where there is no global WebSocket. */
  WebSocket?: new (url: string, protocols?: string | string[]) => WebSocket;
  /** For tests: uniform in [0, 1). */
  random?: () => number;
  /** For tests: the clock in milliseconds. */
  now?: () => number;
  /** For tests. */
  setTimeout?: (f: () => void, ms: number) => unknown;
  /** For tests. */
  clearTimeout?: (timer: any) => void;
}

/** A message handler: offset is the message's place in a history topic, else undefined. */
export type MessageHandler<T = any> = (data: T, topic: string, offset: number | undefined) => void;

/** What subscribe returns: call it to stop. */
export interface Unsubscribe {
  (): void;
  /** Resolves when the server confirmed the subscription; rejects (and the subscription is dropped) when it refused it. */
  readonly ready: Promise<void>;
  /** The last position of a history topic; null on a topic without history, or before the first answer. */
  position(): Position | null;
}

export interface SubscribeOptions {
  /** Start a new subscription at this position (e.g. a history result's): the server replays what came after it. */
  since?: Position;
}

export interface PublishAtOptions {
  /**
   * Stop retrying when it aborts (AbortSignal.timeout(ms): a deadline): the
   * promise rejects with its reason, and a publish still waiting for a
   * connection is never sent.
   */
  signal?: AbortSignal;
}

export interface HistoryOptions {
  /** The messages after this position, oldest first; without it, the newest. */
  since?: Position;
  /** 1 to 1000, default 100. */
  limit?: number;
}

export interface HistoryResult<T = any> {
  epoch: string;
  /** The topic's last offset now. */
  offset: number;
  messages: { offset: number; data: T }[];
}

export interface PresencePage {
  clients: PresenceEntry[];
  /** "" when this was the last page. */
  cursor: string;
}

export interface PresenceStats {
  clients: number;
  users: number;
}

export interface Client {
  /** The current state. */
  readonly state: State;
  /** The transport in use: "websocket", or "sse" after a fallback. */
  readonly transport: Transport;
  /** Calls method; resolves with its result, rejects with an RPCError. */
  call<R = any>(method: string, params?: JSONValue | object): Promise<R>;
  /** Sends a notification: no id, no answer. */
  notify(method: string, params?: JSONValue | object): void;
  /** Publishes once; resolves with the server's result ({epoch, offset} on a history topic, {} otherwise). */
  publish(topic: string, data: unknown): Promise<PublishResult>;
  /** Publishes with an idempotency key, retried with the same key after a disconnect or a shed (-32001), until answered. */
  publishAt(topic: string, data: unknown, opts?: PublishAtOptions): Promise<PublishResult>;
  /** A history topic's messages. */
  history<T = any>(topic: string, opts?: HistoryOptions): Promise<HistoryResult<T>>;
  /** One page of a topic's presence. */
  presence(topic: string, cursor?: string): Promise<PresencePage>;
  /** Every page of a topic's presence. */
  presenceAll(topic: string): Promise<PresenceEntry[]>;
  /** Counts a topic's presence. */
  presenceStats(topic: string): Promise<PresenceStats>;
  /** Calls handler for every message on topic until the returned function is called. */
  subscribe<T = any>(topic: string, handler: MessageHandler<T>, opts?: SubscribeOptions): Unsubscribe;
  /** Closes the connection (1000) for good: no reconnect. */
  close(): void;
}

/**
 * Opens a client; url is ws:// or wss://, or a path or http(s) URL resolved against the page.
 * Throws "no global WebSocket: use Node 22+, Node 20 with --experimental-websocket, or pass
 * options.WebSocket" when there is no WebSocket to use.
 */
export function connect(url: string, opts?: Options): Client;

/** The wait before reconnect attempt number attempt (full jitter, never below hintMs). */
export function backoff(attempt: number, minMs: number, maxMs: number, hintMs: number, r: number): number;

/** The N of "retry_after_ms=N" in a close reason; 0 when absent or malformed. */
export function parseRetryAfterMs(reason: string | undefined): number;

/** A JSON value in which bytes may stand: what encodeMsgpack takes and decodeMsgpack returns. */
export type BinaryValue = null | boolean | number | string | Uint8Array | BinaryValue[] | { [key: string]: BinaryValue };

/** Encodes a value as MessagePack, Uint8Arrays as bins: the binary protocol's encoding. */
export function encodeMsgpack(value: BinaryValue | object): Uint8Array;

/** Decodes one MessagePack value (maps as objects, bins as Uint8Arrays); throws on malformed or trailing bytes. */
export function decodeMsgpack(bytes: Uint8Array): BinaryValue;
