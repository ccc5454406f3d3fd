package rtserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/logx"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/clusterrate"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/publishrate"
	"github.com/rtserver/rtserver/ratelimit"
	"github.com/rtserver/rtserver/rpcproxy"
	"github.com/rtserver/rtserver/server"
)

// Node is one running rtserver instance.
type Node struct {
	cfg      Config
	log      *slog.Logger
	Metrics  *metrics.Metrics
	Gate     *handshake.Gate
	Pressure *pressure.Monitor
	Admit    *message.Admission
	Access   *access.Checker // the topic grants
	Server   *server.Server
	history  *history.Redis // the Redis history store; nil without Redis or history
	cluster  *cluster       // nil without Redis
	shared   *lateShared    // nil without Redis
	// Cluster is the cluster-wide top-publisher view; nil without Redis.
	Cluster *publishrate.Aggregator

	mux        *http.ServeMux
	adminMux   *http.ServeMux
	instanceID string
}

// New builds a node; nothing listens until Run (or until Handler is
// served by the caller).
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rtserver: invalid configuration: %w", err)
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	// Under a flood the same warning repeats per event (a failing backend,
	// forged envelopes): one line per kind per interval, with a count.
	log = slog.New(logx.Limit(log.Handler(), 10*time.Second, nil))
	n := &Node{cfg: cfg, log: log}
	n.Metrics = metrics.New(cfg.Registry, cfg.Metrics.Namespace)

	hs := cfg.Handshake
	hs.JWT = cfg.Auth.JWT.JWT
	if hs.Logger == nil {
		hs.Logger = log
	}
	gate, err := handshake.New(hs, n.Metrics)
	if err != nil {
		return nil, fmt.Errorf("rtserver: %w", err)
	}
	n.Gate = gate

	// The monitor reads connection and subscription counts from the
	// server, which is created below: the closure resolves it late.
	n.Pressure = pressure.New(cfg.Pressure, func() (int64, int64) { return n.Server.Counts() }, n.Metrics, log)

	// Cluster-scoped rate and cost parts check a budget in Redis; the
	// client is made below, so the limiter is bound to it there.
	var sharedOpt message.SharedLimiter
	if cfg.Redis.URL != "" {
		n.shared = &lateShared{}
		sharedOpt = n.shared
		n.shared.used = cfg.Admission.ClusterScoped()
	}
	n.Admit = message.New(message.Options{
		Snapshot:   n.Pressure.Snapshot,
		Rates:      snapshotRates{n.Pressure},
		FailPolicy: cfg.Admission.FailPolicy,
		RetryAfter: cfg.Handshake.RetryAfter,
		Metrics:    n.Metrics,
		Shared:     sharedOpt,
	})
	for name, rule := range cfg.Admission.Classes {
		if err := n.Admit.Register(name, rule); err != nil {
			return nil, fmt.Errorf("rtserver: admission.classes.%s: %w", name, err)
		}
	}
	router, err := message.NewRouter(n.Admit, cfg.Admission.Methods)
	if err != nil {
		return nil, fmt.Errorf("rtserver: admission methods: %w", err)
	}

	n.Access, err = access.New(cfg.Topics, n.Metrics, log)
	if err != nil {
		return nil, fmt.Errorf("rtserver: %w", err)
	}

	var fallback server.Handler
	if cfg.RPC.Proxy.URL != "" {
		if cfg.RPC.Proxy.Logger == nil {
			cfg.RPC.Proxy.Logger = log
		}
		fallback, err = rpcproxy.New(cfg.RPC.Proxy)
		if err != nil {
			return nil, err
		}
	}

	var b bus.Bus
	n.instanceID = newInstanceID()
	if cfg.Redis.URL != "" {
		n.cluster, err = newCluster(cfg.Redis, cfg.PublishRate, n.Metrics, log, n.Pressure)
		if err != nil {
			return nil, err
		}
		b = n.cluster.bus
		n.Cluster = n.cluster.agg
		n.instanceID = n.cluster.agg.InstanceID()
		n.shared.l = clusterrate.New(n.cluster.client, clusterrate.Options{Prefix: cfg.Redis.ChannelPrefix})
		// The cluster-wide view (own rates plus every fresh sibling's)
		// replaces the local top publishers.
		n.Admit.SetRates(n.cluster.agg)
	}

	var store history.Store
	if n.Access.KeepsHistory() {
		if n.cluster == nil {
			store = history.NewMemory(history.MemoryOptions{Config: cfg.History, Evicted: n.Metrics.HistoryEvictions})
		} else {
			n.history, err = history.NewRedis(history.RedisOptions{
				Client:      n.cluster.client,
				Bus:         n.cluster.bus.(bus.HistoryPublisher),
				KeyPrefix:   cfg.Redis.ChannelPrefix,
				Partitions:  cfg.Redis.Partitions,
				Config:      cfg.History,
				StoreErrors: n.Metrics.HistoryStoreErrors,
				Logger:      log,
			})
			if err != nil {
				return nil, fmt.Errorf("rtserver: history: %w", err)
			}
			store = n.history
		}
	}
	popts, err := n.presenceOptions(cfg)
	if err != nil {
		return nil, fmt.Errorf("rtserver: presence: %w", err)
	}
	limits := cfg.Limits
	limits.RefreshNotice = cfg.Auth.JWT.RefreshNotice
	n.Server = server.New(server.Options{
		History:         store,
		HistoryPolicy:   historyPolicy(store, n.Access),
		HistoryConfig:   cfg.History,
		Config:          limits,
		Gate:            gate,
		Router:          router,
		Pressure:        n.Pressure,
		Bus:             b,
		Metrics:         n.Metrics,
		Logger:          log,
		Fallback:        fallback,
		Access:          n.Access,
		DrainRetryAfter: cfg.Handshake.RetryAfter,
		Presence:        popts,
		InstanceID:      n.instanceID,
	})
	if n.cluster != nil {
		n.cluster.wireSubjects(n.Server)
	}

	metricsHandler := promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{Registry: cfg.Registry})
	n.mux = http.NewServeMux()
	n.mux.Handle("GET /ws", n.Server)
	n.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	n.mux.HandleFunc("GET /readyz", n.readyz)
	if cfg.AdminListen == "" {
		n.mux.Handle("GET /metrics", metricsHandler)
	} else {
		n.adminMux = http.NewServeMux()
		n.adminMux.Handle("GET /metrics", metricsHandler)
	}
	if cfg.API.Key != "" {
		if err := n.mountAPI(); err != nil {
			return nil, fmt.Errorf("rtserver: api: %w", err)
		}
	}
	return n, nil
}

