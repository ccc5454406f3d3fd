package redistest

import (
	"bufio"
	"fmt"
	"net"

	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	Port int
	Addr string // 127.0.0.1:port
	dir  string
	args []string
	cmd  *exec.Cmd
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

// Start runs redis-server on a free loopback port, without persistence,
// and stops it when the test ends. extra are more redis-server arguments.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	_, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server not found (apt-get install redis-server): %v", err)
	}
	port := FreePort(t)
	s := &Server{t: t, Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), dir: t.TempDir()}
	s.args = append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning",
	}, extra...)

	s.start()
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", s.args...)
	s.cmd.Dir = s.dir
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start redis-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(s.Addr) == nil {
			return
		}
		if time.Now().After(deadline) {
			s.Stop()
			s.t.Fatalf("redistest: redis-server on %s did not answer PING", s.Addr)
		}
		time.Sleep(20 * time.Millisecond) // polling a process we do not control
	}
}

// Stop kills the server and waits for it. Idempotent.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
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
