package metrics

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Handshake rejection reasons (the reason label of handshake_rejected_total).
const (
	RejectMaxConnections = "max_connections"
	RejectMaxConcurrent  = "max_concurrent"
	RejectQueueTimeout   = "queue_timeout"
	RejectPerIP          = "per_ip"
	RejectOrigin         = "origin"
	RejectAuth           = "auth"
	RejectDraining       = "draining"
)

// HandshakeRejectReasons lists every reason label, pre-created at zero so
// dashboards and alerts see the series before the first rejection.
var HandshakeRejectReasons = []string{
	RejectMaxConnections, RejectMaxConcurrent, RejectQueueTimeout,
	RejectPerIP, RejectOrigin, RejectAuth, RejectDraining,
}

// Token refusal reasons (the reason label of handshake_auth_refused_total
// and the error_description of the 401's WWW-Authenticate header;
// docs/authentication.md). The first check that failed decides.
const (
	AuthMissing      = "missing"       // no token in the request
	AuthTooLarge     = "too_large"     // over 8 KiB
	AuthMalformed    = "malformed"     // not three base64url segments of JSON
	AuthUnverifiable = "unverifiable"  // alg or kid matches no configured key, or crit extensions
	AuthSignature    = "signature"     // signed with another key
	AuthExpired      = "expired"       // exp in the past
	AuthLifetime     = "lifetime"      // no exp with auth.jwt.requireExp, or exp past auth.jwt.maxLifetime
	AuthNotYetValid  = "not_yet_valid" // nbf or iat in the future
	AuthAudience     = "audience"      // aud lacks auth.jwt.audience
	AuthIssuer       = "issuer"        // iss is not auth.jwt.issuer
	AuthNoSubject    = "no_subject"    // no sub claim
	AuthBadSubject   = "bad_subject"   // sub over 1,024 bytes, or with a control character or invalid UTF-8
	AuthTopicsClaim  = "topics_claim"  // the topics claim has the wrong shape
	AuthCrit         = "crit"          // the header lists crit extensions
	AuthInvalid      = "invalid"       // anything else
)

// AuthRefusalReasons lists every reason label of
// handshake_auth_refused_total, pre-created at zero.
var AuthRefusalReasons = []string{
	AuthMissing, AuthTooLarge, AuthMalformed, AuthUnverifiable, AuthSignature,
	AuthExpired, AuthLifetime, AuthNotYetValid, AuthAudience, AuthIssuer, AuthNoSubject, AuthBadSubject,
	AuthTopicsClaim, AuthCrit, AuthInvalid,
}

// Labels of topic_denied_namespace_total beside the configured namespace
// patterns: the default rule, and the reserved "__" topics.
const (
	DeniedByDefault  = "(default)"
	DeniedByReserved = "(reserved)"
)

// Topic grant labels: the action label of topic_denied_total and the
// reason label of topic_proxy_errors_total (docs/access-control.md).
const (
	ActionSubscribe = "subscribe"
	ActionPublish   = "publish"

	ProxyErrorStatus      = "status"       // the backend answered a status other than 200
	ProxyErrorBadResponse = "bad_response" // the body was not JSON {"allow": bool}
	ProxyErrorTimeout     = "timeout"      // no answer within topics.proxy.timeout
	ProxyErrorTransport   = "transport"    // the request could not be made (refused, reset, ...)
)

// ProxyErrorReasons lists every reason label of topic_proxy_errors_total,
// pre-created at zero.
var ProxyErrorReasons = []string{ProxyErrorStatus, ProxyErrorBadResponse, ProxyErrorTimeout, ProxyErrorTransport}

// BusDropReasons lists every reason label of bus_messages_dropped_total
// (the bus package's Drop* constants), pre-created at zero: an instance
// without Redis exports them too, so one dashboard fits every instance.
var BusDropReasons = []string{"degraded", "queue_full", "slow_receiver", "oversize", "malformed", "bad_topic", "notice_overflow"}

