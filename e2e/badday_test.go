package e2e

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
)

// blackHole is a Redis address that accepts connections and never
// answers: the worst a half-dead Redis (or a dropped route) does.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	return "redis://" + ln.Addr().String()
}

// TestStartWithRedisUnreachable: an instance started while Redis refuses
// connections or never answers serves /healthz and /readyz (503, naming
// the bus) from its first second, refuses a publish naming BUS, becomes
// ready when a refused Redis comes up, and stops on SIGTERM (no clients:
// at once). The figures are logged: the suite's deadlines are generous
// for a loaded machine.
func TestStartWithRedisUnreachable(t *testing.T) {
	for _, mode := range []string{"refused", "blackhole"} {
		t.Run(mode, func(t *testing.T) {
			var url string
			var r *redistest.Server
			if mode == "refused" {
				r = redistest.Start(t)
				r.Stop()
				url = r.URL()
			} else {
				url = blackHole(t)
			}
			cfg := fleetConfig(url, "")
			began := time.Now()
			p := startNoWait(t, cfg)
			testkit.Eventually(t, 10*time.Second, "/healthz 200", func() bool { return p.status("/healthz") == 200 })
			healthy := time.Since(began)
			code, body := p.get("/readyz")
			if code != 503 || !strings.Contains(body, "bus") {
				t.Fatalf("/readyz = %d %q, want 503 naming the bus", code, body)
			}
			t.Logf("%s: /healthz 200 after %v; /readyz %d %q", mode, healthy.Round(time.Millisecond), code, strings.TrimSpace(body))
			testkit.Eventually(t, 10*time.Second, "listening logged", func() bool {
				return strings.Contains(p.log.String(), "rtserver listening")
			})

			// Once started (upgrades are shed while the parts start), a
			// publish is refused, naming the bus, not timed out.
			testkit.Eventually(t, 10*time.Second, "started", func() bool {
				code, body := p.get("/readyz")
				return code == 503 && !strings.Contains(body, "starting")
			})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			pubBegan := time.Now()
			pub := exec.CommandContext(ctx, binary, "pub", "--url", p.WS(), "news", `{"n":1}`)
			pub.Env = binaryEnv()
			out, err := pub.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "BUS") {
				t.Errorf("rtserver pub: err %v, output %q; want a refusal naming BUS", err, out)
			}
			t.Logf("%s: rtserver pub exited after %v: %s", mode, time.Since(pubBegan).Round(time.Millisecond), strings.TrimSpace(string(out)))

			if r != nil {
				r.Restart()
				back := time.Now()
				testkit.Eventually(t, 30*time.Second, "ready once Redis answers", func() bool { return p.status("/readyz") == 200 })
				t.Logf("%s: ready %v after Redis came up", mode, time.Since(back).Round(time.Millisecond))
			}

			stop := time.Now()
			p.signal(syscall.SIGTERM)
			if code := p.exitCode(30 * time.Second); code != 0 {
				t.Errorf("exit code %d after SIGTERM, want 0", code)
			}
			t.Logf("%s: stopped %v after SIGTERM", mode, time.Since(stop).Round(time.Millisecond))
		})
	}
}
