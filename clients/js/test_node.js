// Runs rtclient_test.js in Node.js, which has a WebSocket from version 22
// (20 with --experimental-websocket):
//
//	node --experimental-websocket test_node.js [ws://host:port/ws]
//
// With the URL of a running chat example (go run ./examples/chat) the live
// tests run against it too. Prints {passed, failures} as JSON; exits 1 on a
// failure.
import { run } from "./rtclient_test.js";

if (typeof WebSocket !== "function") {
  console.error("this Node.js has no WebSocket: use Node 22 or later, or 20 with --experimental-websocket");
  process.exit(2);
}
const res = await run({ url: process.argv[2] });
console.log(JSON.stringify(res));
process.exit(res.failures.length ? 1 : 0);