// ProtocolErrorCodes lists the code labels of protocol_errors_total that
// bad client input can produce, pre-created at zero: the JSON-RPC errors
// of a frame that does not decode (-32700, -32600, -32602) and the close
// codes of a frame the server will not read (1003 binary, 1007 not UTF-8,
// 1008 repeated invalid requests, 1009 over limits.maxMessageBytes).
var ProtocolErrorCodes = []string{"-32700", "-32600", "-32602", "1003", "1007", "1008", "1009"}

// Metrics holds every collector. A nil *Metrics is not valid; use
// NewDiscard in tests that do not look at metrics.
type Metrics struct {
	AdmissionAccepted  *prometheus.CounterVec // class
	AdmissionRejected  *prometheus.CounterVec // class, reason
	AdmissionErrors    *prometheus.CounterVec // class: rules that errored or panicked (decided by failPolicy)
	AdmissionConcLimit *prometheus.GaugeVec   // class: the current limit of an adaptiveConcurrency part
	// AdmissionCeilingFallbacks, class: a fleet ceiling (adaptiveConcurrency
	// scope cluster) could not be shared through Redis, so the class fell
	// back to its own limit until the next exchange.
	AdmissionCeilingFallbacks *prometheus.CounterVec

	HandshakeAccepted    prometheus.Counter
	HandshakeRejected    *prometheus.CounterVec // reason
	HandshakeAuthRefused *prometheus.CounterVec // reason: why a token was refused (the auth rejections, split)
	HandshakeInflight    *FuncGauge             // read from the gate at scrape time
	HandshakeQueueDepth  prometheus.Gauge
	ConnectionsOpen      *FuncGauge         // read from the gate at scrape time
	AcceptFDExhausted    prometheus.Counter // accepts that failed for want of file descriptors (internal/acceptlog)

	PressureReason      *prometheus.GaugeVec // reason
	PressurePublishRate prometheus.Gauge
	PressureMemoryRatio prometheus.Gauge
	TopicPublishRate    *TopN // ws_topic_publish_rate{topic}

	ClusterBroadcasts  prometheus.Counter
	ClusterReceived    prometheus.Counter
	ClusterParseErrors prometheus.Counter
	ClusterInstances   prometheus.Gauge
	// Siblings past publishRate.maxInstances: their envelopes, and how
	// many such instances were heard from within publishRate.staleAfter.
	ClusterIgnored          prometheus.Counter
	ClusterInstancesIgnored prometheus.Gauge
	ClusterTopicRate        *TopN // cluster_topic_publish_rate{topic}
	ClusterTopicBytes       *TopN // cluster_topic_publish_bytes{topic}

	BusPublished prometheus.Counter
	BusReceived  prometheus.Counter
	BusDropped   *prometheus.CounterVec // reason
	BusDegraded  prometheus.Gauge

	MessagesSent            prometheus.Counter
	SlowConsumerDisconnects prometheus.Counter
	ProtocolErrors          *prometheus.CounterVec // code: bad input answered with an error or close code

	TopicDenied      *prometheus.CounterVec // action: subscribe and publish calls no grant allowed (-32003)
	TopicDeniedNS    *prometheus.CounterVec // namespace: the rule that decided a -32003 (pattern, "(default)" or "(reserved)")
	TopicProxyErrors *prometheus.CounterVec // reason: proxy grant questions that failed (decided by topics.proxy.fail)

	APIRequests *prometheus.CounterVec // method, code: server API calls (docs/server-api.md)

	// History and recovery (docs/history.md).
	HistoryRecoveries  *prometheus.CounterVec // result: subscribes with recover, by outcome
	HistoryReplayed    prometheus.Counter     // messages replayed to recovering subscribers
	HistoryGapFills    *prometheus.CounterVec // result: gaps in a topic's offsets this instance saw
	HistoryResyncs     prometheus.Counter     // resync events sent
	HistoryStoreErrors *prometheus.CounterVec // op: failed store operations
	HistoryEvictions   prometheus.Counter     // memory store topics evicted by its byte cap

	PresenceEntries   prometheus.Gauge   // this instance's entries in presence topics (docs/presence.md)
	PresenceDiffsSent prometheus.Counter // presence notifications queued to clients
}

