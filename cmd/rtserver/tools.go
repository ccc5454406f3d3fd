package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/client"
	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/protocol"
)

// The subcommands people reach for first when trying the server: they
// read the same configuration as the server (--config, RTSERVER_*) and do
// their work through the handshake and client packages.

const toolsUsage = `Subcommands (each reads --config and RTSERVER_* like the server; flags go before arguments;
rtserver SUBCOMMAND --help lists its flags):
  rtserver token --user U [--ttl 1h]         print an HS256 token signed with auth.jwt.hmacSecret
  rtserver checktoken TOKEN                   verify a token as the handshake would; say which check fails
  rtserver sub [--user U | --token T] [--since EPOCH:OFFSET] TOPIC
                                              print each message of TOPIC as a JSON line; reconnects and recovers
  rtserver pub [--user U | --token T] TOPIC DATA   publish DATA (JSON; anything else is sent as a string)
  rtserver presence [--user U | --token T] TOPIC   print who is in TOPIC, one JSON line per connection
  rtserver history [--user U | --token T] [--since EPOCH:OFFSET] [--count N] TOPIC
                                              print TOPIC's stored messages as JSON lines, as sub does
`

// The flags a subcommand may take: each declares only those it reads.
const (
	flagUser = 1 << iota
	flagToken
	flagTTL
	flagURL
	flagCount
	flagSince
	flagRaw  // sub: bytes to stdout, over the binary protocol
	flagFile // pub: a file's bytes, over the binary protocol
)

// A tool is one subcommand: its arguments, what it does, its flags.
type tool struct {
	args, summary string
	flags         int
	run           func(*toolFlags) error
}

var tools = map[string]tool{
	"token":      {"", "print an HS256 token for --user, signed with auth.jwt.hmacSecret", flagUser | flagTTL, toolToken},
	"checktoken": {"TOKEN", "verify TOKEN as the handshake would; say which check fails", 0, toolCheckToken},
	"sub": {"TOPIC", "print each message of TOPIC as a JSON line ({\"topic\",\"offset\",\"data\"}, offset on a history topic);\n" +
		"reconnects when the server drains or sheds, recovering missed messages on a history topic;\n" +
		"--raw writes each message's data bytes instead, exactly as published (JSON data as its JSON text)",
		flagUser | flagToken | flagTTL | flagURL | flagCount | flagSince | flagRaw, toolSub},
	"pub": {"TOPIC [DATA]", "publish DATA to TOPIC (JSON; anything else is sent as a string), or with --file a file's bytes\n" +
		"as binary data (docs/protocol.md); on a history topic print the message's position {\"epoch\",\"offset\"}",
		flagUser | flagToken | flagTTL | flagURL | flagFile, toolPub},
	// presence and history take sub's flags, so that a command line that
	// subscribes also lists or reads (--since and --count mean what they
	// can for each).
	"presence": {"TOPIC", "print who is in TOPIC (a topic with presence: docs/presence.md), one JSON line per connection\n" +
		"({\"client\",\"user\"}; user \"\" when anonymous), then the counts on stderr; --count N stops after N lines",
		flagUser | flagToken | flagTTL | flagURL | flagCount | flagSince, toolPresence},
	"history": {"TOPIC", "print TOPIC's stored messages (a history topic: docs/history.md) as JSON lines, as sub does:\n" +
		"the newest --count (default 100, at most 1000), or those after --since; the topic's position on stderr",
		flagUser | flagToken | flagTTL | flagURL | flagCount | flagSince, toolHistory},
}

// toolNames lists the subcommands, for the error on an unknown one.
const toolNames = "token, checktoken, sub, pub, presence, history"

