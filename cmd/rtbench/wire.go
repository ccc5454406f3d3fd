package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/protocol"
)

// frame is the part of a server frame rtbench looks at.
type frame struct {
	ID     *uint64 `json:"id"`
	Method string  `json:"method"`
	Params struct {
		Topic string          `json:"topic"`
		Data  json.RawMessage `json:"data"`
	} `json:"params"`
	Error *struct {
		Code int `json:"code"`
	} `json:"error"`
}

// frames decodes one text frame: a single JSON-RPC value, or (rt.batch) an
// array of them.
func frames(b []byte) ([]frame, error) {
	if engineIOOn() {
		return sioFrames(b)
	}
	if centrifugoOn() {
		return cfFrames(b)
	}
	b = bytes.TrimSpace(fromWire(b))
	if len(b) > 0 && b[0] == '[' {
		var fs []frame
		err := json.Unmarshal(b, &fs)
		return fs, err
	}
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	return []frame{f}, nil
}

// serverPing answers the ping of a socket.io or Centrifugo server in b
// and reports whether b was nothing but that ping.
func serverPing(c *websocket.Conn, b []byte) bool {
	return sioPing(c, b) || cfPing(c, b)
}

// readFrames reads c until it fails, handing fn every decoded frame (a
// batch's frames one by one) with the time its message arrived; fn returns
// false to stop. Messages that do not decode are skipped.
func readFrames(c *websocket.Conn, fn func(at time.Time, f frame) bool) {
	readMessages(c, func(b []byte) bool {
		at := time.Now()
		fs, err := frames(b)
		if err != nil {
			return true
		}
		for _, f := range fs {
			if !fn(at, f) {
				return false
			}
		}
		return true
	})
}

// readMessages reads c until it fails, handing fn each data message that
// is not a server's ping (serverPing answers those); fn returns false to
// stop. The bytes are valid only during the call: the messages are read
// into one buffer (libconn.go).
func readMessages(c *websocket.Conn, fn func(b []byte) bool) {
	var m msgBuf
	for {
		_, b, err := m.read(context.Background(), c)
		if err != nil {
			return
		}
		if serverPing(c, b) {
			continue
		}
		if !fn(b) {
			return
		}
	}
}

// request renders a JSON-RPC request; params must be valid JSON.
func request(id uint64, method string, params []byte) []byte {
	if engineIOOn() {
		return sioRequest(id, method, params)
	}
	if centrifugoOn() {
		return cfRequest(id, method, params)
	}
	return appendRequest(make([]byte, 0, 64+len(method)+len(params)), id, method, params)
}

// appendRequest appends request(id, method, params) to b.
func appendRequest(b []byte, id uint64, method string, params []byte) []byte {
	if engineIOOn() || centrifugoOn() {
		return append(b, request(id, method, params)...)
	}
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, `,"method":`...)
	b = strconv.AppendQuote(b, method)
	b = append(b, `,"params":`...)
	b = append(b, params...)
	return append(b, '}')
}

func topicParams(topic string) []byte {
	return []byte(`{"topic":` + strconv.Quote(topic) + `}`)
}

func write(ctx context.Context, c *websocket.Conn, b []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if binaryMode.Load() {
		return c.Write(ctx, websocket.MessageBinary, toWire(b))
	}
	return c.Write(ctx, websocket.MessageText, b)
}

// subscribeSync subscribes c to topic before any reader goroutine runs:
// it reads until the answer to its request, ignoring anything else.
func subscribeSync(ctx context.Context, c *websocket.Conn, id uint64, topic string) error {
	if err := write(ctx, c, request(id, protocol.MethodSubscribe, topicParams(topic))); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return err
		}
		if serverPing(c, b) {
			continue
		}
		if done, err := subscribeAnswer(b, id, topic); done || err != nil {
			return err
		}
	}
}

// subscribeAnswer looks for the answer to subscribe request id in a
// frame: done once it is there, with the refusal it may be.
func subscribeAnswer(b []byte, id uint64, topic string) (done bool, err error) {
	fs, err := frames(b)
	if err != nil {
		return false, err
	}
	for _, f := range fs {
		if f.ID != nil && *f.ID == id {
			if f.Error != nil {
				return true, errors.New("subscribe " + topic + ": error " + strconv.Itoa(f.Error.Code))
			}
			return true, nil
		}
	}
	return false, nil
}

// closeAll closes connections with a close handshake, n at a time.
func closeAll(cs []*websocket.Conn, n int) {
	if n < 1 {
		n = 1
	}
	sem := make(chan struct{}, n)
	for _, c := range cs {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			c.Close(websocket.StatusGoingAway, "")
		}()
	}
	for range n {
		sem <- struct{}{} // every Close has returned
	}
}
