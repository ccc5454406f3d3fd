package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/rtserver/rtserver/internal/ctxsleep"
	"github.com/rtserver/rtserver/protocol"
)

// What a refusal costs. Abusers publish as fast as their window lets them
// to a server whose admission refuses most of it; established "innocent"
// clients do publish round trips beside them. The abusers run in a
// process of their own (rtbench abuse), so that their work does not delay
// the innocents' reads in this one.

type abuseConfig struct {
	URL       *url.URL
	N         int           // abusing connections
	Window    int           // publishes in flight per connection
	Duration  time.Duration // hammering time
	ServerPID int
}

type abuseResult struct {
	Connections int     `json:"connections"`
	Window      int     `json:"window"`
	Seconds     float64 `json:"seconds"`
	Sent        int64   `json:"sent"`
	Admitted    int64   `json:"admitted"`
	// Refused counts error answers by code (-32001 shed, -32002 rate
	// limited, ...).
	Refused      map[string]int64 `json:"refused"`
	RefusedTotal int64            `json:"refusedTotal"`
	RefusedPerS  float64          `json:"refusedPerSec"`
	ServerCPU    float64          `json:"serverCpuSeconds,omitempty"`
	// CPUPerAnswerUs is the server's CPU over the hammering time per
	// answer the abusers got (admitted or refused), the quiet load not
	// subtracted (rtbench shed does).
	CPUPerAnswerUs float64 `json:"serverCpuUsPerAnswer,omitempty"`
}

// runAbuse connects cfg.N clients and has each publish, cfg.Window in
// flight, to a topic nobody subscribes to, for cfg.Duration.
func runAbuse(ctx context.Context, cfg abuseConfig) (*abuseResult, error) {
	if cfg.N <= 0 || cfg.Window <= 0 || cfg.Duration <= 0 {
		return nil, fmt.Errorf("abuse: -n, --window and --duration must be positive")
	}
	conns, err := dialMany(ctx, newDialer(cfg.URL, nil), cfg.N, cfg.N, 10*time.Second, func(int, *websocket.Conn) error { return nil })
	if err != nil {
		return nil, fmt.Errorf("abusers: %w", err)
	}
	defer closeAll(conns, 64)
	var (
		sent, admitted atomic.Int64
		mu             sync.Mutex
		refused        = map[string]int64{}
		stop           = make(chan struct{})
		wg             sync.WaitGroup
	)
	cpu, err := startCPU(cfg.ServerPID)
	if err != nil {
		return nil, fmt.Errorf("server cpu: %w", err)
	}
	start := time.Now()
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			window := make(chan struct{}, cfg.Window)
			go readFrames(c, func(_ time.Time, f frame) bool {
				if f.ID == nil {
					return true
				}
				if f.Error != nil {
					mu.Lock()
					refused[strconv.Itoa(f.Error.Code)]++
					mu.Unlock()
				} else {
					admitted.Add(1)
				}
				select {
				case <-window:
				default:
				}
				return true
			})
			params := []byte(`{"topic":"rtbench.abuse.` + strconv.Itoa(os.Getpid()) + "." + strconv.Itoa(i) + `","data":{"x":1}}`)
			for id := uint64(1); ; id++ {
				select {
				case window <- struct{}{}:
				case <-stop:
					return
				}
				if write(ctx, c, request(id, protocol.MethodPublish, params)) != nil {
					return
				}
				sent.Add(1)
			}
		}()
	}
	ctxsleep.Sleep(ctx, cfg.Duration)
	close(stop)
	wg.Wait()
	// The answers to what is in flight.
	want := sent.Load()
	answered := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		n := admitted.Load()
		for _, v := range refused {
			n += v
		}
		return n
	}
	for deadline := time.Now().Add(2 * time.Second); answered() < want && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	secs := time.Since(start).Seconds()
	res := &abuseResult{Connections: cfg.N, Window: cfg.Window, Seconds: secs, Sent: want, Admitted: admitted.Load()}
	if used, ok, err := cpu.stop(); err != nil {
		return nil, fmt.Errorf("server cpu: %w", err)
	} else if ok {
		res.ServerCPU = used.Total().Seconds()
	}
	mu.Lock()
	res.Refused = refused
	for _, v := range refused {
		res.RefusedTotal += v
	}
	mu.Unlock()
	res.RefusedPerS = float64(res.RefusedTotal) / secs
	if n := res.Admitted + res.RefusedTotal; n > 0 && res.ServerCPU > 0 {
		res.CPUPerAnswerUs = res.ServerCPU / float64(n) * 1e6
	}
	return res, nil
}

type shedConfig struct {
	URL          *url.URL
	ProbeClients int
	ProbeRate    float64
	Baseline     time.Duration // innocents alone
	Abuse        abuseConfig
	AbuseCPU     string // taskset CPU list for the abusers' process
	MaxTime      time.Duration
}

type shedResult struct {
	// Innocents: their publish round trips (sent to answer and message
	// both received) quiet and while the abusers hammer.
	Probe *probeResult `json:"probe"`
	// The server's CPU per second with the innocents alone.
	QuietCPUPerSec float64      `json:"serverQuietCpuPerSec"`
	Abuse          *abuseResult `json:"abuse"`
	// CPUPerRefusedUs is the server CPU the abuse added (its CPU while
	// hammering minus the quiet rate over the same time) per refused
	// publish; 0 when nothing was refused.
	CPUPerRefusedUs float64 `json:"serverCpuUsPerRefused"`
}

// runShed measures the innocents alone for cfg.Baseline, then with the
// abusers' process hammering.
func runShed(ctx context.Context, cfg shedConfig) (*shedResult, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p, err := startProbes(ctx, cfg.URL, cfg.ProbeClients, cfg.ProbeRate)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			p.stop()
		}
	}()
	quiet, err := startCPU(cfg.Abuse.ServerPID)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := ctxsleep.Sleep(ctx, cfg.Baseline); err != nil {
		return nil, err
	}
	res := &shedResult{}
	if used, ok, err := quiet.stop(); err != nil {
		return nil, err
	} else if ok {
		res.QuietCPUPerSec = used.Total().Seconds() / time.Since(t0).Seconds()
	}
	p.setPhase(phaseStorm)
	args := []string{"abuse", "--url", cfg.URL.String(), "-n", strconv.Itoa(cfg.Abuse.N), "--window", strconv.Itoa(cfg.Abuse.Window),
		"--duration", cfg.Abuse.Duration.String(), "--max-time", cfg.MaxTime.String(), "--json"}
	if cfg.Abuse.ServerPID > 0 {
		args = append(args, "--server-pid", strconv.Itoa(cfg.Abuse.ServerPID))
	}
	cmd, out := pinned(ctx, cfg.AbuseCPU, self, args)
	runErr := cmd.Run()
	p.stop() // its round trips are merged as each client ends
	stopped = true
	if runErr != nil {
		return nil, fmt.Errorf("abuse process: %w (%s)", runErr, out.stderr.Bytes())
	}
	var a abuseResult
	if err := json.Unmarshal(out.stdout.Bytes(), &a); err != nil {
		return nil, fmt.Errorf("abuse process output: %w", err)
	}
	res.Abuse = &a
	res.Probe = p.result(cfg.ProbeClients, cfg.ProbeRate)
	if a.RefusedTotal > 0 && a.ServerCPU > 0 {
		res.CPUPerRefusedUs = max(0, a.ServerCPU-res.QuietCPUPerSec*a.Seconds) / float64(a.RefusedTotal) * 1e6
	}
	return res, nil
}
