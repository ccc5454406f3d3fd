package handshake

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/testkit"
)

// benchShed measures one shed upgrade end to end over loopback TCP: dial,
// send the upgrade, read the 503, close. The client's work is the same in
// both variants, so the difference between them is the server's. cpu-ns/op
// is the whole process's CPU (client and server) per attempt.
func benchShed(b *testing.B, withDoor bool) {
	cfg := DefaultConfig()
	cfg.MaxConnections = 1
	g, _ := newGate(b, cfg)
	var hold Ticket
	if !g.Admit(httptest.NewRecorder(), upgradeReq("203.0.113.1:1"), &hold) {
		b.Fatal("could not fill the cap")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var sl net.Listener = ln
	if withDoor {
		sl = g.Listener(ln, "/ws")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		var tk Ticket
		if g.Admit(w, r, &tk) {
			b.Error("admitted over the cap")
			tk.Close()
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { srv.Serve(sl); close(done) }()
	defer func() { srv.Close(); <-done }()

	addr := ln.Addr().String()
	req := []byte(upgradeHead)
	br := bufio.NewReaderSize(nil, 1024)
	cpu0 := testkit.ProcessCPU()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		br.Reset(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusServiceUnavailable {
			b.Fatalf("status %d", resp.StatusCode)
		}
		c.Close()
	}
	b.StopTimer()
	cpu := testkit.ProcessCPU() - cpu0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

func BenchmarkShedAtDoor(b *testing.B)  { benchShed(b, true) }
func BenchmarkShedNetHTTP(b *testing.B) { benchShed(b, false) }
