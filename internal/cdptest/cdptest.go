package cdptest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// ChromiumPath is where Debian's chromium package installs the browser.
const ChromiumPath = "/usr/bin/chromium"

// Browser is a headless Chromium process and its DevTools connection.
type Browser struct {
	cmd  *exec.Cmd
	dir  string
	ws   *websocket.Conn
	stop context.CancelFunc // ends the read loop
	done chan struct{}      // read loop ended

	mu      sync.Mutex
	nextID  int64
	calls   map[int64]chan cdpReply
	waiters []*eventWaiter
	err     error // why the read loop ended
	stderr  []string
}

type cdpReply struct {
	Result json.RawMessage
	Err    error
}

type eventWaiter struct {
	session, method string
	ch              chan json.RawMessage // 1-buffered
}

// Start starts headless Chromium with a fresh profile and connects
// to its DevTools endpoint.
func Start() (*Browser, error) {
	if _, err := os.Stat(ChromiumPath); err != nil {
		return nil, fmt.Errorf("the browser tests need Chromium at %s: install Debian's package with `apt-get install chromium` (%v)", ChromiumPath, err)
	}
	dir, err := os.MkdirTemp("", "chat-chromium-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(ChromiumPath,
		"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--disable-extensions", "--mute-audio",
		// Pages other than the focused one must keep their timers running
		// at full speed: a reconnect timer aligned to a 1 s throttle would
		// only slow the tests down.
		"--disable-background-timer-throttling", "--disable-renderer-backgrounding",
		"--disable-backgrounding-occluded-windows",
		"--user-data-dir="+dir, "--remote-debugging-port=0", "about:blank")
	// Its own process group, so the renderers and helpers it forks go with it.
	ownGroup(cmd)
	cmd.Stdout = io.Discard
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", ChromiumPath, err)
	}
	b := &Browser{cmd: cmd, dir: dir, calls: map[int64]chan cdpReply{}, done: make(chan struct{})}

	// The DevTools address is printed on stderr; the rest of stderr is
	// kept (bounded) for failure messages, and drained so Chromium never
	// blocks on a full pipe.
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(errPipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, "DevTools listening on "); ok {
				select {
				case addr <- strings.TrimSpace(rest):
				default:
				}
			}
			b.mu.Lock()
			if len(b.stderr) < 200 {
				b.stderr = append(b.stderr, line)
			}
			b.mu.Unlock()
		}
		close(addr)
	}()

	var url string
	select {
	case u, ok := <-addr:
		if !ok {
			b.Kill()
			return nil, fmt.Errorf("chromium exited before printing its DevTools address:\n%s", b.StderrText())
		}
		url = u
	case <-time.After(30 * time.Second):
		b.Kill()
		return nil, fmt.Errorf("chromium printed no DevTools address in 30s:\n%s", b.StderrText())
	}
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	ws, _, err := websocket.Dial(dctx, url, nil)
	cancel()
	if err != nil {
		b.Kill()
		return nil, fmt.Errorf("dial DevTools %s: %w", url, err)
	}
	ws.SetReadLimit(64 << 20)
	b.ws = ws
	ctx, stop := context.WithCancel(context.Background())
	b.stop = stop
	go b.readLoop(ctx)
	return b, nil
}

// StderrText is what Chromium printed on stderr (bounded), for failure messages.
func (b *Browser) StderrText() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.stderr, "\n")
}

