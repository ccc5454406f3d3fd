package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/client"
	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/protocol"
)

// The subcommands people reach for first when trying the server: they
// read the same configuration as the server (--config, RTSERVER_*) and do
// their work through the handshake and client packages.

const toolsUsage = `Subcommands (each reads --config and RTSERVER_* like the server):
  rtserver token --user U [--ttl 1h]         print an HS256 token signed with auth.jwt.hmacSecret
  rtserver checktoken TOKEN                   verify a token as the handshake would; say which check fails
  rtserver sub [--user U | --token T] TOPIC   print each message of TOPIC as a JSON line
  rtserver pub [--user U | --token T] TOPIC DATA   publish DATA (JSON; anything else is sent as a string)
`

// runTool runs subcommand name, or reports ok=false when name is not one.
func runTool(name string, args, environ []string, stdout, stderr io.Writer) (code int, ok bool) {
	tools := map[string]func(*toolFlags) error{
		"token": toolToken, "checktoken": toolCheckToken, "sub": toolSub, "pub": toolPub,
	}
	tool := tools[name]
	if tool == nil {
		return 0, false
	}
	f := &toolFlags{fs: flag.NewFlagSet("rtserver "+name, flag.ContinueOnError), stdout: stdout, stderr: stderr}
	f.fs.SetOutput(stderr)
	f.fs.StringVar(&f.config, "config", "", "YAML configuration `file`")
	f.fs.StringVar(&f.user, "user", "", "the token's user (its sub)")
	f.fs.StringVar(&f.token, "token", "", "the token to connect with (sub, pub)")
	f.fs.DurationVar(&f.ttl, "ttl", time.Hour, "how long the token lasts (token; 0: no exp)")
	f.fs.StringVar(&f.url, "url", "", "the server's WebSocket URL (sub, pub; default: ws://<listen>/ws)")
	f.fs.IntVar(&f.count, "count", 0, "exit after this many messages (sub; 0: run until interrupted)")
	f.fs.Usage = func() { fmt.Fprint(stderr, toolsUsage, "\nFlags:\n"); f.fs.PrintDefaults() }
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	var loadArgs []string
	if f.config != "" {
		loadArgs = []string{"--config", f.config}
	}
	cfg, _, err := Load(loadArgs, environ)
	if err != nil {
		printConfigErrors(stderr, err)
		return 2, true
	}
	f.cfg = cfg
	if err := tool(f); err != nil {
		fmt.Fprintf(stderr, "rtserver %s: %v\n", name, err)
		return 1, true
	}
	return 0, true
}

type toolFlags struct {
	fs                       *flag.FlagSet
	config, user, token, url string
	ttl                      time.Duration
	count                    int
	cfg                      rtserver.Config
	stdout, stderr           io.Writer
}

func (f *toolFlags) args(n int, names string) ([]string, error) {
	a := f.fs.Args()
	if len(a) != n {
		return nil, fmt.Errorf("want %s, got %d arguments", names, len(a))
	}
	return a, nil
}

func toolToken(f *toolFlags) error {
	if _, err := f.args(0, "no arguments (--user U)"); err != nil {
		return err
	}
	tok, err := f.cfg.Auth.JWT.SignHMAC(f.user, f.ttl, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintln(f.stdout, tok)
	return nil
}

func toolCheckToken(f *toolFlags) error {
	a, err := f.args(1, "TOKEN")
	if err != nil {
		return err
	}
	id, err := f.cfg.Auth.JWT.Check(context.Background(), a[0])
	if errors.Is(err, handshake.ErrNoAuth) {
		return errors.New("auth.jwt has no key: the server accepts anonymous connections and checks no token")
	}
	if err != nil {
		r := handshake.RefusalOf(err)
		return fmt.Errorf("refused (%s): %s", r.Reason, r.Description)
	}
	exp := "never"
	if !id.Expires.IsZero() {
		exp = id.Expires.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(f.stdout, "ok: user %s, expires %s\n", id.User, exp)
	return nil
}

// dial connects with --token, or a token signed for --user, or none.
func (f *toolFlags) dial(ctx context.Context) (*client.Client, error) {
	url := f.url
	if url == "" {
		host, port, err := net.SplitHostPort(f.cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("listen %q: %w", f.cfg.Listen, err)
		}
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		url = "ws://" + net.JoinHostPort(host, port) + "/ws"
	}
	opts := client.Options{Token: f.token}
	if opts.Token == "" && f.user != "" {
		tok, err := f.cfg.Auth.JWT.SignHMAC(f.user, f.ttl, time.Now())
		if err != nil {
			return nil, err
		}
		opts.Token = tok
	}
	return client.Dial(ctx, url, &opts)
}

func toolSub(f *toolFlags) error {
	a, err := f.args(1, "TOPIC")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c, err := f.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	enough := make(chan struct{})
	seen := 0
	enc := json.NewEncoder(f.stdout)
	_, err = c.Subscribe(ctx, a[0], func(topic string, data json.RawMessage) {
		_ = enc.Encode(struct {
			Topic string          `json:"topic"`
			Data  json.RawMessage `json:"data"`
		}{topic, data})
		if seen++; seen == f.count {
			close(enough)
		}
	})
	if err != nil {
		return refusal("subscribe", a[0], err)
	}
	fmt.Fprintf(f.stderr, "subscribed to %s\n", a[0])
	select {
	case <-enough:
		return nil
	case <-ctx.Done():
		return nil
	case <-c.Done():
		return c.Err()
	}
}

func toolPub(f *toolFlags) error {
	a, err := f.args(2, "TOPIC DATA")
	if err != nil {
		return err
	}
	var data any = json.RawMessage(a[1])
	if !json.Valid([]byte(a[1])) {
		data = a[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := f.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return refusal("publish", a[0], c.Publish(ctx, a[0], data))
}

// refusal names the call and topic a server refused and, for the refusals
// a newcomer meets first, where to find out why.
func refusal(method, topic string, err error) error {
	if err == nil {
		return nil
	}
	var rpc *protocol.Error
	if !errors.As(err, &rpc) {
		return err
	}
	hint := ""
	switch rpc.Code {
	case protocol.CodeForbidden:
		hint = " (no topic grant allows it: docs/access-control.md; the server logs the deciding namespace at --log-level debug)"
	case protocol.CodeOverloaded, protocol.CodeRateLimited:
		hint = " (shed by admission: retry after the hint; docs/admission.md)"
	}
	return fmt.Errorf("%s %s refused: %w%s", method, topic, err, hint)
}
