// Package wsock is the socket layer beneath rtserver's WebSocket
// connections: everything that touches a socket's bytes without going
// through net/http or github.com/coder/websocket. It owns
//
//   - the frame codec after the upgrade (RFC 6455 section 5): the frames
//     the server writes (text frames, pings, pongs, close frames) and the
//     reader of a client's frames (read.go: ReadMessage), which checks the
//     framing, masks, reserved bits and opcodes, joins fragments, answers
//     control frames, runs the closing handshake, bounds a message
//     (limits.maxMessageBytes) and checks text UTF-8 as it arrives (UTF8,
//     Payload), failing at the first byte that cannot be UTF-8 even when
//     a fragment or a read splits the character. Where the RFC leaves a
//     choice it does what the WebSocket library does (the same close
//     codes and reasons), held to it by a differential fuzz target;
//   - the socket calls that do not wait: a write(2) that stops at EAGAIN,
//     a read(2) of what has arrived, a MSG_PEEK that waits for readiness
//     without consuming, and the check that an idle client has gone;
//   - the socket under a connection after the upgrade (Conn, conn.go):
//     the hijack that makes it (Upgrade), the frames written under one
//     lock (on the portable path shared with the WebSocket library, which
//     reads and answers control frames there), the keepalive state,
//     the frames a publisher holds until its read would wait (Hold), and
//     the mark of a message being read that the keepalive checks against
//     limits.messageTimeout (MessageOverdue). The server holds no socket
//     call of its own;
//   - the small buffers a hijacked connection runs on;
//   - a request head read off a socket outside net/http (head.go): read
//     within its bounds (ReadHead, MaxHead), classified (ClassifyHead:
//     only a plain `GET path` head that net/http would read the same way
//     is taken; anything else is left to net/http with its bytes replayed,
//     Replay), turned into the *http.Request http.ReadRequest would make
//     (ParseHead), and answered with a response writer that supports
//     Hijack and writes the response head (Response, response.go), or
//     upgraded by it directly when the WebSocket library would accept the
//     upgrade (Response.Accept, accept.go: the same checks and the same
//     subprotocol choice, held to the library's by a differential test;
//     a request it does not take is left to the library, which answers
//     every refusal);
//   - a connection taken off a TCP listener as a bare descriptor
//     (RawListener, acceptfd_linux.go), for one the server answers at
//     once and closes (ReadFD, SendLastFD, CloseFD) without net's socket
//     options, the netpoller or a net.Conn, and made the net.Conn net's
//     accept would have returned when it must be served after all
//     (ConnFromFD);
//   - the scheduling nudges of a read goroutine (Yield, GrowStack);
//   - the readiness poller that lets an idle connection wait without a
//     goroutine (Poller), the in-memory connections that park as a
//     socket in it does (Parkable: an event stream's), and the state
//     word that resumes its owner exactly once however wake-ups race
//     (Parking); and the first read of a woken connection, which may take
//     the client's close frame on the waker's goroutine (TakeClose).
//
// It must never know about JSON-RPC, topics, the upgrade gate (when to
// shed, caps, pacing) or connections' lifetimes, and never wait on a
// socket except where a function says so.
//
// # What it relies on
//
// From github.com/coder/websocket, which makes the opening handshake of
// every upgrade that net/http served or that runs on the portable path,
// and, on the portable path only, reads the client's frames
// and writes control frames (pinned by this package's tests, which fail
// when an upgrade breaks one):
//   - after Accept it reads or writes nothing of the connection unless
//     asked (Reader, Close, Ping), and CloseNow only closes the socket: on
//     the fast path it is asked for nothing else;
//   - a frame we write to the socket ourselves, unmasked, is read by its
//     peer as the message, close or ping it encodes;
//   - as a server it writes each control frame (ping, pong, close) in one
//     Write on the connection it got from Hijack, when the buffered writer
//     it got holds at least WriteBufferSize bytes, and never masks it: so
//     a Write that starts with CloseHead is its close frame;
//   - it reads through the net.Conn that Hijack returned (via the
//     bufio.Reader it got, which it may reset onto that conn), so a read it
//     would wait on can be seen by that conn's Read;
//   - it sets no deadline on the connection: one we set holds;
//   - its reader's messages, frames written and ends on any input are
//     ReadMessage's (FuzzReaderMatchesLibrary).
//
// From Linux and the Go runtime (the Poller, pinned by its tests):
//   - epoll reports a socket armed EPOLLIN|EPOLLRDHUP|EPOLLONESHOT, level
//     triggered, once when it has bytes, its end or an error, and at once
//     when armed with input already waiting; EPOLL_CTL_MOD fails with
//     ENOENT for a socket not in the set;
//   - closing a descriptor takes it out of every epoll set (no other
//     reference to its file exists: the runtime never duplicates a
//     socket's descriptor), so a closed socket is never reported and a
//     reused descriptor starts outside the set; sockets are armed through
//     syscall.RawConn.Control, which holds the descriptor open meanwhile;
//   - an epoll descriptor made non-blocking and given to os.NewFile is in
//     the runtime's poller, which reports it readable (edge triggered)
//     whenever an event is queued in the set, so a wait that found the set
//     empty misses nothing that comes after.
//
// From net/http: Hijack hands over the bytes a client sent after the
// request head in the bufio.Reader it returns (Buffered() > 0), and an
// empty reader otherwise, so a smaller one may replace it. The WebSocket
// library's Accept then moves those bytes into an io.MultiReader in front
// of the connection, where Buffered no longer counts them: whoever waits on
// the socket when the reader looks empty must first read them back. A head
// that ClassifyHead calls simple is one net/http's server routes to `GET
// path`, and ParseHead makes of it what http.ReadRequest makes (the fuzz
// and property tests of head_test.go run both against net/http itself);
// the heads Response writes are read by net/http's client as the responses
// they mean (response_test.go).
//
// # Other systems
//
// The calls on a descriptor exist on Linux. Elsewhere Descriptor reports
// none, ReadNow reads nothing, and AwaitGone and a served request's
// context (its Gone) never see a client go: the
// callers then write through net.Conn from a writer goroutine, read a
// request head from a goroutine, and do not notice a client that leaves a
// queued upgrade; there is no Poller (NewPoller fails), so each idle
// connection keeps a goroutine waiting on its socket. Portable makes Linux
// behave the same, for tests of those paths; Upgrade.Portable does it for
// the connections of one server (limits.portableSockets, the operator's
// switch for a platform or kernel where the fast path misbehaves).
// Elsewhere, in Portable mode and for a listener that is not TCP,
// NewRawListener makes none: net's accept takes every connection.
package wsock
