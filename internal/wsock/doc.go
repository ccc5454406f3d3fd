// Package wsock is the socket layer beneath rtserver's WebSocket
// connections: everything that touches a socket's bytes without going
// through net/http or github.com/coder/websocket. It owns
//
//   - the wire format of the frames the server writes itself beneath the
//     WebSocket library (text frames, pings, close frames), and the little
//     it parses of a client's input (a pong or a close frame at the head);
//   - the socket calls that do not wait: a write(2) that stops at EAGAIN,
//     a read(2) of what has arrived, a MSG_PEEK that waits for readiness
//     without consuming, TIOCINQ (bytes waiting), and the check that an
//     idle client has gone;
//   - the small buffers a hijacked connection runs on;
//   - a request head read off a socket outside net/http (head.go): read
//     within its bounds (ReadHead, MaxHead), classified (ClassifyHead:
//     only a plain `GET path` head that net/http would read the same way
//     is taken; anything else is left to net/http with its bytes replayed,
//     Replay), turned into the *http.Request http.ReadRequest would make
//     (ParseHead), and answered with a response writer that supports
//     Hijack and writes the response head (Response, response.go);
//   - the scheduling nudges of a read goroutine (Yield, GrowStack).
//
// It must never know about JSON-RPC, topics, the upgrade gate (when to
// shed, caps, pacing) or connections' lifetimes, and never wait on a
// socket except where a function says so.
//
// # What it relies on
//
// From github.com/coder/websocket (pinned by this package's tests, which
// fail when an upgrade breaks one):
//   - a frame we write to the socket ourselves, unmasked, is read by its
//     peer as the message, close or ping it encodes;
//   - as a server it writes each control frame (ping, pong, close) in one
//     Write on the connection it got from Hijack, when the buffered writer
//     it got holds at least WriteBufferSize bytes, and never masks it: so
//     a Write that starts with CloseHead is its close frame;
//   - it reads through the net.Conn that Hijack returned (via the
//     bufio.Reader it got, which it may reset onto that conn), so a read it
//     would wait on can be seen by that conn's Read;
//   - it sets no deadline on the connection: one we set holds.
//
// From net/http: Hijack hands over the bytes a client sent after the
// request head in the bufio.Reader it returns (Buffered() > 0), and an
// empty reader otherwise, so a smaller one may replace it. A head that
// ClassifyHead calls simple is one net/http's server routes to `GET path`,
// and ParseHead makes of it what http.ReadRequest makes (the fuzz and
// property tests of head_test.go run both against net/http itself); the
// heads Response writes are read by net/http's client as the responses
// they mean (response_test.go).
//
// # Other systems
//
// The calls on a descriptor exist on Linux. Elsewhere Descriptor reports
// none, ReadNow reads nothing and AwaitGone never sees a client go: the
// callers then write through net.Conn from a writer goroutine, read a
// request head from a goroutine, and do not notice a client that leaves a
// queued upgrade. Portable makes Linux behave the same, for tests of those
// paths.
package wsock