// History label values: the result label of history_recoveries_total and
// history_gap_fills_total, the op label of history_store_errors_total.
const (
	RecoveryRecovered   = "recovered"
	RecoveryEpoch       = "epoch"
	RecoveryTrimmed     = "trimmed"
	RecoveryTooMany     = "tooMany"
	RecoveryUnavailable = "unavailable"

	GapFilled = "filled" // read from the store and delivered
	GapResync = "resync" // the store no longer had it: subscribers got resync
	GapError  = "error"  // the store could not be read (retried)

	StoreOpPublish = "publish"
	StoreOpRead    = "read"
)

// RecoveryResults, GapResults and StoreOps list the label values, created
// at zero.
var (
	RecoveryResults = []string{RecoveryRecovered, RecoveryEpoch, RecoveryTrimmed, RecoveryTooMany, RecoveryUnavailable}
	GapResults      = []string{GapFilled, GapResync, GapError}
	StoreOps        = []string{StoreOpPublish, StoreOpRead}
)

// New creates every metric and registers it on reg; namespace prefixes
// every name ("" for none). It registers nothing else: the Go and process
// collectors are process-wide, so the program registers them, once.
//
// A name reg already holds (a second node on the same registry, under the
// same namespace) is an error wrapping prometheus.AlreadyRegisteredError,
// and New then unregisters what it had registered, leaving reg as it was.
// Two nodes share a registry under distinct namespaces, or each through
// prometheus.WrapRegistererWith with its own value of one label.
func New(reg prometheus.Registerer, namespace string) (m *Metrics, err error) {
	f := &factory{reg: reg, ns: namespace}
	defer func() {
		if f.err != nil {
			for _, c := range f.done {
				reg.Unregister(c)
			}
			m, err = nil, f.err
		}
	}()
	m = &Metrics{

		AdmissionAccepted:         f.counterVec("admission_accepted_total", "Message-tier calls admitted, by class.", "class"),
		AdmissionRejected:         f.counterVec("admission_rejected_total", "Message-tier calls shed, by class and binding reason.", "class", "reason"),
		AdmissionErrors:           f.counterVec("admission_rule_errors_total", "Rule parts that errored or panicked (a predicate, a cluster-scoped check whose Redis failed, an unreadable cost param) and were decided by failPolicy, by class.", "class"),
		AdmissionConcLimit:        f.gaugeVec("admission_concurrency_limit", "The current in-flight limit of each class with an adaptiveConcurrency part.", "class"),
		AdmissionCeilingFallbacks: f.counterVec("admission_concurrency_ceiling_fallbacks_total", "Exchanges of a fleet-wide adaptive concurrency limit that failed, so the class used its own limit.", "class"),

		HandshakeAccepted:    f.counter("handshake_accepted_total", "WebSocket upgrades admitted by the handshake tier."),
		HandshakeRejected:    f.counterVec("handshake_rejected_total", "WebSocket upgrades rejected by the handshake tier, by reason.", "reason"),
		HandshakeAuthRefused: f.counterVec("handshake_auth_refused_total", "WebSocket upgrades refused with 401, by the token check that failed.", "reason"),
		HandshakeInflight:    f.funcGauge("handshake_inflight", "Upgrades in flight (arrived, handshake not finished)."),
		HandshakeQueueDepth:  f.gauge("handshake_queue_depth", "Upgrades waiting for a pacing tick."),
		ConnectionsOpen:      f.funcGauge("connections_open", "Open WebSocket connections on this instance."),
		AcceptFDExhausted:    f.counter("accept_fd_exhausted_total", "Accepts that failed because the process or the system had no file descriptor left (EMFILE, ENFILE)."),

		PressureReason:      f.gaugeVec("pressure_reason", "1 for the active pressure reason, 0 for the others.", "reason"),
		PressurePublishRate: f.gauge("pressure_publish_rate", "Messages published per second on this instance, over the last sample interval."),
		PressureMemoryRatio: f.gauge("pressure_memory_ratio", "Go heap in use divided by the memory limit."),
		TopicPublishRate:    f.topN("ws_topic_publish_rate", "Publish attempts per second for this instance's top-N topics."),

		ClusterBroadcasts:       f.counter("cluster_publish_rate_broadcasts_total", "Top-publisher envelopes this instance broadcast."),
		ClusterReceived:         f.counter("cluster_publish_rate_received_total", "Top-publisher envelopes received from sibling instances."),
		ClusterParseErrors:      f.counter("cluster_publish_rate_parse_errors_total", "Top-publisher envelopes dropped as malformed, oversize, unsigned or forged."),
		ClusterInstances:        f.gauge("cluster_publish_rate_instances", "Sibling instances with a fresh envelope (self excluded)."),
		ClusterIgnored:          f.counter("cluster_publish_rate_ignored_total", "Envelopes from new sibling instances ignored because publishRate.maxInstances siblings were held."),
		ClusterInstancesIgnored: f.gauge("cluster_publish_rate_instances_ignored", "Sibling instances left out of the cluster view by publishRate.maxInstances within the last publishRate.staleAfter."),
		ClusterTopicRate:        f.topN("cluster_topic_publish_rate", "Cluster-wide publish attempts per second for the merged top-N topics."),
		ClusterTopicBytes:       f.topN("cluster_topic_publish_bytes", "Cluster-wide published bytes per second for the merged top-N topics."),

		BusPublished: f.counter("bus_messages_published_total", "Messages handed to the cross-instance bus."),
		BusReceived:  f.counter("bus_messages_received_total", "Messages received from other instances over the bus."),
		BusDropped:   f.counterVec("bus_messages_dropped_total", "Bus messages dropped, by reason.", "reason"),
		BusDegraded:  f.gauge("bus_degraded", "1 while cross-instance delivery is down."),

		MessagesSent:            f.counter("messages_sent_total", "Messages (responses and notifications) queued to clients."),
		SlowConsumerDisconnects: f.counter("slow_consumer_disconnects_total", "Clients closed with 1013 because their send queue overflowed."),
		ProtocolErrors:          f.counterVec("protocol_errors_total", "Bad client input answered with an error or close code, by code.", "code"),

		TopicDenied:      f.counterVec("topic_denied_total", "Subscribe and publish calls refused by the topic grants (-32003), by action.", "action"),
		TopicDeniedNS:    f.counterVec("topic_denied_namespace_total", "Subscribe and publish calls refused by the topic grants (-32003), by the namespace pattern that decided (\"(default)\" for the default rule, \"(reserved)\" for __ topics).", "namespace"),
		TopicProxyErrors: f.counterVec("topic_proxy_errors_total", "Questions to the topic grant proxy that failed and were decided by topics.proxy.fail, by reason.", "reason"),

		APIRequests: f.counterVec("api_requests_total", "Server API calls, by method (unknown methods as \"unknown\") and HTTP status code.", "method", "code"),

		PresenceEntries:   f.gauge("presence_entries", "This instance's connections present in presence topics (one per connection and topic)."),
		PresenceDiffsSent: f.counter("presence_diffs_sent_total", "Presence join/leave notifications queued to clients."),
	}
	m.HistoryRecoveries = f.counterVec("history_recoveries_total", "Subscribes with recover on history topics, by result.", "result")
	m.HistoryReplayed = f.counter("history_replayed_messages_total", "Messages replayed from history to recovering subscribers.")
	m.HistoryGapFills = f.counterVec("history_gap_fills_total", "Gaps in a history topic's offsets seen by this instance, by result.", "result")
	m.HistoryResyncs = f.counter("history_resyncs_total", "Resync events sent to subscribers of history topics.")
	m.HistoryStoreErrors = f.counterVec("history_store_errors_total", "History store operations that failed, by op.", "op")
	m.HistoryEvictions = f.counter("history_evictions_total", "History topics whose streams the memory store dropped to stay under history.memoryMaxBytes.")
	for _, r := range RecoveryResults {
		m.HistoryRecoveries.WithLabelValues(r)
	}
	for _, r := range GapResults {
		m.HistoryGapFills.WithLabelValues(r)
	}
	for _, op := range StoreOps {
		m.HistoryStoreErrors.WithLabelValues(op)
	}
	m.TopicDenied.WithLabelValues(ActionSubscribe)
	m.TopicDenied.WithLabelValues(ActionPublish)
	for _, r := range ProxyErrorReasons {
		m.TopicProxyErrors.WithLabelValues(r)
	}
	for _, r := range HandshakeRejectReasons {
		m.HandshakeRejected.WithLabelValues(r)
	}
	for _, r := range AuthRefusalReasons {
		m.HandshakeAuthRefused.WithLabelValues(r)
	}
	m.TopicDeniedNS.WithLabelValues(DeniedByDefault)
	m.TopicDeniedNS.WithLabelValues(DeniedByReserved)
	for _, r := range BusDropReasons {
		m.BusDropped.WithLabelValues(r)
	}
	for _, code := range ProtocolErrorCodes {
		m.ProtocolErrors.WithLabelValues(code)
	}
	return m, nil
}

