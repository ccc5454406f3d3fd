package rpcproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/rtserver/rtserver/internal/conf"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/rtserver/rtserver/protocol"
	"github.com/rtserver/rtserver/server"
)

// Headers carrying the caller's identity to the backend.
const (
	HeaderUser     = "X-Rtserver-User"
	HeaderConn     = "X-Rtserver-Conn"
	HeaderClientIP = "X-Rtserver-Client-Ip"
)

// Config of the proxy (rpc.proxy.*). Zero values are the documented
// defaults.
type Config struct {
	URL     string        `yaml:"url" help:"http(s) URL that receives each application RPC as a JSON-RPC POST and answers with the JSON-RPC response; empty: unknown methods answer -32601"`
	Timeout time.Duration `yaml:"timeout" help:"longest wait for the backend; past it the call answers -32005; 0 = 5s"`
	// maxResponseBytes bounds an answer; 0 = 1 MiB (no key sets it; this
	// package's tests do); larger answers are -32005.
	maxResponseBytes int64
}

// Deps are what the proxy uses beside its configuration.
type Deps struct {
	Client *http.Client // nil: a client with sane pooling
	Logger *slog.Logger // nil: discard
}

// DefaultConfig is the rpc.proxy.* defaults of docs/configuration.md.
func DefaultConfig() Config { return Config{Timeout: 5 * time.Second} }

// Validate reports every invalid rpc.proxy.* value at once, naming each
// key. An empty URL is valid (the proxy is off); New needs one.
func (o Config) Validate() error {
	var p conf.Problems
	if o.URL != "" {
		if u, err := url.Parse(o.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.Add("rpc.proxy.url", "must be a http:// or https:// URL with a host, got %q", o.URL)
		}
	}
	if o.Timeout < 0 {
		p.Add("rpc.proxy.timeout", "must not be negative (0 = 5s), got %s", o.Timeout)
	}
	return p.Err()
}

// New returns a server.Handler that forwards every call it gets.
func New(cfg Config, deps Deps) (server.Handler, error) {
	opts := options{Config: cfg, Deps: deps}
	if opts.URL == "" {
		return nil, errors.New("rpcproxy: rpc.proxy.url is required")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.maxResponseBytes <= 0 {
		opts.maxResponseBytes = 1 << 20
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	p := &proxy{opts: opts}
	return p.call, nil
}

// options is the proxy's configuration with its defaults applied.
type options struct {
	Config
	Deps
}

type proxy struct{ opts options }

// response is a JSON-RPC response object from the backend.
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func (p *proxy) call(ctx context.Context, req *server.Request) (any, error) {
	body, err := requestBody(req)
	if err != nil {
		return nil, upstream()
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, p.opts.URL, bytes.NewReader(body))
	if err != nil {
		return nil, upstream()
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set(HeaderUser, req.User)
	hreq.Header.Set(HeaderConn, strconv.FormatUint(req.ConnID, 10))
	hreq.Header.Set(HeaderClientIP, req.IP)
	resp, err := p.opts.Client.Do(hreq)
	if err != nil {
		p.opts.Logger.Warn("rpc backend failed", "method", req.Method, "err", err)
		return nil, upstream()
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		p.opts.Logger.Warn("rpc backend status", "method", req.Method, "status", resp.StatusCode)
		return nil, upstream()
	}
	if req.ID == nil {
		return nil, nil // a notification: nobody reads the answer
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, p.opts.maxResponseBytes+1))
	if err != nil || int64(len(data)) > p.opts.maxResponseBytes {
		p.opts.Logger.Warn("rpc backend response unreadable or too large", "method", req.Method, "bytes", len(data), "err", err)
		return nil, upstream()
	}
	return decode(data)
}

// requestBody is what the backend receives: the client's bytes when they
// mean exactly the admitted request to any JSON decoder (req.Raw is set
// only then), else the request encoded from the method, id and params that
// were decoded and admitted. FuzzForwardedIsAdmitted checks both.
func requestBody(req *server.Request) ([]byte, error) {
	if req.Raw != nil {
		return req.Raw, nil
	}
	return json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id,omitempty"`
		Method  string          `json:"method"`
		Params  json.RawMessage `json:"params,omitempty"`
	}{"2.0", req.ID, req.Method, req.Params})
}

// decode turns the backend's answer into the call's result or error.
func decode(data []byte) (any, error) {
	var r response
	if err := json.Unmarshal(data, &r); err != nil || r.JSONRPC != "2.0" {
		return nil, upstream()
	}
	if r.Error != nil {
		e := &protocol.Error{Code: r.Error.Code, Message: r.Error.Message}
		if r.Error.Data != nil {
			e.Data = r.Error.Data
		}
		return nil, e
	}
	if r.Result == nil {
		return nil, upstream()
	}
	return r.Result, nil
}

func upstream() *protocol.Error {
	return protocol.NewError(protocol.CodeUpstream, "", nil)
}
