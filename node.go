package rtserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/instance"
	"github.com/rtserver/rtserver/internal/logx"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/rpcproxy"
	"github.com/rtserver/rtserver/server"
	"github.com/rtserver/rtserver/sse"
)

// Node is one rtserver instance: the handshake gate, the pressure
// monitor, the message tier, the topic grants, the server and, with
// Redis, the cluster parts, built by New in dependency order and run by
// Serve until Shutdown or Close.
type Node struct {
	cfg      Config
	deps     Deps                 // as given to New
	reg      *prometheus.Registry // Deps.Registry
	log      *slog.Logger
	metrics  *metrics.Metrics
	gate     *handshake.Gate
	pressure *pressure.Monitor
	admit    *message.Admission
	access   *access.Checker // the topic grants
	server   *server.Server
	// subscribers is the table of the server's topics and subscribers,
	// made before the parts that read its counts (the cluster aggregator).
	subscribers *server.Subscribers
	cluster     *cluster       // nil without Redis
	history     *history.Redis // the Redis history store; nil without Redis or history

	mux        *http.ServeMux
	adminMux   *http.ServeMux // nil: /metrics on mux
	instanceID string

	// parts are the background parts in order of start (parts.go).
	parts    []namedPart
	starting atomic.Bool   // until the parts have started: /readyz 503
	started  chan struct{} // closed once they have: upgrades wait for it

	// life guards the lifecycle state below (lifecycle.go).
	life        sync.Mutex
	served      bool               // Serve was called
	stopping    bool               // Shutdown or Close was called
	stop        chan struct{}      // closed when stopping is set
	drainCtx    context.Context    // Shutdown's context; nil: stop without a drain
	cancelDrain context.CancelFunc // Close cuts a Shutdown's drain short
	done        chan struct{}      // closed when Serve has stopped everything
	release     sync.Once          // closes the parts once
}

// New builds a node in dependency order: every part gets what it needs
// when it is made. What the server counts and parts built before it read
// (connections and subscriptions for the pressure monitor, subscribers
// per topic for the cluster aggregator) is kept in things made first:
// the monitor, and the server's server.Subscribers table.
// Nothing listens and no goroutine starts until Serve. cfg is validated
// first: every invalid key is reported at once.
func New(cfg Config, deps Deps) (*Node, error) {
	if err := cfg.ValidateWith(deps); err != nil {
		return nil, fmt.Errorf("rtserver: invalid configuration: %w", err)
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if deps.Registry == nil {
		deps.Registry = prometheus.NewRegistry()
	}
	log := deps.Logger
	if log == nil {
		log = slog.Default()
	}
	// Under a flood the same warning repeats per event (a failing backend,
	// forged envelopes): one line per kind per interval, with a count.
	log = slog.New(logx.Limit(log.Handler(), 10*time.Second, nil))
	n := &Node{cfg: cfg, deps: deps, reg: deps.Registry, log: log, stop: make(chan struct{}), done: make(chan struct{}), started: make(chan struct{})}
	m, err := metrics.New(n.reg, cfg.Metrics.Namespace)
	if err != nil {
		return nil, fmt.Errorf("rtserver: %w", err)
	}
	n.metrics = m

	tokens, err := handshake.NewVerifier(cfg.Auth.JWT.JWT, handshake.VerifierDeps{PublicKey: deps.JWTPublicKey, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("rtserver: %w", err)
	}
	if n.gate, err = handshake.New(cfg.Handshake, handshake.Deps{Metrics: n.metrics, Logger: log, Tokens: tokens}); err != nil {
		return nil, fmt.Errorf("rtserver: %w", err)
	}
	if n.pressure, err = pressure.New(cfg.Pressure, pressure.Deps{Metrics: n.metrics, Logger: log}); err != nil {
		return nil, fmt.Errorf("rtserver: %w", err)
	}

	// The cluster parts (Redis client, aggregator, shared limiter) come
	// before the message tier, which reads them.
	n.instanceID = instance.NewID()
	n.subscribers = server.NewSubscribers()
	if cfg.Redis.URL != "" {
		if n.cluster, err = newCluster(cfg, n.instanceID, n.metrics, log, n.pressure, n.subscribers); err != nil {
			return nil, err
		}
	}
	if err := n.build(); err != nil {
		if n.cluster != nil {
			n.cluster.client.Close()
		}
		return nil, err
	}
	n.buildParts()
	n.starting.Store(true)
	return n, nil
}

// build makes the message tier, the grants, the server and the routes:
// everything after the cluster parts, whose client New closes on an
// error here.
func (n *Node) build() error {
	cfg, log := n.cfg, n.log
	deps := message.Deps{
		Snapshot:   n.pressure.Snapshot,
		Rates:      n.pressure, // live rates over the last second, without Redis
		RetryAfter: cfg.Handshake.RetryAfter,
		Metrics:    n.metrics,
		Predicates: n.deps.AdmissionPredicates,
	}
	if n.cluster != nil {
		// The cluster-wide view (own rates plus every fresh sibling's)
		// answers instead of the local top publishers.
		deps.Rates = n.cluster.agg
		deps.Shared = n.cluster.limiter
		deps.Ceilings = n.cluster.ceilings
	}
	var err error
	if n.admit, err = message.New(cfg.Admission, deps); err != nil {
		return fmt.Errorf("rtserver: %w", err) // "message: class %q: ..."
	}
	router, err := message.NewRouter(n.admit, cfg.Admission.Methods)
	if err != nil {
		return fmt.Errorf("rtserver: %w", err) // "message: method %q: ..."
	}
	if n.access, err = access.New(cfg.Topics, access.Deps{Metrics: n.metrics, Logger: log, ProxyClient: n.deps.TopicsProxyClient, Grants: n.deps.TopicGrants}); err != nil {
		return fmt.Errorf("rtserver: %w", err)
	}

	var fallback server.Handler
	if cfg.RPC.Proxy.URL != "" {
		if fallback, err = rpcproxy.New(cfg.RPC.Proxy, rpcproxy.Deps{Logger: log}); err != nil {
			return fmt.Errorf("rtserver: %w", err)
		}
	}

	var b bus.Bus // nil: the server's in-memory bus
	if n.cluster != nil {
		if b, err = n.cluster.newBus(cfg.Redis, n.instanceID, cfg.PublishRate.HMACSecret, n.metrics, log); err != nil {
			return err
		}
	}

	store, err := n.historyStore(cfg, b)
	if err != nil {
		return fmt.Errorf("rtserver: history: %w", err)
	}
	limits := cfg.Limits
	n.server, err = server.New(limits, server.Deps{
		Gate:            n.gate,
		Router:          router,
		Pressure:        n.pressure,
		Bus:             b,
		Metrics:         n.metrics,
		Logger:          log,
		Fallback:        fallback,
		Access:          n.access,
		DrainRetryAfter: cfg.Handshake.RetryAfter,
		RefreshNotice:   cfg.Auth.JWT.RefreshNotice,
		Presence:        n.presenceOptions(cfg),
		InstanceID:      n.instanceID,
		Subscribers:     n.subscribers,
		History:         store,
		HistoryPolicy:   n.historyPolicy(),
		HistoryConfig:   cfg.History,
	})
	if err != nil {
		return fmt.Errorf("rtserver: %w", err)
	}

	metricsHandler := promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{Registry: n.reg})
	n.mux = http.NewServeMux()
	n.mux.Handle("GET /ws", upgrades{n})
	// Server-Sent Events and POST for clients WebSocket cannot reach: each
	// one a connection of the server's own, through its handshake tier.
	events, err := sse.New(sse.Config{MaxMessageBytes: limits.MaxMessageBytes}, sse.Deps{WebSocket: n.server})
	if err != nil {
		return fmt.Errorf("rtserver: %w", err)
	}
	n.mux.Handle("GET /sse", events)
	n.mux.Handle("POST /sse", events)
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
			return fmt.Errorf("rtserver: %w", err) // "serverapi: ..."
		}
	}
	return nil
}

