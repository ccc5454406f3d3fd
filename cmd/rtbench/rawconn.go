package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/protocol"
)

// Fan-out clients that read and write their sockets without a WebSocket
// library (rtbench fanout --raw).
//
// In a fan-out the load generator reads every delivery, and on a machine
// of two cores what it spends is taken from the server: through the
// library (a read call, a context, a lock and a fresh slice per message,
// a JSON decode per answer) 100 topics x 10 cost rtbench 2.5-3.5x the
// server's CPU, and the throughput measured was the generator's as much
// as the server's (docs/journal/latency-and-shedding.md). A raw client
// reads whatever the socket holds into one buffer and walks the frames
// in it: one read(2) for as many deliveries as the server wrote, and no
// allocation per message. The server sees the same bytes either way (the
// opening handshake, a subscribe, each publish in one write of one
// frame, the pongs it asks for, a close). Opt-in: other servers' clients
// go through the library, and a comparison must give both the same
// generator.

// rawConn is one client's connection.
type rawConn struct {
	nc    net.Conn
	proto string // the subprotocol the server chose
	buf   []byte // unread input is buf[r:w]
	r, w  int
	at    time.Time // when the last read returned
	mask  [4]byte
	wmu   sync.Mutex // pongs and the close
	out   []byte
}

const (
	rawBufSize  = 64 << 10
	rawMaxFrame = 16 << 20 // the library's read limit in rtbench (dialer.dial)
	wsGUID      = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
)

// rawAllowed reports whether fan-out subscribers to u can be raw: plain
// ws:// and rtserver's JSON protocol (the other targets and wire formats
// keep the library).
func rawAllowed(u *url.URL) bool {
	return u.Scheme == "ws" && !binaryMode.Load() && !engineIOOn() && !centrifugoOn()
}

// rawDial opens a WebSocket to u with d's TCP dialer and the opening
// handshake written by hand.
func rawDial(ctx context.Context, d *dialer, u *url.URL, proto []string) (*rawConn, error) {
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	nc, err := d.tcp(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	s := &rawConn{nc: nc, buf: make([]byte, rawBufSize)}
	if err := s.handshake(ctx, u, proto); err != nil {
		nc.Close()
		return nil, err
	}
	return s, nil
}

func (s *rawConn) handshake(ctx context.Context, u *url.URL, proto []string) error {
	if dl, ok := ctx.Deadline(); ok {
		s.nc.SetDeadline(dl)
		defer s.nc.SetDeadline(time.Time{})
	}
	var k [16]byte
	rand.Read(k[:])
	rand.Read(s.mask[:])
	key := base64.StdEncoding.EncodeToString(k[:])
	req := "GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " + key +
		"\r\nSec-WebSocket-Version: 13\r\n"
	if len(proto) > 0 {
		req += "Sec-WebSocket-Protocol: " + joinComma(proto) + "\r\n"
	}
	if _, err := s.nc.Write([]byte(req + "\r\n")); err != nil {
		return err
	}
	var end int
	for {
		if end = bytes.Index(s.buf[:s.w], []byte("\r\n\r\n")); end >= 0 {
			break
		}
		if s.w == len(s.buf) {
			return errors.New("handshake: response head too long")
		}
		n, err := s.nc.Read(s.buf[s.w:])
		s.w += n
		if err != nil && n == 0 {
			return fmt.Errorf("handshake: %w", err)
		}
	}
	head := s.buf[:end]
	s.r = end + 4
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 101")) {
		return fmt.Errorf("handshake: %s", line)
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	want := base64.StdEncoding.EncodeToString(sum[:])
	accepted := false
	for len(rest) > 0 {
		var h []byte
		h, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Sec-WebSocket-Accept")):
			accepted = string(value) == want
		case bytes.EqualFold(name, []byte("Sec-WebSocket-Protocol")):
			s.proto = string(value)
		}
	}
	if !accepted {
		return errors.New("handshake: wrong Sec-WebSocket-Accept")
	}
	return nil
}

func joinComma(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ", "
		}
		out += s
	}
	return out
}

// errClosed is a close frame from the server; code is its status.
type errClosed struct{ code int }

func (e errClosed) Error() string { return "closed " + strconv.Itoa(e.code) }

// next returns the next data frame's payload and its length on the wire,
// reading the socket when the buffer holds no whole frame; s.at is when
// the read that completed it returned. It answers pings, and returns
// errClosed for a close frame. The payload is valid until the next call.
func (s *rawConn) next() (payload []byte, wire int, err error) {
	for {
		op, p, n, err := parseFrame(s.buf[s.r:s.w])
		if err != nil {
			return nil, 0, err
		}
		if n > 0 {
			s.r += n
			switch op {
			case 0x9: // ping
				if err := s.send(0xA, p); err != nil {
					return nil, 0, err
				}
				continue
			case 0xA: // pong
				continue
			case 0x8: // close
				code := 1005
				if len(p) >= 2 {
					code = int(binary.BigEndian.Uint16(p))
				}
				return nil, 0, errClosed{code}
			case 0x1, 0x2:
				return p, n, nil
			default: // the server never fragments a message
				return nil, 0, fmt.Errorf("frame opcode %#x", op)
			}
		}
		if s.r > 0 {
			s.w = copy(s.buf, s.buf[s.r:s.w])
			s.r = 0
		}
		if s.w == len(s.buf) { // one frame larger than the buffer
			s.buf = append(s.buf, make([]byte, len(s.buf))...)
		}
		m, err := s.nc.Read(s.buf[s.w:])
		if m > 0 {
			s.w += m
			s.at = time.Now()
			continue
		}
		if err == nil {
			err = errors.New("empty read")
		}
		return nil, 0, err
	}
}