// runTool runs subcommand name, or reports ok=false when name is not one.
func runTool(name string, args, environ []string, stdout, stderr io.Writer) (code int, ok bool) {
	t, ok := tools[name]
	if !ok {
		return 0, false
	}
	f := &toolFlags{fs: flag.NewFlagSet("rtserver "+name, flag.ContinueOnError), name: name, tool: t, stdout: stdout, stderr: stderr}
	fs := f.fs
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "config", "", "YAML configuration `file`")
	if t.flags&flagUser != 0 {
		fs.StringVar(&f.user, "user", "", "sign a token for this `user` (its sub) with auth.jwt.hmacSecret")
	}
	if t.flags&flagToken != 0 {
		fs.StringVar(&f.token, "token", "", "connect with this `token` (not with --user)")
	}
	if t.flags&flagTTL != 0 {
		fs.DurationVar(&f.ttl, "ttl", time.Hour, "how long a signed token lasts (0: no exp)")
	}
	if t.flags&flagURL != 0 {
		fs.StringVar(&f.url, "url", "", "the server's WebSocket `URL` (default: ws://<listen>/ws)")
	}
	if t.flags&flagCount != 0 {
		fs.IntVar(&f.count, "count", 0, "exit after this many messages (0: run until interrupted)")
	}
	if t.flags&flagRaw != 0 {
		fs.BoolVar(&f.raw, "raw", false, "write each message's data bytes to stdout as published, nothing between them (the binary protocol)")
	}
	if t.flags&flagFile != 0 {
		fs.StringVar(&f.file, "file", "", "publish this `file`'s bytes as binary data (the binary protocol; no DATA argument)")
	}
	if t.flags&flagSince != 0 {
		fs.Func("since", "start after this `EPOCH:OFFSET` of a history topic (a position pub or sub printed)", f.parseSince)
	}
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: rtserver %s [flags] %s\n  %s\n\nFlags:\n", name, t.args, strings.ReplaceAll(t.summary, "\n", "\n  "))
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	fs.Usage = func() {} // printed below: on stdout when asked for, on stderr after a mistake
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return 0, true
		}
		usage(stderr)
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
	if err := t.run(f); err != nil {
		fmt.Fprintf(stderr, "rtserver %s: %v\n", name, err)
		return 1, true
	}
	return 0, true
}

type toolFlags struct {
	fs                       *flag.FlagSet
	name                     string
	tool                     tool
	config, user, token, url string
	ttl                      time.Duration
	count                    int
	raw                      bool   // sub --raw
	file                     string // pub --file
	since                    client.Position
	cfg                      rtserver.Config
	stdout, stderr           io.Writer
}

// args returns the n arguments, or says what was wrong: a flag after the
// arguments is the usual slip (the flag package stops at the first
// argument).
func (f *toolFlags) args(n int) ([]string, error) {
	a := f.fs.Args()
	if len(a) == n {
		return a, nil
	}
	want := f.tool.args
	if want == "" {
		want = "no arguments"
	}
	for _, arg := range a {
		if strings.HasPrefix(arg, "-") {
			return nil, fmt.Errorf("%s after the arguments: flags go before them (rtserver %s [flags] %s)", arg, f.name, f.tool.args)
		}
	}
	return nil, fmt.Errorf("want %s, got %d arguments (rtserver %s --help)", want, len(a), f.name)
}

// parseSince reads --since EPOCH:OFFSET; the epoch may itself hold colons.
func (f *toolFlags) parseSince(v string) error {
	i := strings.LastIndexByte(v, ':')
	if i <= 0 {
		return errors.New("want EPOCH:OFFSET")
	}
	off, err := strconv.ParseUint(v[i+1:], 10, 64)
	if err != nil {
		return fmt.Errorf("want EPOCH:OFFSET: offset %q is not a number", v[i+1:])
	}
	f.since = client.Position{Epoch: v[:i], Offset: off}
	return nil
}

// sign signs a token for --user.
func (f *toolFlags) sign() (string, error) {
	if len(f.cfg.Auth.JWT.HMACSecret) == 0 {
		return "", errors.New("--user needs auth.jwt.hmacSecret in the config to sign a token")
	}
	if !handshake.ValidUser(f.user) {
		return "", fmt.Errorf("--user must be 1 to %d bytes of UTF-8 without control characters: the server refuses any other sub", handshake.MaxUserLen)
	}
	return f.cfg.Auth.JWT.SignHMAC(f.user, f.ttl, time.Now())
}

func toolToken(f *toolFlags) error {
	if _, err := f.args(0); err != nil {
		return err
	}
	if f.user == "" {
		return errors.New("--user is required: the token's user (its sub)")
	}
	tok, err := f.sign()
	if err != nil {
		return err
	}
	fmt.Fprintln(f.stdout, tok)
	return nil
}

