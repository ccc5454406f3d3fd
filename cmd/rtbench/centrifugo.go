package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// centrifugoMode switches every mode's wire from rtserver's JSON-RPC to
// Centrifugo's JSON client protocol (--centrifugo), so that the same loops
// measure a Centrifugo server (bench/centrifugo) as they measure rtserver.
// The target URL is then Centrifugo's WebSocket endpoint,
// ws://127.0.0.1:8000/connection/websocket.
//
// The mapping keeps each loop's shape: a fresh connection first sends the
// connect command {"id":1,"connect":{}} and waits for its reply; a
// request (id, method, params) becomes the command
// {"id":id+1,"<method>":{"channel":"rtbench:<topic>",...}} (Centrifugo
// reserves id 0 for the pong, and channels live in the namespace
// bench/centrifugo's configuration opens); its answer is the reply with
// that id, {"id":N,"publish":{}} or {"id":N,"error":{"code":C,...}}; a
// delivery is the push {"push":{"channel":...,"pub":{"data":...}}}, in
// which the timestamp scan finds the send time as it does in rtserver's
// frame. One WebSocket message may carry several of these objects, one a
// line. The server's ping is the empty object {}, answered {} as
// Centrifugo's own clients do.
//
// It is atomic because a run's reader goroutines may still be winding
// down when the next run (a test) sets it again.
var centrifugoMode atomic.Bool

func centrifugoOn() bool { return centrifugoMode.Load() }

// cfNamespace prefixes every topic: the namespace of Centrifugo's
// configuration in bench/centrifugo that admits anonymous subscribe and
// publish.
const cfNamespace = "rtbench:"

// cfConnectID is the wire id of the connect command; its reply is read
// before any request is sent, so it may share a wire id with one.
const cfConnectID = 1

var (
	cfPingLine = []byte("{}")
	cfTopicKey = []byte(`{"topic":"`)
)

// cfRequest renders a request as a Centrifugo command: params is
// rtbench's {"topic":...[,"data":...]}, whose topic becomes the channel
// in cfNamespace. The wire id is id+1.
func cfRequest(id uint64, method string, params []byte) []byte {
	b := make([]byte, 0, 48+len(method)+len(params))
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, id+1, 10)
	b = append(b, ',')
	b = strconv.AppendQuote(b, method)
	b = append(b, ':')
	if rest, ok := bytes.CutPrefix(params, cfTopicKey); ok {
		b = append(b, `{"channel":"`...)
		b = append(b, cfNamespace...)
		b = append(b, rest...)
	} else {
		b = append(b, params...)
	}
	return append(b, '}')
}

// cfReply is the part of a Centrifugo reply rtbench looks at.
type cfReply struct {
	ID      uint64          `json:"id"`
	Connect json.RawMessage `json:"connect"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// cfLines calls fn with every JSON object of a WebSocket message (one a
// line), empty lines skipped.
func cfLines(b []byte, fn func(line []byte) error) error {
	for len(b) > 0 {
		line, rest, _ := bytes.Cut(b, []byte{'\n'})
		b = rest
		if line = bytes.TrimSpace(line); len(line) > 0 {
			if err := fn(line); err != nil {
				return err
			}
		}
	}
	return nil
}

// cfFrames decodes the replies in a message, as frames with rtbench's ids
// (the wire id minus one); pushes and pings (no id) give no frame.
func cfFrames(b []byte) ([]frame, error) {
	var fs []frame
	err := cfLines(b, func(line []byte) error {
		if bytes.Equal(line, cfPingLine) || bytes.HasPrefix(line, []byte(`{"push"`)) {
			return nil
		}
		var r cfReply
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		if r.ID == 0 {
			return nil
		}
		id := r.ID - 1
		f := frame{ID: &id}
		if r.Error != nil {
			f.Error = &struct {
				Code int `json:"code"`
			}{Code: r.Error.Code}
		}
		fs = append(fs, f)
		return nil
	})
	return fs, err
}

// cfHasPing reports whether one of a message's lines is the server's ping.
func cfHasPing(b []byte) bool {
	return bytes.Equal(b, cfPingLine) || bytes.HasPrefix(b, []byte("{}\n")) ||
		bytes.HasSuffix(b, []byte("\n{}")) || bytes.Contains(b, []byte("\n{}\n"))
}

// cfPing answers the server's ping if the message carries one, and
// reports whether the message was nothing but the ping (nothing else to
// read in it).
func cfPing(c *websocket.Conn, b []byte) bool {
	if !centrifugoOn() || !cfHasPing(b) {
		return false
	}
	write(context.Background(), c, cfPingLine)
	return bytes.Equal(bytes.TrimSpace(b), cfPingLine)
}

// cfOpen sends the connect command on a fresh WebSocket and waits for its
// reply: an error reply, or the server closing the connection (with the
// close code in the error), fails it.
func cfOpen(ctx context.Context, c *websocket.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"id":`+strconv.Itoa(cfConnectID)+`,"connect":{}}`)); err != nil {
		return err
	}
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return err
		}
		cfPing(c, b)
		var done error
		found := false
		err = cfLines(b, func(line []byte) error {
			if bytes.Equal(line, cfPingLine) {
				return nil
			}
			var r cfReply
			if err := json.Unmarshal(line, &r); err != nil {
				return err
			}
			if r.ID != cfConnectID {
				return nil
			}
			found = true
			switch {
			case r.Error != nil:
				done = fmt.Errorf("centrifugo: connect refused: %d %s", r.Error.Code, r.Error.Message)
			case r.Connect == nil:
				done = fmt.Errorf("centrifugo: expected the connect reply, got %.60q", line)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("centrifugo: %w", err)
		}
		if found {
			return done
		}
	}
}
