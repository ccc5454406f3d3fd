// Command chat is a small chat room built on rtserver: a Go program that
// embeds a node, adds one application method (chat.say) with a rate limit,
// and serves a static page that talks to it with the browser client in
// clients/js.
//
//	go run ./examples/chat            # then open http://127.0.0.1:8080/
//
// chat.say validates {room, text} and publishes the message to the topic
// room:<room>; pages subscribe to that topic. The method belongs to the
// class "chat", limited to 5 calls per second per user (per IP when
// anonymous): past it the call answers -32002 RATE_LIMITED with a retry
// hint, and the page shows it. SIGTERM or SIGINT drains (clients are told,
// then closed with 1012 spread over -drain); a second signal stops at once.
package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/protocol"
	"github.com/rtserver/rtserver/server"
)

//go:embed static
var staticFiles embed.FS

// options are the command's flags.
type options struct {
	Listen         string
	MaxConnections int           // handshake.maxConnections; 0 = off
	Reject         string        // handshake.reject: "http" or "close"
	Drain          time.Duration // drain.duration
	// Assets is the directory served under /clients/js/: the browser client.
	// go:embed cannot reach outside this package's directory, so it is read
	// from disk; the default fits `go run ./examples/chat` from the repository
	// root.
	Assets string
}

func defaultOptions() options {
	return options{
		Listen: "127.0.0.1:8080",
		Reject: "http",
		Drain:  10 * time.Second,
		Assets: "clients/js",
	}
}

func main() {
	o := defaultOptions()
	flag.StringVar(&o.Listen, "listen", o.Listen, "HTTP listen address")
	flag.IntVar(&o.MaxConnections, "max-connections", o.MaxConnections, "open WebSocket connections at most (0 = no cap)")
	flag.StringVar(&o.Reject, "reject", o.Reject, "how a shed upgrade is refused: http (503) or close (upgrade, then close 1013)")
	flag.DurationVar(&o.Drain, "drain", o.Drain, "on SIGTERM, close clients spread over this window")
	flag.StringVar(&o.Assets, "assets", o.Assets, "directory of the browser client, served under /clients/js/")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(o, log); err != nil {
		log.Error("chat", "err", err)
		os.Exit(1)
	}
}

func run(o options, log *slog.Logger) error {
	a, err := newApp(o, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return err
	}
	log.Info("chat: open this in a browser", "url", "http://"+ln.Addr().String()+"/")

	// The first signal drains, a second one stops at once.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hardStop := make(chan struct{})
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sig)
	go func() {
		<-sig
		cancel()
		<-sig
		close(hardStop)
	}()
	return a.serve(ctx, ln, hardStop)
}

// app is the chat server: an rtserver node plus the static files.
type app struct {
	node    *rtserver.Node
	handler http.Handler // the node's endpoints and the static files
}

func newApp(o options, log *slog.Logger) (*app, error) {
	cfg := rtserver.DefaultConfig()
	cfg.Listen = o.Listen
	cfg.Logger = log
	cfg.DrainDuration = o.Drain
	cfg.Handshake.MaxConnections = o.MaxConnections
	switch o.Reject {
	case "http", "":
		cfg.Handshake.Reject = handshake.RejectHTTP
	case "close":
		cfg.Handshake.Reject = handshake.RejectClose
	default:
		return nil, fmt.Errorf("-reject: %q is neither http nor close", o.Reject)
	}
	cfg.Classes = map[string]message.Rule{
		"chat": {Rate: &message.Rate{Limit: 5, Per: time.Second, By: "user"}},
	}
	cfg.Methods = map[string]string{"chat.say": "chat"}
	node, err := rtserver.New(cfg)
	if err != nil {
		return nil, err
	}
	node.Handle("chat.say", say(node.Publish))

	if _, err := os.Stat(o.Assets + "/rtclient.js"); err != nil {
		return nil, fmt.Errorf("-assets: no rtclient.js in %q (run from the repository root, or point -assets at clients/js)", o.Assets)
	}
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, err
	}
	api := node.Handler()
	mux := http.NewServeMux()
	for _, p := range []string{"/ws", "/healthz", "/readyz", "/metrics"} {
		mux.Handle("GET "+p, api)
	}
	mux.Handle("GET /clients/js/", http.StripPrefix("/clients/js/", http.FileServer(http.Dir(o.Assets))))
	mux.Handle("GET /", http.FileServerFS(static))
	return &app{node: node, handler: mux}, nil
}

