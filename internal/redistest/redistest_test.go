package redistest

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/rtserver/rtserver/internal/testkit"
)

// A redis-server that cannot bind its port exits at once; launch says so,
// with the server's own words, instead of polling PING until its deadline
// (Start then tries another port).
func TestLaunchReportsEarlyExit(t *testing.T) {
	testkit.Program(t, "redis-server", "apt-get install redis-server")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	go func() { // answer nothing: every PING fails at once
		for {
			c, err := taken.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := taken.Addr().(*net.TCPAddr).Port
	s := &Server{t: t, Port: port, Addr: taken.Addr().String(), dir: t.TempDir()}
	s.args = []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--dir", s.dir}
	err = s.launch()
	if err == nil {
		s.Stop()
		t.Fatal("launch succeeded on a port another socket holds")
	}
	if !strings.Contains(err.Error(), "exited before answering PING") || !strings.Contains(strings.ToLower(err.Error()), "address already in use") {
		t.Fatalf("launch error does not say the server exited, and why: %v", err)
	}
	s.Stop() // nothing to stop: idempotent
}

func TestStartAndRestart(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	if err := ping(s.Addr); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
	s.Stop()
	if err := ping(s.Addr); err == nil {
		t.Fatal("PING answered after Stop")
	}
}