func toolCheckToken(f *toolFlags) error {
	a, err := f.args(1)
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

// dial connects with --token, or a token signed for --user (a fresh one
// for every reconnect), or none.
func (f *toolFlags) dial(ctx context.Context, opts client.Options) (*client.Client, error) {
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
	switch {
	case f.user != "" && f.token != "":
		return nil, errors.New("--user and --token are both set: give one (--token connects with that token, --user signs one)")
	case f.token != "":
		opts.Token = f.token
	case f.user != "":
		if _, err := f.sign(); err != nil {
			return nil, err
		}
		opts.TokenFunc = func(context.Context) (string, error) { return f.sign() }
	}
	// A server that sheds the upgrade for now (starting, draining, a full
	// door) says when to come back: do, until ctx ends.
	for {
		c, err := client.Dial(ctx, url, &opts)
		var he *client.HandshakeError
		if !errors.As(err, &he) || he.Status != http.StatusServiceUnavailable || he.RetryAfter <= 0 {
			return c, err
		}
		select {
		case <-time.After(he.RetryAfter):
		case <-ctx.Done():
			return nil, err
		}
	}
}

// subLine is one line sub prints: Offset only on a history topic.
type subLine struct {
	Topic  string          `json:"topic"`
	Offset uint64          `json:"offset,omitempty"`
	Data   json.RawMessage `json:"data"`
}

// toolSub prints each message as a JSON line. It reconnects when the
// connection drops (a drain's 1012, a 1013): on a history topic the
// client recovers from the last offset printed, so nothing is missed or
// printed twice; when it cannot, it says so on stderr.
func toolSub(f *toolFlags) error {
	a, err := f.args(1)
	if err != nil {
		return err
	}
	if f.count < 0 {
		return fmt.Errorf("--count %d: want 0 (run until interrupted) or a number of messages", f.count)
	}
	topic := a[0]
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// The replay of a --since subscription may arrive before Subscribe
	// returns: handlers wait for "subscribed to" so the lines come in the
	// order things happened.
	subscribed := make(chan struct{})
	opts := client.DefaultOptions()
	opts.Binary = f.raw
	// The client reports Connected once it has resubscribed, after the
	// recovery it made on the new connection: "reconnected" is said by
	// whichever comes first, so it precedes what was recovered, and is
	// said even when --count is reached by recovered messages alone.
	var (
		lineMu       sync.Mutex
		connected    bool
		reconnecting bool
	)
	sayReconnected := func() {
		if reconnecting {
			reconnecting = false
			fmt.Fprintln(f.stderr, "reconnected")
		}
	}
	opts.OnState = func(s client.State, err error) {
		lineMu.Lock()
		defer lineMu.Unlock()
		switch {
		case s == client.Disconnected:
			if connected {
				reconnecting = true
			}
			fmt.Fprintf(f.stderr, "disconnected (%v): reconnecting\n", err)
		case s == client.Connected:
			connected = true
			sayReconnected()
		}
	}
	opts.OnRecovery = func(topic string, recovered bool, reason string) {
		<-subscribed
		lineMu.Lock()
		defer lineMu.Unlock()
		sayReconnected()
		if recovered {
			fmt.Fprintf(f.stderr, "recovered %s: missed messages follow\n", topic)
		} else {
			fmt.Fprintf(f.stderr, "could not recover %s (%s): messages were missed\n", topic, reason)
		}
	}
	c, err := f.dial(ctx, *opts)
	if err != nil {
		return err
	}
	defer c.Close()
	enough := make(chan struct{})
	seen := 0
	enc := json.NewEncoder(f.stdout)
	_, err = c.SubscribeSince(ctx, topic, f.since, func(m client.Message) {
		<-subscribed
		if f.raw {
			b, ok := client.BytesOf(m.Data)
			if !ok {
				b = m.Data // JSON data: its text
			}
			_, _ = f.stdout.Write(b)
		} else {
			_ = enc.Encode(subLine{m.Topic, m.Offset, m.Data})
		}
		if seen++; seen == f.count {
			close(enough)
		}
	})
	if err != nil {
		close(subscribed)
		return refusal("subscribe", topic, err)
	}
	fmt.Fprintf(f.stderr, "subscribed to %s\n", topic)
	close(subscribed)
	select {
	case <-enough:
		return nil
	case <-ctx.Done():
		return nil
	case <-c.Done():
		return c.Err()
	}
}

// toolPub publishes once (retrying only what the server shed, with the
// same idempotency key) and prints the position on a history topic.
func toolPub(f *toolFlags) error {
	a, data, err := f.pubData()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := f.dial(ctx, client.Options{Binary: f.file != ""})
	if err != nil {
		return err
	}
	defer c.Close()
	// A refusal (BUS, HISTORY_UNAVAILABLE, a shed) is retried with the
	// same key for a moment, then named: a one-shot command must not sit
	// out an outage.
	pctx, pcancel := context.WithTimeout(ctx, pubRetryFor)
	defer pcancel()
	pos, err := c.PublishAt(pctx, a[0], data)
	if err != nil {
		return refusal("publish", a[0], err)
	}
	if pos.Epoch != "" {
		return json.NewEncoder(f.stdout).Encode(pos)
	}
	return nil
}

// pubData is pub's arguments and what it publishes: DATA, or with
// --file the file's bytes.
func (f *toolFlags) pubData() ([]string, any, error) {
	if f.file != "" {
		a, err := f.args(1)
		if err != nil {
			return nil, nil, err
		}
		b, err := os.ReadFile(f.file)
		if err != nil {
			return nil, nil, err
		}
		return a, client.Bytes(b), nil
	}
	a, err := f.args(2)
	if err != nil {
		return nil, nil, err
	}
	if !json.Valid([]byte(a[1])) {
		return a, a[1], nil
	}
	return a, json.RawMessage(a[1]), nil
}

// pubRetryFor is how long rtserver pub retries a refused publish before it
// names the refusal and exits.
const pubRetryFor = 1500 * time.Millisecond

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
		switch reason := refusalReason(rpc); reason {
		case "BUS":
			hint = " (reason BUS: the server cannot reach Redis, or its bus is full; nothing was delivered; docs/operations.md)"
		case protocol.ReasonHistoryUnavailable:
			hint = " (reason HISTORY_UNAVAILABLE: the server cannot reach the topic's history store; nothing was stored; docs/operations.md)"
		case "":
		default:
			hint = " (reason " + reason + ": shed by admission; retry after the hint; docs/admission.md)"
		}
	}
	return fmt.Errorf("%s %s refused: %w%s", method, topic, err, hint)
}