// serve serves a.handler on ln until ctx ends, then drains the node and
// returns. Closing hardStop during the drain closes the rest at once.
//
// Node.Serve owns the node's lifecycle (bus, pressure monitor, drain,
// shutdown) but serves only the node's own handler on the listener it is
// given, and Node has no way to add routes. So the node gets a listener
// that never yields a connection, and ln is served here with the static
// files beside the node's endpoints. Its first Accept call tells us the
// node has started, so no upgrade reaches it earlier.
func (a *app) serve(ctx context.Context, ln net.Listener, hardStop <-chan struct{}) error {
	nodeCtx, stopNode := context.WithCancel(ctx)
	defer stopNode()
	park := newParkedListener(ln.Addr())
	nodeDone := make(chan error, 1)
	go func() { nodeDone <- a.node.Serve(nodeCtx, park, hardStop) }()
	select {
	case <-park.accepting:
	case err := <-nodeDone:
		ln.Close()
		return err
	}

	srv := &http.Server{Handler: a.handler, ReadHeaderTimeout: 10 * time.Second}
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Serve(ln) }()

	var err error
	select {
	case err = <-nodeDone:
		srv.Close()
		<-httpDone
	case err = <-httpDone:
		// The listener failed: drain the node anyway, then report it.
		stopNode()
		err = errors.Join(err, <-nodeDone)
	}
	return err
}

// parkedListener is a net.Listener that never accepts a connection. Its
// first Accept closes accepting.
type parkedListener struct {
	addr      net.Addr
	accepting chan struct{}
	closed    chan struct{}
	onceAcc   sync.Once
	onceClose sync.Once
}

func newParkedListener(addr net.Addr) *parkedListener {
	return &parkedListener{addr: addr, accepting: make(chan struct{}), closed: make(chan struct{})}
}

func (l *parkedListener) Accept() (net.Conn, error) {
	l.onceAcc.Do(func() { close(l.accepting) })
	<-l.closed
	return nil, net.ErrClosed
}

func (l *parkedListener) Close() error {
	l.onceClose.Do(func() { close(l.closed) })
	return nil
}

func (l *parkedListener) Addr() net.Addr { return l.addr }

// Chat messages as published on room:<room> and returned by chat.say.
type chatMessage struct {
	Room string `json:"room"`
	From string `json:"from"`
	Text string `json:"text"`
	At   int64  `json:"at"` // Unix milliseconds, server clock
}

const (
	maxTextBytes = 2000
	maxNameBytes = 40
	roomPrefix   = "room:"
)

// say serves chat.say {room, text, name?}: it validates the params and
// publishes the message to room:<room>. The sender is the authenticated
// user when there is one, else the name the page gave (anonymous
// connections have no identity to check it against).
func say(publish func(topic string, data json.RawMessage) error) server.Handler {
	return func(ctx context.Context, r *server.Request) (any, error) {
		var p struct {
			Room string `json:"room"`
			Text string `json:"text"`
			Name string `json:"name"`
		}
		if len(r.Params) == 0 || json.Unmarshal(r.Params, &p) != nil {
			return nil, invalid("params must be {room, text}")
		}
		topic := roomPrefix + p.Room
		if p.Room == "" || protocol.CheckTopic(topic) != "" {
			return nil, invalid("room must be 1 to 251 characters of [A-Za-z0-9_.:/@-]")
		}
		text := strings.TrimSpace(p.Text)
		if text == "" || len(text) > maxTextBytes || !utf8.ValidString(text) {
			return nil, invalid(fmt.Sprintf("text must be 1 to %d bytes of UTF-8", maxTextBytes))
		}
		from := r.User
		if from == "" {
			from = strings.TrimSpace(p.Name)
			if from == "" || len(from) > maxNameBytes || !utf8.ValidString(from) {
				from = "anonymous"
			}
		}
		msg := chatMessage{Room: p.Room, From: from, Text: text, At: time.Now().UnixMilli()}
		data, err := json.Marshal(msg)
		if err != nil {
			return nil, err
		}
		if err := publish(topic, data); err != nil {
			return nil, err // answered -32603
		}
		return msg, nil
	}
}

func invalid(msg string) error {
	return protocol.NewError(protocol.CodeInvalidParams, msg, nil)
}