// historyPolicy is the server's history policy: the topic grants'
// namespaces, when some topic keeps history.
func historyPolicy(store history.Store, a *access.Checker) func(string) history.Policy {
	if store == nil {
		return nil
	}
	return a.HistoryOf
}

// lateShared is the cluster-scoped limiter of message.Options.Shared,
// bound to the Redis client once it exists (in New, before anything runs).
type lateShared struct {
	l    *clusterrate.Limiter
	used bool // some class has a cluster-scoped part
}

func (s *lateShared) AllowShared(ctx context.Context, key string, now time.Time, limits []message.SharedLimit, results []ratelimit.Result) error {
	return s.l.AllowShared(ctx, key, now, limits, results)
}

// snapshotRates serves the cluster rule from the local monitor's latest
// top publishers when there is no cluster view (no Redis).
type snapshotRates struct{ m *pressure.Monitor }

func (s snapshotRates) RateOf(topic string) float64    { return s.m.Snapshot().RateOf(topic) }
func (s snapshotRates) RateOfUser(user string) float64 { return s.m.Snapshot().RateOfUser(user) }

// Handle registers an application RPC handler.
func (n *Node) Handle(method string, h server.Handler) { n.Server.Handle(method, h) }

// Publish sends data to every subscriber of topic across the fleet (see
// server.Server.Publish).
func (n *Node) Publish(topic string, data json.RawMessage) error {
	return n.Server.Publish(topic, data)
}

// HandleHTTP adds a route to the main listener beside /ws, /healthz,
// /readyz and /metrics (an application's pages or API), with
// http.ServeMux patterns. Call it before Run or Serve.
func (n *Node) HandleHTTP(pattern string, h http.Handler) { n.mux.Handle(pattern, h) }

// Handler is the main listener's HTTP handler (/ws, /healthz, /readyz, and
// /metrics and the server API unless AdminListen is set).
func (n *Node) Handler() http.Handler { return n.mux }

func (n *Node) readyz(w http.ResponseWriter, _ *http.Request) {
	if !n.Server.Ready() {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("not ready\n"))
		return
	}
	w.Write([]byte("ready\n"))
}

// Run listens and serves until ctx ends, then drains: new upgrades are
// refused, /readyz turns 503, every client is told and closed with 1012
// spread over DrainDuration. Cancelling hardStop (may be nil) during the
// drain closes every remaining connection at once.
func (n *Node) Run(ctx context.Context, hardStop <-chan struct{}) error {
	// No TCP keep-alive: WebSocket pings find dead peers, and Go's default
	// keep-alive costs four setsockopt calls per accepted connection, a
	// tenth of what shedding an upgrade at the door costs in a storm.
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", n.cfg.Listen)
	if err != nil {
		return fmt.Errorf("rtserver: listen: %w", err)
	}
	return n.Serve(ctx, ln, hardStop)
}

