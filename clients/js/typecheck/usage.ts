// A typed use of every public call and event of the package, compiled
// with tsc --strict --noEmit by the test suite (scripts/test.sh): a
// declaration that drifts from the client, or an export that goes
// missing, fails it. It is never run.
import { backoff, connect, decodeMsgpack, encodeMsgpack, parseRetryAfterMs, RPCError } from "@rtserver/client";
import type { BinaryValue, Client, HistoryResult, NoPosition, Position, PresenceDiff, PublishResult, State, StateInfo, SystemEvent, Transport, Unsubscribe } from "@rtserver/client";

interface ChatMessage {
  from: string;
  text: string;
}

export async function usage(): Promise<void> {
  const states: [State, StateInfo][] = [];
  const client: Client = connect("/ws", {
    token: async () => "jwt",
    batch: true,
    minBackoffMs: 500,
    maxBackoffMs: 20000,
    onSystem: (e: SystemEvent) => {
      if (e.event === "draining") console.log(e.reconnectAfterMs ?? 0);
    },
    onPresence: (d: PresenceDiff) => console.log(d.topic, d.joins.length, d.leaves.map((x) => x.user)),
    onRecovery: (topic: string, recovered: boolean, reason) => {
      if (!recovered && (reason === "epoch" || reason === "trimmed" || reason === "tooMany")) console.log("reload", topic);
    },
    onState: (s, info) => states.push([s, info]),
    onError: (err: unknown) => console.error(err),
  });
  connect("wss://example.com/ws", { token: "fixed" }).close();
  connect("wss://example.com/ws", {
    sseUrl: "https://example.com/events/sse",
    onTransport: (t: Transport, info) => console.log(t === "sse", info.failures),
  }).close();
  connect("/ws", { fallback: false }).close();

  // The binary protocol: bytes go as bytes and arrive as a Uint8Array.
  const bin: Client = connect("/ws", { binary: true });
  const sized = bin.subscribe<Uint8Array | ChatMessage>("doc:1", (update) => {
    if (update instanceof Uint8Array) console.log(update.byteLength);
  });
  await sized.ready;
  await bin.publish("doc:1", new Uint8Array([1, 2, 3]));
  await bin.publishAt("doc:1", { update: new Uint8Array(8) });
  const packed: Uint8Array = encodeMsgpack({ a: new Uint8Array(2), b: [1, "x", null] });
  const unpacked: BinaryValue = decodeMsgpack(packed);
  console.log(unpacked);
  bin.close();
  const transport: Transport = client.transport;
  console.log(transport);

  const state: State = client.state;
  console.log(state);

  const recent: HistoryResult<ChatMessage> = await client.history<ChatMessage>("room:1", { limit: 50 });
  const texts: string[] = recent.messages.map((m) => `${m.offset} ${m.data.from}: ${m.data.text}`);
  const since: Position = { epoch: recent.epoch, offset: recent.offset };
  await client.history("room:1", { since });

  const off: Unsubscribe = client.subscribe<ChatMessage>(
    "room:1",
    (data, topic, offset) => texts.push(`${topic}@${offset ?? "-"} ${data.text}`),
    { since },
  );
  await off.ready;
  const pos: Position | null = off.position();
  console.log(pos?.epoch, pos?.offset);
  off();

  const stored = await client.publishAt("room:1", { text: "hi" }, { signal: AbortSignal.timeout(10000) });
  // The result narrows to a Position without a cast: on a history topic it
  // is one, elsewhere it has no epoch.
  if (stored.epoch !== undefined) {
    const at: Position = stored;
    console.log(at.epoch, at.offset);
  }
  const once: PublishResult = await client.publish("room:1", { text: "again" });
  if (once.epoch !== undefined) {
    const at: Position = once;
    console.log(at.offset);
  } else {
    const none: NoPosition = once;
    console.log(none.offset === undefined);
  }
  await client.publish("room:1", { text: "once" });
  const n: number = await client.call<number>("app.add", { a: 1, b: 2 });
  client.notify("typing", { room: "1" });
  console.log(n);

  const page = await client.presence("room:1", "");
  const all = await client.presenceAll("room:1");
  const stats = await client.presenceStats("room:1");
  console.log(page.cursor, page.clients[0]?.client, all.length, stats.clients + stats.users);

  try {
    await client.call("chat.say", { room: "1", text: "hi" });
  } catch (err) {
    if (err instanceof RPCError) {
      const code: number | "DISCONNECTED" | "CLOSED" | "QUEUE_FULL" = err.code;
      console.log(code, err.message, err.data?.retryAfterMs);
    }
  }
  const wait: number = backoff(2, 500, 20000, parseRetryAfterMs("retry_after_ms=300"), Math.random());
  console.log(wait, texts, states);
  client.close();
}
