package handshake

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkAdmitRelease is the fast path: caps on, no pacing wait, no
// per-IP, no auth; Admit, HandshakeDone(true), Close.
func BenchmarkAdmitRelease(b *testing.B) {
	cfg := DefaultConfig()
	cfg.MaxConnections, cfg.PerTickBudget = 1<<20, 0
	g, _ := newGate(b, cfg)
	r := upgradeReq("203.0.113.1:1")
	r.Header.Set("Origin", "http://rt.example.com")
	var w discardWriter
	var tk Ticket
	b.ReportAllocs()
	for b.Loop() {
		if !g.Admit(&w, r, &tk) {
			b.Fatal("rejected")
		}
		tk.HandshakeDone(true)
		tk.Close()
	}
}

// BenchmarkAdmitReleaseParallel: the same with every core admitting.
func BenchmarkAdmitReleaseParallel(b *testing.B) {
	cfg := DefaultConfig()
	cfg.MaxConnections, cfg.PerTickBudget = 1<<20, 0
	g, _ := newGate(b, cfg)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := upgradeReq("203.0.113.1:1")
		var w discardWriter
		var tk Ticket
		for pb.Next() {
			g.Admit(&w, r, &tk)
			tk.HandshakeDone(true)
			tk.Close()
		}
	})
}

// BenchmarkAdmitReleasePacedPerIP adds the pacing token and the per-IP
// limiter (both with room to spare): the default-config cost.
func BenchmarkAdmitReleasePacedPerIP(b *testing.B) {
	cfg := DefaultConfig()
	cfg.MaxConnections, cfg.PerTickBudget = 1<<20, 1<<30
	cfg.PerIP.Limit = 1 << 30
	g, _ := newGate(b, cfg)
	r := upgradeReq("203.0.113.1:1")
	var w discardWriter
	var tk Ticket
	b.ReportAllocs()
	for b.Loop() {
		if !g.Admit(&w, r, &tk) {
			b.Fatal("rejected")
		}
		tk.HandshakeDone(true)
		tk.Close()
	}
}

// BenchmarkReject503 is a shed upgrade answered over HTTP (the recorder's
// own allocations included).
func BenchmarkReject503(b *testing.B) {
	cfg := DefaultConfig()
	cfg.MaxConnections = 1
	g, _ := newGate(b, cfg)
	var hold Ticket
	g.Admit(httptest.NewRecorder(), upgradeReq("203.0.113.1:1"), &hold)
	r := upgradeReq("203.0.113.2:1")
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		var tk Ticket
		if g.Admit(w, r, &tk) || w.Code != http.StatusServiceUnavailable {
			b.Fatal("not shed")
		}
	}
}

// BenchmarkReject503Gate is the gate's own share of a shed upgrade: a
// writer that keeps nothing, so only the gate's allocations show.
func BenchmarkReject503Gate(b *testing.B) {
	cfg := DefaultConfig()
	cfg.MaxConnections = 1
	g, _ := newGate(b, cfg)
	var hold Ticket
	g.Admit(httptest.NewRecorder(), upgradeReq("203.0.113.1:1"), &hold)
	r := upgradeReq("203.0.113.2:1")
	w := &discardWriter{}
	var tk Ticket
	b.ReportAllocs()
	for b.Loop() {
		if g.Admit(w, r, &tk) {
			b.Fatal("not shed")
		}
	}
}