// refusalReason is the reason in a -32001 or -32002 error's data ("" when
// there is none).
func refusalReason(e *protocol.Error) string {
	b, err := json.Marshal(e.Data)
	if err != nil {
		return ""
	}
	var d struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(b, &d)
	return d.Reason
}

// toolPresence prints a topic's presence, every page, one JSON line per
// connection, and the counts on stderr.
func toolPresence(f *toolFlags) error {
	a, err := f.args(1)
	if err != nil {
		return err
	}
	if f.since != (client.Position{}) {
		return errors.New("--since is a position in a history topic: presence has none (rtserver history reads one)")
	}
	if f.count < 0 {
		return fmt.Errorf("--count %d: want 0 (every connection) or a number of lines", f.count)
	}
	topic := a[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := f.dial(ctx, client.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	stats, err := c.PresenceStats(ctx, topic)
	if err != nil {
		return refusal("presence", topic, err)
	}
	enc := json.NewEncoder(f.stdout)
	printed, cursor := 0, ""
	for {
		p, err := c.Presence(ctx, topic, cursor)
		if err != nil {
			return refusal("presence", topic, err)
		}
		for _, e := range p.Clients {
			if f.count > 0 && printed == f.count {
				break
			}
			_ = enc.Encode(e)
			printed++
		}
		if p.Cursor == "" || (f.count > 0 && printed == f.count) {
			break
		}
		cursor = p.Cursor
	}
	fmt.Fprintf(f.stderr, "%s: %d connections, %d users\n", topic, stats.Clients, stats.Users)
	return nil
}

// toolHistory prints a history topic's stored messages as sub prints
// messages, and the topic's position on stderr (for sub --since).
func toolHistory(f *toolFlags) error {
	a, err := f.args(1)
	if err != nil {
		return err
	}
	if f.count < 0 || f.count > 1000 {
		return fmt.Errorf("--count %d: want 0 (the server's default, 100) to 1000 messages", f.count)
	}
	topic := a[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := f.dial(ctx, client.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	page, err := c.History(ctx, topic, f.since, f.count)
	if err != nil {
		return refusal("history", topic, err)
	}
	enc := json.NewEncoder(f.stdout)
	for _, m := range page.Messages {
		_ = enc.Encode(subLine{topic, m.Offset, m.Data})
	}
	if f.since.Epoch != "" && f.since.Epoch != page.Epoch {
		fmt.Fprintf(f.stderr, "%s is in another epoch than --since: the messages after it are gone\n", topic)
	}
	pos, _ := json.Marshal(client.Position{Epoch: page.Epoch, Offset: page.Offset})
	fmt.Fprintf(f.stderr, "position: %s\n", pos)
	return nil
}
