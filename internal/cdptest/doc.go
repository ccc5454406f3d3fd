// Package cdptest is a minimal Chrome DevTools Protocol driver for the
// browser tests (the chat example's and the end-to-end suite's): it starts
// headless Chromium with a fresh profile, speaks CDP over the browser's
// WebSocket (flattened sessions, one per page), and evaluates JavaScript
// in pages. It has no module dependency beyond github.com/coder/websocket.
package cdptest
