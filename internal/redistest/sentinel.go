package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/internal/testkit"
)

// SentinelName is the name the Sentinels of StartSentinel monitor the
// primary under.
const SentinelName = "rtprimary"

// Sentinel is a primary, one replica and three Sentinels on loopback: the
// smallest set-up in which the Sentinels can agree (quorum 2 of 3) to
// promote the replica when the primary dies.
type Sentinel struct {
	Primary, Replica *Server
	Sentinels        []*Server
	Addrs            []string // the Sentinels' 127.0.0.1:port
}

// URL is redis.url for a client that finds the primary through the
// Sentinels: its host is the monitored name.
func (s *Sentinel) URL() string { return "redis://" + SentinelName }

// sentinelDownAfter is how long the Sentinels wait before they call an
// unanswering primary down: short, so that a test's fail-over takes a few
// seconds, not the 30 of Redis's default. The fail-over timeout (2s, the
// file below) is short too: a split vote is retried after twice that,
// not after the default's 6 minutes.
const sentinelDownAfter = 1000 * time.Millisecond

// StartSentinel starts a primary, a replica of it and three redis-sentinel
// processes monitoring it (quorum 2), each on a free loopback port, and
// waits until the replica is in sync and every Sentinel knows the replica
// and the two other Sentinels (so a fail-over can happen). Everything is
// stopped when the test ends.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	testkit.Program(t, "redis-sentinel", "apt-get install redis-sentinel")
	s := &Sentinel{Primary: Start(t)}
	s.Replica = Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(s.Primary.Port))
	for range 3 {
		st := startSentinel(t, s.Primary.Port)
		s.Sentinels = append(s.Sentinels, st)
		s.Addrs = append(s.Addrs, st.Addr)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		why := s.notReady()
		if why == "" {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel set-up not ready within 60s: %s", why)
		}
		time.Sleep(50 * time.Millisecond) // polling processes we do not control
	}
}

func startSentinel(t testing.TB, primaryPort int) *Server {
	t.Helper()
	for attempt := 1; ; attempt++ {
		port := FreePort(t)
		s := &Server{t: t, Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), dir: t.TempDir(), prog: "redis-sentinel"}
		// Sentinel rewrites its configuration file (what it learns of the
		// others and of fail-overs), so the file lives in its directory.
		conf := filepath.Join(s.dir, "sentinel.conf")
		body := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
daemonize no
loglevel warning
dir %s
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s 2000
sentinel parallel-syncs %s 1
`, port, s.dir, SentinelName, primaryPort, SentinelName, sentinelDownAfter.Milliseconds(), SentinelName, SentinelName)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.args = []string{conf}
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

// notReady says what the set-up still lacks, "" when nothing.
func (s *Sentinel) notReady() string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: s.Replica.Addr, MaxRetries: -1})
	defer rc.Close()
	info, err := rc.Info(ctx, "replication").Result()
	if err != nil {
		return "replica: " + err.Error()
	}
	if !strings.Contains(info, "master_link_status:up") {
		return "replica not in sync"
	}
	for _, addr := range s.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
		m, err := sc.Master(ctx, SentinelName).Result()
		sc.Close()
		if err != nil {
			return "sentinel " + addr + ": " + err.Error()
		}
		if m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
			return fmt.Sprintf("sentinel %s knows %s replicas and %s other sentinels", addr, m["num-slaves"], m["num-other-sentinels"])
		}
	}
	return ""
}

// PrimaryAddr is the primary's address as the first Sentinel that answers
// names it.
func (s *Sentinel) PrimaryAddr() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var last error
	for _, addr := range s.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
		hp, err := sc.GetMasterAddrByName(ctx, SentinelName).Result()
		sc.Close()
		if err == nil && len(hp) == 2 {
			return hp[0] + ":" + hp[1], nil
		}
		last = err
	}
	return "", fmt.Errorf("redistest: no sentinel names the primary: %v", last)
}