// NewDiscard returns metrics on a private registry, for tests and for
// library users who do not export metrics.
func NewDiscard() *Metrics {
	m, err := New(prometheus.NewRegistry(), "")
	if err != nil {
		panic(err) // a fresh registry holds nothing to collide with
	}
	return m
}

// factory makes and registers the collectors of New; after the first
// registration that fails it registers nothing more and keeps the error.
type factory struct {
	reg  prometheus.Registerer
	ns   string
	err  error
	done []prometheus.Collector // registered so far
}

func (f *factory) register(name string, c prometheus.Collector) {
	if f.err != nil {
		return
	}
	if err := f.reg.Register(c); err != nil {
		f.err = fmt.Errorf("metrics: %s: %w", prometheus.BuildFQName(f.ns, "", name), err)
		return
	}
	f.done = append(f.done, c)
}

func (f *factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: f.ns, Name: name, Help: help})
	f.register(name, c)
	return c
}

func (f *factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: f.ns, Name: name, Help: help}, labels)
	f.register(name, c)
	return c
}

func (f *factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: f.ns, Name: name, Help: help})
	f.register(name, g)
	return g
}

func (f *factory) funcGauge(name, help string) *FuncGauge {
	g := &FuncGauge{desc: prometheus.NewDesc(prometheus.BuildFQName(f.ns, "", name), help, nil, nil)}
	f.register(name, g)
	return g
}

