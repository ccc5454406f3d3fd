package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// engineIOMode switches every mode's wire from rtserver's JSON-RPC to
// Socket.IO v5 over Engine.IO v4's websocket transport (--socketio), so
// that the same loops measure a socket.io server (bench/socketio) as
// they measure rtserver. The target URL is then the Engine.IO endpoint,
// ws://127.0.0.1:3000/socket.io/?EIO=4&transport=websocket.
//
// The mapping keeps each loop's shape: a request (id, method, params)
// becomes an event with an acknowledgement, 42<id>["method",params]; its
// answer is the acknowledgement 43<id>[...]; a delivery is the event
// 42["message",{"topic":...,"data":...}], in which the timestamp scan
// finds the send time as it does in rtserver's frame. Engine.IO's pings
// (the server sends "2") are answered "3", as a browser does.
//
// It is atomic because a run's reader goroutines may still be winding
// down when the next run (a test) sets it again.
var engineIOMode atomic.Bool

func engineIOOn() bool { return engineIOMode.Load() }

// Engine.IO packet types and the Socket.IO packet types rtbench uses.
const (
	eioOpen    = '0'
	eioPing    = '2'
	eioPong    = "3"
	eioMessage = '4'
	sioConnect = '0'
	sioEvent   = '2'
	sioAck     = '3'
)

// sioRequest renders an event with an acknowledgement id; params must be
// valid JSON.
func sioRequest(id uint64, method string, params []byte) []byte {
	b := make([]byte, 0, 32+len(method)+len(params))
	b = append(b, eioMessage, sioEvent)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, '[')
	b = strconv.AppendQuote(b, method)
	b = append(b, ',')
	b = append(b, params...)
	return append(b, ']')
}

// sioFrames decodes the one packet rtbench acts on: an acknowledgement
// (43<id>[...]), as a frame with that id; an acknowledgement whose first
// argument is an object with an "error" key counts as an error. Anything
// else (events, pings) gives no frame.
func sioFrames(b []byte) ([]frame, error) {
	if len(b) < 3 || b[0] != eioMessage || b[1] != sioAck {
		return nil, nil
	}
	b = b[2:]
	j := 0
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	if j == 0 {
		return nil, errors.New("socket.io acknowledgement without an id")
	}
	id, err := strconv.ParseUint(string(b[:j]), 10, 64)
	if err != nil {
		return nil, err
	}
	f := frame{ID: &id}
	if bytes.HasPrefix(b[j:], []byte(`[{"error"`)) {
		f.Error = &struct {
			Code int `json:"code"`
		}{Code: -1}
	}
	return []frame{f}, nil
}

// sioPing answers an Engine.IO ping and reports whether b was one.
func sioPing(c *websocket.Conn, b []byte) bool {
	if !engineIOOn() || len(b) != 1 || b[0] != eioPing {
		return false
	}
	write(context.Background(), c, []byte(eioPong))
	return true
}

// sioOpen completes the Engine.IO and Socket.IO handshakes on a fresh
// websocket: the server's open packet, then a connect to the main
// namespace and its answer.
func sioOpen(ctx context.Context, c *websocket.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		return err
	}
	if len(b) == 0 || b[0] != eioOpen {
		return fmt.Errorf("engine.io: expected the open packet, got %.40q", b)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte{eioMessage, sioConnect}); err != nil {
		return err
	}
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return err
		}
		if sioPing(c, b) {
			continue
		}
		if len(b) >= 2 && b[0] == eioMessage && b[1] == sioConnect {
			return nil
		}
		return fmt.Errorf("socket.io: expected the connect answer, got %.40q", b)
	}
}