// Serve is Run on a listener the caller opened.
//
// The listeners and the background loops run under one errgroup: an error
// of any of them (a listener that fails) ends them all, without a drain,
// in the same order as a normal stop, and Serve returns that first error.
// Order of start: the server (and its bus), the pressure loop, the cluster
// aggregator, then the listeners. Order of stop: drain (listeners still
// serving /readyz 503 and /metrics), the server and its bus, the
// listeners, the aggregator and Redis client, the pressure loop. Serve
// returns only once every goroutine it started has ended.
func (n *Node) Serve(ctx context.Context, ln net.Listener, hardStop <-chan struct{}) error {
	// The admin listener is opened first, so that nothing has started
	// when it fails.
	var aln net.Listener
	if n.adminMux != nil {
		var err error
		if aln, err = net.Listen("tcp", n.cfg.AdminListen); err != nil {
			ln.Close()
			return fmt.Errorf("rtserver: admin listen: %w", err)
		}
	}
	closeListeners := func() {
		ln.Close()
		if aln != nil {
			aln.Close()
		}
	}
	bg, stopBg := context.WithCancel(context.Background())
	defer stopBg()
	if err := n.Server.Start(bg); err != nil {
		closeListeners()
		return err
	}
	if n.cluster != nil {
		if err := n.cluster.start(bg); err != nil {
			closeListeners()
			return errors.Join(err, n.Server.Shutdown(context.Background()))
		}
	}
	if n.shared != nil && n.shared.used {
		// A cold first cluster-scoped check (dial, cluster slots, script
		// load) can outlast its 100ms timeout and be decided by the fail
		// policy; warm up before taking clients. Best effort.
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		if err := n.shared.l.Preload(ctx); err != nil {
			n.log.Warn("cluster-scoped admission: Redis not ready at start; checks decide by admission.failPolicy until it is", "err", err)
		}
		cancel()
	}

	g, failed := errgroup.WithContext(context.Background())
	g.Go(func() error { n.Pressure.Run(bg); return nil })

	// Upgrades are served by the door: shed there while a cap is full,
	// before net/http spends a goroutine and two buffers parsing them, and
	// otherwise upgraded without net/http's per-connection buffers, which
	// a hijacked connection leaves behind as garbage
	// (handshake.ServingListener). Everything else goes to net/http.
	ln = n.Gate.ServingListener(ln, "/ws", n.mux)
	srv := n.cfg.HTTP.server(n.mux, slog.NewLogLogger(n.log.Handler(), slog.LevelDebug))
	g.Go(func() error { return serveHTTP(srv, ln) })
	var admin *http.Server
	if aln != nil {
		admin = n.cfg.HTTP.server(n.adminMux, srv.ErrorLog)
		g.Go(func() error { return serveHTTP(admin, aln) })
	}
	n.log.Info("rtserver listening", "addr", ln.Addr().String(), "admin", n.cfg.AdminListen)
	if n.Access.PublishableByAny() && !loopback(ln.Addr().String()) {
		n.log.Warn("anyone, anonymous clients included, may publish on some topics while the server listens beyond loopback; restrict topics.default.publish and topics.namespaces (docs/access-control.md)", "addr", ln.Addr().String())
	}

	// The stopper: waits for the end of ctx (drain first) or for a member's
	// failure (stop at once), then stops everything in order.
	g.Go(func() error {
		select {
		case <-ctx.Done():
			n.drain(failed, hardStop)
		case <-failed.Done():
		}
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := n.Server.Shutdown(shutdownCtx)
		if n.history != nil {
			n.history.Close()
		}
		srv.Close()
		if admin != nil {
			admin.Close()
		}
		if n.cluster != nil {
			n.cluster.stop()
		}
		stopBg()
		return err
	})
	err := g.Wait()
	n.log.Info("stopped")
	return err
}

// drain closes every client spread over DrainDuration; hardStop (may be
// nil) or the failure of a listener ends it early, closing the rest at
// once.
func (n *Node) drain(failed context.Context, hardStop <-chan struct{}) {
	n.log.Info("draining", "duration", n.cfg.Drain.Duration)
	drainCtx, cancelDrain := context.WithCancel(failed)
	var watcher sync.WaitGroup
	if hardStop != nil {
		watcher.Go(func() {
			select {
			case <-hardStop:
				cancelDrain()
			case <-drainCtx.Done():
			}
		})
	}
	n.Server.Drain(drainCtx, n.cfg.Drain.Duration)
	cancelDrain()
	watcher.Wait()
}

// serveHTTP serves srv on ln until srv is closed (which is not an error).
func serveHTTP(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("rtserver: serve %s: %w", ln.Addr(), err)
	}
	return nil
}
