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
//
// Topic grants: clients may subscribe to room:* and announce:*, and to
// user:<their user> only; they publish nothing themselves (chat.say and
// the server API publish from the server's side). With -api-key the
// server API is on (announcements and private messages from a backend, or
// curl); with -demo-auth the page signs in as ?user=NAME, or the guest
// name it shows, with a token from GET /token (a demo: anyone may take any
// name).
//
// Rooms and announcements keep history (docs/history.md): a page shows a
// room's recent messages when it joins and recovers what it missed after
// a reconnect. With -redis the instances sharing that Redis are one fleet
// and the history survives a restart; without it a restart loses it, and
// the page says so and reloads.
package main

import (
	"context"
	"embed"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
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
	// APIKey turns the server API on (POST /api/...), on the same
	// listener; "" = off.
	APIKey string
	// DemoAuth is an HS256 secret: connections need a JWT, which GET
	// /token?user=NAME hands to anyone who asks (a demo of private topics,
	// not authentication). "" = anonymous connections, no /token.
	DemoAuth string
	// TokenTTL is the lifetime of a /token token; 0 = one hour. The page
	// refreshes it on the server's tokenExpiring notice, which comes
	// RefreshNotice (0 = 30s) before it expires.
	TokenTTL      time.Duration
	RefreshNotice time.Duration
	// Redis is redis.url: instances sharing it are one fleet, and rooms'
	// history lives there, so it survives a restart; "" = one instance
	// with the in-memory bus, whose history a restart loses.
	Redis string
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
	flag.StringVar(&o.APIKey, "api-key", o.APIKey, "turn the server API on with this key (POST /api/publish ...)")
	flag.StringVar(&o.DemoAuth, "demo-auth", o.DemoAuth, "HS256 secret: require tokens and mint them at GET /token?user=NAME (demo only)")
	flag.DurationVar(&o.TokenTTL, "token-ttl", o.TokenTTL, "lifetime of a /token token (0 = 1h); pages refresh it before it expires")
	flag.DurationVar(&o.RefreshNotice, "refresh-notice", o.RefreshNotice, "how long before a token expires the server says so (0 = 30s)")
	flag.StringVar(&o.Redis, "redis", o.Redis, "redis:// URL: run several instances as one fleet, history kept in Redis (\"\" = one instance, history in memory)")
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
	return rtserver.RunUntilSignal(a.node, ln)
}

// app is the chat server: an rtserver node plus the static files.
type app struct {
	node *rtserver.Node
}

func newApp(o options, log *slog.Logger) (*app, error) {
	cfg := rtserver.DefaultConfig()
	cfg.Listen = o.Listen
	cfg.Drain.Duration = o.Drain
	cfg.Handshake.MaxConnections = o.MaxConnections
	switch o.Reject {
	case "http", "":
		cfg.Handshake.Reject = handshake.RejectHTTP
	case "close":
		cfg.Handshake.Reject = handshake.RejectClose
	default:
		return nil, fmt.Errorf("-reject: %q is neither http nor close", o.Reject)
	}
	cfg.Admission.Classes = map[string]message.Rule{
		"chat": {Rate: &message.Rate{Limit: 5, Per: time.Second, By: "user"}},
	}
	cfg.Admission.Methods = map[string]string{"chat.say": "chat"}
	cfg.Topics = topicGrants()
	cfg.Redis.URL = o.Redis
	cfg.API.Key = o.APIKey
	if o.DemoAuth != "" {
		cfg.Auth.JWT.HMACSecret = []byte(o.DemoAuth)
	}
	cfg.Auth.JWT.RefreshNotice = o.RefreshNotice
	node, err := rtserver.New(cfg, rtserver.Deps{Logger: log})
	if err != nil {
		return nil, err
	}
	node.Handle("chat.say", say(node.Publish))
	if o.DemoAuth != "" {
		node.HandleHTTP("GET /token", demoTokens([]byte(o.DemoAuth), o.TokenTTL))
	}

	if _, err := os.Stat(o.Assets + "/rtclient.js"); err != nil {
		return nil, fmt.Errorf("-assets: no rtclient.js in %q (run from the repository root, or point -assets at clients/js)", o.Assets)
	}
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, err
	}
	node.HandleHTTP("GET /clients/js/", http.StripPrefix("/clients/js/", http.FileServer(http.Dir(o.Assets))))
	node.HandleHTTP("GET /", http.FileServerFS(static))
	return &app{node: node}, nil
}

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
