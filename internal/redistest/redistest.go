package redistest

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/testkit"
)

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	Port int
	Addr string // 127.0.0.1:port
	dir  string
	prog string // redis-server, or redis-sentinel
	args []string
	cmd  *exec.Cmd
	// exited is closed when cmd has ended and its output is complete.
	exited chan struct{}
}

// URL is the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.Addr }

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// clusterBusOffset: a cluster-enabled redis-server also listens on its
// port + 10000 (the cluster bus), so that port must be free too, and the
// port at most 65535 - 10000.
const clusterBusOffset = 10000

// freeClusterPort returns a loopback port that, with its cluster bus port,
// was free a moment ago.
func freeClusterPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := FreePort(t)
		if port+clusterBusOffset > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+clusterBusOffset))
		if err != nil {
			continue
		}
		bus.Close()
		return port
	}
	t.Fatal("redistest: no free port pair for a cluster node in 100 tries")
	return 0
}

// startAttempts bounds how often Start picks another port: between the
// check that a port is free and redis-server's bind, another process on
// this shared machine may take it (or, for a cluster node, its bus port).
const startAttempts = 5

// Start runs redis-server on a free loopback port, without persistence,
// and stops it when the test ends. extra are more redis-server arguments.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	testkit.Program(t, "redis-server", "apt-get install redis-server")
	cluster := slices.Contains(extra, "--cluster-enabled")
	for attempt := 1; ; attempt++ {
		port := 0
		if cluster {
			port = freeClusterPort(t)
		} else {
			port = FreePort(t)
		}
		// A directory per attempt: a failed cluster node may leave a nodes
		// file naming its port behind.
		s := &Server{t: t, Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), dir: t.TempDir(), prog: "redis-server"}
		s.args = append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", s.dir,
			"--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning",
		}, extra...)
		err := s.launch()
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		if attempt == startAttempts {
			t.Fatalf("redistest: %v", err)
		}
		t.Logf("redistest: %v; trying another port", err)
	}
}

func (s *Server) start() {
	s.t.Helper()
	if err := s.launch(); err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
}

// launch runs redis-server and waits until it answers PING. It fails,
// with the server's own output, when the process exits first (e.g. its
// port was taken) or does not answer within 10 seconds.
func (s *Server) launch() error {
	out := new(bytes.Buffer)
	cmd := exec.Command(s.prog, s.args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.prog, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(s.Addr) == nil {
			return nil
		}
		select {
		case <-exited: // Wait has returned: out is complete
			s.cmd = nil
			return fmt.Errorf("%s on %s exited before answering PING (%v):\n%s", s.prog, s.Addr, cmd.ProcessState, out)
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("%s on %s did not answer PING within 10s:\n%s", s.prog, s.Addr, out)
		}
		time.Sleep(20 * time.Millisecond) // polling a process we do not control
	}
}

// Stop kills the server and waits for it. Idempotent.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Restart starts the server again on the same port (after Stop).
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Do sends one command and returns the first line of the reply, for
// simple checks without a client library.
func (s *Server) Do(args ...string) (string, error) { return do(s.Addr, args...) }

func ping(addr string) error {
	r, err := do(addr, "PING")
	if err != nil {
		return err
	}
	if r != "+PONG" {
		return fmt.Errorf("PING answered %q", r)
	}
	return nil
}

func do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}