// upgrades serves /ws once the node's parts have started: an upgrade that
// comes during the start (at most a second, whatever Redis does) waits.
type upgrades struct{ n *Node }

func (u upgrades) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case <-u.n.started:
	default:
		// Only an upgrade that comes before the start asks for its
		// request's Done: on a request the door serves, that starts a
		// watch of the socket (a goroutine) for as long as it waits.
		select {
		case <-u.n.started:
		case <-r.Context().Done():
			return
		}
	}
	u.n.server.ServeHTTP(w, r)
}

// Handle registers an application RPC handler. Call it before Serve.
func (n *Node) Handle(method string, h server.Handler) { n.server.Handle(method, h) }

// Admission is the node's message tier, to share its classes with other
// entry points (message/admithttp, message/admitgrpc).
func (n *Node) Admission() *message.Admission { return n.admit }

// Access is the node's topic grants, to ask them from Go code.
func (n *Node) Access() *access.Checker { return n.access }

// HandleHTTP adds a route to the main listener beside /ws, /healthz,
// /readyz and /metrics (an application's pages or API), with
// http.ServeMux patterns. Call it before Serve.
func (n *Node) HandleHTTP(pattern string, h http.Handler) { n.mux.Handle(pattern, h) }

// Handler is the main listener's HTTP handler (/ws, /healthz, /readyz, and
// /metrics and the server API unless AdminListen is set), to mount on a
// server of the program's own. Until Start or Serve has started the
// node's parts, it answers every request 503 with ErrNotStarted's text:
// mounted alone it would report ready while every publish waited on a bus
// nobody started.
func (n *Node) Handler() http.Handler { return http.HandlerFunc(n.serveStarted) }

// ErrNotStarted is what Handler answers (503) before Serve has started the
// node.
var ErrNotStarted = errors.New("rtserver: the node has not started: call node.Start when its Handler is mounted on your own http.Server, or node.Serve (docs/embedding.md)")

func (n *Node) serveStarted(w http.ResponseWriter, r *http.Request) {
	select {
	case <-n.started:
	default:
		w.Header().Set("Retry-After", "1")
		http.Error(w, ErrNotStarted.Error(), http.StatusServiceUnavailable)
		return
	}
	n.mux.ServeHTTP(w, r)
}

func (n *Node) readyz(w http.ResponseWriter, _ *http.Request) {
	why := n.server.NotReady()
	if n.starting.Load() {
		why = strings.TrimSuffix("starting; "+why, "; ")
	}
	if why != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("not ready: " + why + "\n"))
		return
	}
	w.Write([]byte("ready\n"))
}