func (f *factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: f.ns, Name: name, Help: help}, labels)
	f.register(name, g)
	return g
}

func (f *factory) topN(name, help string) *TopN {
	return &TopN{vec: f.gaugeVec(name, help, "topic")}
}

// FuncGauge is a gauge whose value is read when it is scraped, from a
// function set by the part that owns the number. The handshake gate keeps
// its counts in one atomic word; reading them at scrape time keeps two
// gauge updates off every admit and release. 0 until a function is set.
type FuncGauge struct {
	desc *prometheus.Desc
	f    atomic.Pointer[func() float64]
}

// SetFunc makes f the source of the gauge's value.
func (g *FuncGauge) SetFunc(f func() float64) { g.f.Store(&f) }

// Describe implements prometheus.Collector.
func (g *FuncGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect implements prometheus.Collector.
func (g *FuncGauge) Collect(ch chan<- prometheus.Metric) {
	v := 0.0
	if f := g.f.Load(); f != nil {
		v = (*f)()
	}
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v)
}

// TopN is a gauge labelled by topic whose series are exactly the current
// top-N: topics that leave the top-N leave the exposition.
type TopN struct {
	mu   sync.Mutex
	vec  *prometheus.GaugeVec
	prev map[string]struct{}
}

// Set replaces the whole label set with values (topic -> value).
func (t *TopN) Set(values map[string]float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for topic := range t.prev {
		if _, ok := values[topic]; !ok {
			t.vec.DeleteLabelValues(topic)
		}
	}
	next := make(map[string]struct{}, len(values))
	for topic, v := range values {
		t.vec.WithLabelValues(topic).Set(v)
		next[topic] = struct{}{}
	}
	t.prev = next
}
