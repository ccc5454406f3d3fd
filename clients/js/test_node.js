// Runs rtclient_test.js in Node.js, which has a WebSocket from version 22
// (20 with --experimental-websocket):
//
//	node --experimental-websocket test_node.js [ws://host:port/ws]
//
// With the URL of a running chat example (go run ./examples/chat) the live
// tests run against it too; the closed-port tests always run, against a
// loopback port this process listened on and let go. Prints {passed, failures} as JSON; exits 1 on a
// failure.
import { createServer } from "node:net";
import { run } from "./rtclient_test.js";

if (typeof WebSocket !== "function") {
  console.error("this Node.js has no WebSocket: use Node 22 or later, or 20 with --experimental-websocket");
  process.exit(2);
}
// A port that was free a moment ago and is closed now: connecting to it
// is refused.
const closedPort = await new Promise((resolve, reject) => {
  const srv = createServer();
  srv.on("error", reject);
  srv.listen(0, "127.0.0.1", () => {
    const { port } = srv.address();
    srv.close(() => resolve(port));
  });
});
const res = await run({ url: process.argv[2], closedURL: `ws://127.0.0.1:${closedPort}/ws` });
console.log(JSON.stringify(res));
process.exit(res.failures.length ? 1 : 0);