// readLoop routes replies to their callers and events to their waiters.
func (b *Browser) readLoop(ctx context.Context) {
	defer close(b.done)
	var err error
	for {
		var typ websocket.MessageType
		var data []byte
		typ, data, err = b.ws.Read(ctx)
		if err != nil {
			break
		}
		if typ != websocket.MessageText {
			continue
		}
		var m struct {
			ID        int64           `json:"id"`
			Method    string          `json:"method"`
			SessionID string          `json:"sessionId"`
			Params    json.RawMessage `json:"params"`
			Result    json.RawMessage `json:"result"`
			Error     *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
				Data    string `json:"data"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch, ok := b.calls[m.ID]; ok {
				delete(b.calls, m.ID)
				r := cdpReply{Result: m.Result}
				if m.Error != nil {
					r.Err = fmt.Errorf("cdp error %d: %s %s", m.Error.Code, m.Error.Message, m.Error.Data)
				}
				ch <- r
			}
		} else if m.Method != "" {
			for i, w := range b.waiters {
				if w.method == m.Method && w.session == m.SessionID {
					w.ch <- m.Params
					b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
					break
				}
			}
		}
		b.mu.Unlock()
	}
	b.mu.Lock()
	b.err = fmt.Errorf("devtools connection: %w", err)
	for id, ch := range b.calls {
		ch <- cdpReply{Err: b.err}
		delete(b.calls, id)
	}
	b.mu.Unlock()
}

// send runs one CDP command (in session, or on the browser when session is
// empty) and decodes its result into out (may be nil).
func (b *Browser) send(ctx context.Context, session, method string, params, out any) error {
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		return b.err
	}
	b.nextID++
	id := b.nextID
	ch := make(chan cdpReply, 1)
	b.calls[id] = ch
	b.mu.Unlock()

	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err == nil {
		err = b.ws.Write(ctx, websocket.MessageText, data)
	}
	if err != nil {
		b.forget(id)
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case r := <-ch:
		if r.Err != nil {
			return fmt.Errorf("%s: %w", method, r.Err)
		}
		if out != nil {
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-ctx.Done():
		b.forget(id)
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

func (b *Browser) forget(id int64) {
	b.mu.Lock()
	delete(b.calls, id)
	b.mu.Unlock()
}

// expect registers interest in the next event named method in session;
// register before sending the command that causes it.
func (b *Browser) expect(session, method string) *eventWaiter {
	w := &eventWaiter{session: session, method: method, ch: make(chan json.RawMessage, 1)}
	b.mu.Lock()
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	return w
}

func (b *Browser) unexpect(w *eventWaiter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, x := range b.waiters {
		if x == w {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			return
		}
	}
}

// Close asks Chromium to exit, then makes sure its whole process group is
// gone, and removes the profile.
func (b *Browser) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	b.send(ctx, "", "Browser.close", nil, nil)
	cancel()
	exited := make(chan struct{})
	go func() {
		b.cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
	}
	b.Kill()
	<-exited
	b.stop()
	b.ws.CloseNow()
	<-b.done
}

// Kill ends Chromium's process group (renderers included) and removes the
// profile directory.
func (b *Browser) Kill() {
	killGroup(b.cmd)
	if b.ws == nil {
		b.cmd.Wait()
	}
	os.RemoveAll(b.dir)
}

// Page is one browser tab, attached with a flattened session.
type Page struct {
	b       *Browser
	target  string
	session string
}

// NewPage opens a tab on url and waits for its load event.
func (b *Browser) NewPage(ctx context.Context, url string) (*Page, error) {
	var created struct {
		TargetID string `json:"targetId"`
	}
	if err := b.send(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &created); err != nil {
		return nil, err
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.send(ctx, "", "Target.attachToTarget", map[string]any{"targetId": created.TargetID, "flatten": true}, &attached); err != nil {
		return nil, err
	}
	p := &Page{b: b, target: created.TargetID, session: attached.SessionID}
	if err := b.send(ctx, p.session, "Page.enable", nil, nil); err != nil {
		p.Close()
		return nil, err
	}
	if err := p.Navigate(ctx, url); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Navigate loads url and waits for its load event (module scripts have run
// by then).
func (p *Page) Navigate(ctx context.Context, url string) error {
	loaded := p.b.expect(p.session, "Page.loadEventFired")
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	if err := p.b.send(ctx, p.session, "Page.navigate", map[string]any{"url": url}, &nav); err != nil {
		p.b.unexpect(loaded)
		return err
	}
	if nav.ErrorText != "" {
		p.b.unexpect(loaded)
		return fmt.Errorf("navigate %s: %s", url, nav.ErrorText)
	}
	select {
	case <-loaded.ch:
		return nil
	case <-ctx.Done():
		p.b.unexpect(loaded)
		return fmt.Errorf("navigate %s: no load event: %w", url, ctx.Err())
	}
}

// Eval evaluates a JavaScript expression in the page, awaits it when it is
// a Promise, and decodes its value (JSON) into out (may be nil). A thrown
// exception or a rejected Promise is an error carrying its description.
func (p *Page) Eval(ctx context.Context, expr string, out any) error {
	var r struct {
		Result struct {
			Type  string          `json:"type"`
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception *struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	err := p.b.send(ctx, p.session, "Runtime.evaluate", map[string]any{
		"expression":    expr,
		"awaitPromise":  true,
		"returnByValue": true,
	}, &r)
	if err != nil {
		return err
	}
	if d := r.ExceptionDetails; d != nil {
		msg := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			msg = d.Exception.Description
		}
		return errors.New("javascript: " + msg)
	}
	if out != nil {
		if len(r.Result.Value) == 0 {
			return fmt.Errorf("javascript returned %s, not a JSON value", r.Result.Type)
		}
		return json.Unmarshal(r.Result.Value, out)
	}
	return nil
}

// Close closes the tab.
func (p *Page) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.b.send(ctx, "", "Target.closeTarget", map[string]any{"targetId": p.target}, nil)
}
