package rpcproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
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

// Options configure the proxy. Zero values are the documented defaults.
type Options struct {
	URL              string        // the backend's endpoint (required)
	Timeout          time.Duration // per call; default 5s
	MaxResponseBytes int64         // default 1 MiB; larger answers are -32005
	Client           *http.Client  // default: a client with sane pooling
	Logger           *slog.Logger
}

// New returns a server.Handler that forwards every call it gets.
func New(opts Options) (server.Handler, error) {
	if opts.URL == "" {
		return nil, errors.New("rpcproxy: URL is required")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = 1 << 20
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

type proxy struct{ opts Options }

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
	data, err := io.ReadAll(io.LimitReader(resp.Body, p.opts.MaxResponseBytes+1))
	if err != nil || int64(len(data)) > p.opts.MaxResponseBytes {
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
