package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/testkit"
)

// binary is the rtserver built once for the whole package.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rtserver-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "rtserver")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "../cmd/rtserver")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building rtserver:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one running rtserver.
type proc struct {
	t    testing.TB
	cmd  *exec.Cmd
	Addr string // host:port of the main listener
	log  *testkit.LogBuffer
	done chan struct{}
	err  error // the process's exit, once done is closed
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs rtserver with config (YAML) on a free port and waits until
// /readyz answers 200. env is added to the process environment.
func start(t testing.TB, config string, env ...string) *proc {
	t.Helper()
	p := startNoWait(t, config, env...)
	p.waitReady()
	return p
}

func startNoWait(t testing.TB, config string, env ...string) *proc {
	t.Helper()
	return startAt(t, "127.0.0.1:"+strconv.Itoa(freePort(t)), config, env...)
}

// startAt starts rtserver on addr without waiting for it to be ready.
func startAt(t testing.TB, addr, config string, env ...string) *proc {
	t.Helper()
	cfgFile := filepath.Join(t.TempDir(), "rtserver.yaml")
	if err := os.WriteFile(cfgFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, Addr: addr, log: &testkit.LogBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(binary, "--config", cfgFile, "--listen", addr, "--log-level", "debug")
	p.cmd.Env = append(binaryEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("rtserver %s log:\n%s", p.Addr, p.log.String())
		}
	})
	return p
}

func (p *proc) waitReady() {
	p.t.Helper()
	testkit.Eventually(p.t, 30*time.Second, "rtserver ready", func() bool {
		select {
		case <-p.done:
			p.t.Fatalf("rtserver exited: %v\n%s", p.err, p.log.String())
		default:
		}
		return p.status("/readyz") == 200
	})
}

func (p *proc) kill() {
	if p.cmd.Process != nil {
		p.cmd.Process.Kill()
	}
	<-p.done
}

// signal sends sig and returns the exit code once the process ends.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// exitCode waits for the process to end (bounded) and returns its code.
func (p *proc) exitCode(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		p.t.Fatalf("rtserver did not exit within %v", within)
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

func (p *proc) url(path string) string { return "http://" + p.Addr + path }

// WS is the WebSocket URL of the server.
func (p *proc) WS() string { return "ws://" + p.Addr + "/ws" }

var httpClient = &http.Client{Timeout: 10 * time.Second}

func (p *proc) status(path string) int {
	resp, err := httpClient.Get(p.url(path))
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// get returns path's status and body (0 and "" when the request failed).
func (p *proc) get(path string) (int, string) {
	resp, err := httpClient.Get(p.url(path))
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metrics scrapes /metrics into series -> value, where a series is the
// exposition's name with its labels as written, e.g.
// `handshake_rejected_total{reason="max_connections"}`.
func (p *proc) metrics() map[string]float64 {
	p.t.Helper()
	out, err := p.scrape()
	if err != nil {
		p.t.Fatalf("scrape: %v", err)
	}
	return out
}

// tryMetrics is metrics for a server that may be too busy to answer in
// time: ok is false when the scrape failed.
func (p *proc) tryMetrics() (map[string]float64, bool) {
	out, err := p.scrape()
	return out, err == nil
}

func (p *proc) scrape() (map[string]float64, error) {
	resp, err := httpClient.Get(p.url("/metrics"))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

func (p *proc) metric(series string) float64 { return p.metrics()[series] }

// waitMetric waits until cond holds for the series' value.
func (p *proc) waitMetric(series string, within time.Duration, cond func(float64) bool) float64 {
	p.t.Helper()
	var v float64
	testkit.Eventually(p.t, within, series, func() bool {
		v = p.metric(series)
		return cond(v)
	})
	return v
}

// binaryEnv is the environment the binary runs with: this process's, less
// the variable that makes missing programs fail the suite. The binary
// refuses RTSERVER_* variables it does not know, and that one is the
// suite's, not the binary's.
func binaryEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, testkit.RequireIntegration+"=")
	})
}