// parseFrame parses the frame at the start of b: its opcode, payload and
// length, or n == 0 when b does not hold all of it yet.
func parseFrame(b []byte) (op byte, payload []byte, n int, err error) {
	if len(b) < 2 {
		return 0, nil, 0, nil
	}
	if b[0]&0x80 == 0 {
		return 0, nil, 0, errors.New("fragmented message")
	}
	if b[1]&0x80 != 0 {
		return 0, nil, 0, errors.New("masked frame from the server")
	}
	op = b[0] & 0x0F
	size, h := int(b[1]&0x7F), 2
	switch size {
	case 126:
		if len(b) < 4 {
			return 0, nil, 0, nil
		}
		size, h = int(binary.BigEndian.Uint16(b[2:])), 4
	case 127:
		if len(b) < 10 {
			return 0, nil, 0, nil
		}
		v := binary.BigEndian.Uint64(b[2:])
		if v > rawMaxFrame {
			return 0, nil, 0, fmt.Errorf("frame of %d bytes", v)
		}
		size, h = int(v), 10
	}
	if len(b) < h+size {
		return 0, nil, 0, nil
	}
	return op, b[h : h+size], h + size, nil
}

// send writes one masked frame.
func (s *rawConn) send(op byte, p []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	b := append(s.out[:0], 0x80|op)
	switch {
	case len(p) < 126:
		b = append(b, 0x80|byte(len(p)))
	case len(p) <= 0xFFFF:
		b = append(b, 0x80|126)
		b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(len(p)))
	}
	b = append(b, s.mask[:]...)
	for i, c := range p {
		b = append(b, c^s.mask[i&3])
	}
	s.out = b
	_, err := s.nc.Write(b)
	return err
}

// subscribe subscribes to topic and reads until the answer, before any
// reader goroutine runs (subscribeSync's raw twin).
func (s *rawConn) subscribe(ctx context.Context, id uint64, topic string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if dl, ok := ctx.Deadline(); ok {
		s.nc.SetDeadline(dl)
		defer s.nc.SetDeadline(time.Time{})
	}
	if err := s.send(0x1, request(id, protocol.MethodSubscribe, topicParams(topic))); err != nil {
		return err
	}
	for {
		p, _, err := s.next()
		if err != nil {
			return err
		}
		if done, err := subscribeAnswer(p, id, topic); done || err != nil {
			return err
		}
	}
}

// close sends a close frame (going away) and closes the socket; the
// reader's next read fails.
func (s *rawConn) close() {
	var p [2]byte
	binary.BigEndian.PutUint16(p[:], uint16(websocket.StatusGoingAway))
	s.nc.SetWriteDeadline(time.Now().Add(time.Second))
	s.send(0x8, p[:])
	s.nc.Close()
}

// closeRaw closes every raw subscriber.
func closeRaw(ss []*rawConn) {
	for _, s := range ss {
		s.close()
	}
}

// answers reads answers until the connection ends (pubConn).
func (s *rawConn) answers(fn func(id uint64, code int, failed bool)) {
	for {
		p, _, err := s.next()
		if err != nil {
			return
		}
		if id, code, failed, ok := scanAnswer(p); ok {
			fn(id, code, failed)
			continue
		}
		fs, err := frames(p) // not in the shape rtserver answers in
		if err != nil {
			continue
		}
		for _, f := range fs {
			answerOf(f, fn)
		}
	}
}

// publish sends a request as one text frame (pubConn).
func (s *rawConn) publish(_ context.Context, req []byte) error { return s.send(0x1, req) }

func (s *rawConn) done() {}

var (
	answerHead  = []byte(`{"jsonrpc":"2.0","id":`)
	answerOK    = []byte(`,"result":`)
	answerError = []byte(`,"error":{"code":`)
)

// scanAnswer reads the id and the error code of an answer in the shape
// rtserver writes it (protocol.AppendResult, AppendError) without
// decoding it; ok false for anything else.
func scanAnswer(p []byte) (id uint64, code int, failed, ok bool) {
	if !bytes.HasPrefix(p, answerHead) {
		return 0, 0, false, false
	}
	p = p[len(answerHead):]
	i := 0
	for i < len(p) && p[i] >= '0' && p[i] <= '9' {
		i++
	}
	id, err := strconv.ParseUint(string(p[:i]), 10, 64)
	if err != nil {
		return 0, 0, false, false
	}
	p = p[i:]
	switch {
	case bytes.HasPrefix(p, answerOK):
		return id, 0, false, true
	case bytes.HasPrefix(p, answerError):
		p = p[len(answerError):]
		j := 0
		if j < len(p) && p[j] == '-' {
			j++
		}
		for ; j < len(p) && p[j] >= '0' && p[j] <= '9'; j++ {
		}
		c, err := strconv.Atoi(string(p[:j]))
		if err != nil {
			return 0, 0, false, false
		}
		return id, c, true, true
	}
	return 0, 0, false, false
}
