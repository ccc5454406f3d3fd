package serverapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/bufpool"
	"github.com/rtserver/rtserver/internal/jsonexact"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/presence"
	"github.com/rtserver/rtserver/protocol"
)

// Backend carries out API calls. Params reach it validated: topics match
// the client grammar and are not reserved, data is valid JSON, users are 1
// to MaxUserLen bytes. An error it returns answers 503 (the call could not
// be carried out now; e.g. cross-instance delivery is down).
type Backend interface {
	// Publish sends data to every subscriber of topic on every instance.
	Publish(topic string, data json.RawMessage) error
	// Disconnect closes every connection of user on every instance.
	Disconnect(user string) error
	// Unsubscribe takes user's connections on every instance off topic.
	Unsubscribe(user, topic string) error
	// Info describes this instance and the fleet it sees.
	Info() Info
	// Presence lists a page of topic's presence after cursor, and
	// PresenceStats counts it (docs/presence.md); presence.ErrOff for a
	// topic that keeps no presence (400).
	Presence(ctx context.Context, topic, cursor string) (presence.Page, error)
	PresenceStats(ctx context.Context, topic string) (presence.Stats, error)
	// Draining reports whether this instance is draining: calls answer 503.
	Draining() bool
}

// HistoryBackend is implemented by a Backend whose topics may keep
// history (docs/history.md): publish and broadcast then go through
// PublishAt and return positions, and the history method is served.
type HistoryBackend interface {
	// PublishAt publishes like Publish, through the history store when
	// topic keeps history: it returns the position then (nil otherwise).
	// key, when not empty, is the call's idempotencyKey.
	PublishAt(ctx context.Context, topic string, data json.RawMessage, key string) (*history.Position, error)
	// History answers the history method: {"epoch","offset","messages"}.
	// ErrNoHistory when topic keeps none.
	History(ctx context.Context, topic string, since *protocol.Since, limit int) (json.RawMessage, error)
}

// ErrNoHistory is HistoryBackend.History's error for a topic that keeps
// no history: the call answers 400.
var ErrNoHistory = history.ErrNoHistory

// Info is the result of the info method.
type Info struct {
	InstanceID  string `json:"instanceId"`
	Connections int64  `json:"connections"` // open WebSocket connections on this instance
	Topics      int    `json:"topics"`      // topics with a subscriber on this instance
	Instances   int    `json:"instances"`   // this one plus every sibling with a fresh rate envelope
}

// Config of the API handler: api.key and the limits it shares with
// client frames.
type Config struct {
	// Key is the API key callers present as "Authorization: apikey KEY"
	// (api.key). Required.
	Key string
	// MaxBodyBytes caps a request body; a larger one answers 413.
	// 0: 65536 (rtserver passes limits.maxMessageBytes).
	MaxBodyBytes int64
	// MaxJSONDepth is how deeply a body's JSON may nest; a deeper one
	// answers 400 (-32600). 0: protocol.DefaultMaxDepth (64; rtserver
	// passes limits.maxJSONDepth), the limit client frames have.
	MaxJSONDepth int
}

// Deps are what the API handler uses beside its configuration.
type Deps struct {
	// Backend carries out the calls. Required.
	Backend Backend
	// Metrics receives api_requests_total. nil: metrics.NewDiscard().
	Metrics *metrics.Metrics
	// Logger logs calls that fail on the backend's side. nil: discard.
	Logger *slog.Logger
}

// API methods, the last element of the path /api/<method>.
const (
	MethodPublish     = protocol.MethodPublish
	MethodBroadcast   = protocol.MethodBroadcast
	MethodDisconnect  = protocol.MethodDisconnect
	MethodUnsubscribe = protocol.MethodUnsubscribe
	MethodInfo        = protocol.MethodInfo
	// MethodPresence and MethodPresenceStats take the client methods'
	// params and answer their results.
	MethodPresence      = protocol.MethodPresence
	MethodPresenceStats = protocol.MethodPresenceStats
	MethodHistory       = protocol.MethodHistory
	// unknownMethod is the method label of paths that name no method.
	unknownMethod = "unknown"
)

// Limits on params.
const (
	MaxUserLen         = handshake.MaxUserLen // bytes of a user id: every user a token can name
	MaxBroadcastTopics = 1000                 // topics of one broadcast
)

// Prefix is the path under which the handler serves: mount it at Prefix.
const Prefix = "/api/"

// Handler serves the API. Create it with New.
type Handler struct {
	keyHash [sha256.Size]byte
	max     int64
	depth   int
	b       Backend
	m       *metrics.Metrics
	log     *slog.Logger
}

// New returns the API handler.
func New(cfg Config, deps Deps) (*Handler, error) {
	if cfg.Key == "" {
		return nil, errors.New("serverapi: empty key")
	}
	if deps.Backend == nil {
		return nil, errors.New("serverapi: no backend")
	}
	h := &Handler{keyHash: sha256.Sum256([]byte(cfg.Key)), max: cfg.MaxBodyBytes, b: deps.Backend, m: deps.Metrics, log: deps.Logger}
	if h.max <= 0 {
		h.max = 65536
	}
	h.depth = cfg.MaxJSONDepth
	if h.depth <= 0 {
		h.depth = protocol.DefaultMaxDepth
	}
	if h.m == nil {
		h.m = metrics.NewDiscard()
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	precreateRequestSeries(h.m)
	return h, nil
}

// precreateRequestSeries exports every method and status pair a call can
// be counted with at 0, so dashboards and error-ratio alerts see the
// series before the first call. The statuses are those of the checks in
// serve, in their order: a path that names no method is answered 401,
// 503 or 404 before its body is read.
func precreateRequestSeries(m *metrics.Metrics) {
	for _, method := range []string{MethodPublish, MethodBroadcast, MethodHistory, MethodDisconnect, MethodUnsubscribe, MethodInfo, MethodPresence, MethodPresenceStats} {
		for _, status := range []string{"200", "400", "401", "413", "503"} {
			m.APIRequests.WithLabelValues(method, status)
		}
	}
	for _, status := range []string{"401", "404", "503"} {
		m.APIRequests.WithLabelValues(unknownMethod, status)
	}
}

// apiError is an error answer: the HTTP status and the JSON-RPC error.
type apiError struct {
	status     int
	code       int
	message    string
	retryAfter bool   // a 503 the caller should retry: Retry-After: 1
	reason     string // the -32001 data's reason (BUS, HISTORY_UNAVAILABLE); "": no data
}

func fail(status, code int, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func badParams(format string, args ...any) *apiError {
	return fail(http.StatusBadRequest, protocol.CodeInvalidParams, format, args...)
}

var okResult = []byte(`{"result":{}}`)

// ServeHTTP answers one API call.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, Prefix)
	label := name
	if !known(name) {
		label = unknownMethod
	}
	result, aerr := h.serve(w, r, name)
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	status := http.StatusOK
	if aerr != nil {
		status = aerr.status
		if aerr.retryAfter {
			hdr.Set("Retry-After", "1")
		}
		var b []byte
		b = append(b, `{"error":{"code":`...)
		b = strconv.AppendInt(b, int64(aerr.code), 10)
		b = append(b, `,"message":`...)
		msg, _ := json.Marshal(aerr.message)
		b = append(b, msg...)
		if aerr.reason != "" {
			b = append(b, `,"data":{"reason":`...)
			r, _ := json.Marshal(aerr.reason)
			b = append(b, r...)
			b = append(b, `,"retryAfterMs":1000}`...)
		}
		result = append(b, "}}"...)
		if status >= 500 {
			h.log.Warn("server API call failed", "method", label, "status", status, "err", aerr.message)
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write(result)
	h.m.APIRequests.WithLabelValues(label, strconv.Itoa(status)).Inc()
}

func known(name string) bool {
	switch name {
	case MethodPublish, MethodBroadcast, MethodDisconnect, MethodUnsubscribe, MethodInfo, MethodPresence, MethodPresenceStats, MethodHistory:
		return true
	}
	return false
}

// serve checks the request in the documented order and runs it.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, name string) ([]byte, *apiError) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return nil, fail(http.StatusMethodNotAllowed, protocol.CodeInvalidRequest, "use POST")
	}
	if !h.authorized(r.Header.Get("Authorization")) {
		w.Header().Set("WWW-Authenticate", "apikey")
		return nil, fail(http.StatusUnauthorized, protocol.CodeForbidden, `missing or wrong API key (want "Authorization: apikey KEY")`)
	}
	if h.b.Draining() {
		w.Header().Set("Retry-After", "1")
		return nil, fail(http.StatusServiceUnavailable, protocol.CodeOverloaded, "draining")
	}
	if !known(name) {
		return nil, fail(http.StatusNotFound, protocol.CodeMethodNotFound, "unknown method %q (want publish, broadcast, history, disconnect, unsubscribe, info, presence or presenceStats)", name)
	}
	buf := bufpool.Get()
	defer bufpool.Put(buf)
	body, aerr := h.readBody(r, buf)
	if aerr != nil {
		return nil, aerr
	}
	switch name {
	case MethodPublish:
		return h.publish(r.Context(), body)
	case MethodBroadcast:
		return h.broadcast(r.Context(), body)
	case MethodHistory:
		return h.history(r.Context(), body)
	case MethodDisconnect:
		return h.disconnect(body)
	case MethodUnsubscribe:
		return h.unsubscribe(body)
	case MethodPresence, MethodPresenceStats:
		return h.presence(r.Context(), name, body)
	default:
		return h.info()
	}
}

// authorized compares the presented key with the configured one in
// constant time (hashes of equal length: neither the key's bytes nor its
// length leak through timing).
func (h *Handler) authorized(header string) bool {
	scheme, key, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "apikey") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(key)))
	return subtle.ConstantTimeCompare(got[:], h.keyHash[:]) == 1
}

// readBody reads the body into buf, at most the limit, and checks that it
// is one JSON object.
func (h *Handler) readBody(r *http.Request, buf *bytes.Buffer) ([]byte, *apiError) {
	if r.ContentLength > h.max {
		return nil, h.tooBig()
	}
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, h.max+1)); err != nil {
		return nil, fail(http.StatusBadRequest, protocol.CodeParseError, "reading the body: %v", err)
	}
	if int64(buf.Len()) > h.max {
		return nil, h.tooBig()
	}
	body := bytes.TrimSpace(buf.Bytes())
	if !json.Valid(body) {
		return nil, fail(http.StatusBadRequest, protocol.CodeParseError, "the body is not JSON")
	}
	if !utf8.Valid(body) {
		// encoding/json lets invalid UTF-8 through inside strings, and a
		// browser fails its whole connection on a frame that is not UTF-8.
		return nil, fail(http.StatusBadRequest, protocol.CodeParseError, "the body is not valid UTF-8")
	}
	if body[0] != '{' {
		return nil, fail(http.StatusBadRequest, protocol.CodeInvalidRequest, "the body must be a JSON object")
	}
	if jsonexact.DeeperThan(body, h.depth) {
		return nil, fail(http.StatusBadRequest, protocol.CodeInvalidRequest, "JSON nested deeper than %d levels (limits.maxJSONDepth)", h.depth)
	}
	return body, nil
}

// tooBig is the answer to a body over the limit, built only when one is:
// every call reads a body, and formatting it up front cost each of them
// two allocations.
func (h *Handler) tooBig() *apiError {
	return fail(http.StatusRequestEntityTooLarge, protocol.CodeLimitExceeded, "body over %d bytes (limits.maxMessageBytes)", h.max)
}

// members reads the named members of a body (a JSON object) by the
// client protocol's rule (package jsonexact): names exact, no
// case-folding, other members ignored, a repeated one refused (-32600).
// vals[i] is nil when names[i] is absent.
func members(body []byte, names ...string) ([][]byte, *apiError) {
	vals := make([][]byte, len(names))
	if dup, _, _ := jsonexact.Members(body, names, vals); dup != "" {
		return nil, fail(http.StatusBadRequest, protocol.CodeInvalidRequest, "duplicate member %q", dup)
	}
	return vals, nil
}

// stringParam decodes a string member ("" when absent).
func stringParam(name string, v []byte) (string, *apiError) {
	var s string
	if v == nil {
		return "", nil
	}
	if v[0] != '"' || json.Unmarshal(v, &s) != nil {
		return "", badParams("%s must be a JSON string", name)
	}
	return s, nil
}

func checkTopic(key, topic string) *apiError {
	if msg := protocol.CheckTopic(topic); msg != "" {
		return badParams("%s: %s", key, msg)
	}
	return nil
}

func checkUser(user string) *apiError {
	if user == "" || len(user) > MaxUserLen {
		return badParams("user must be 1 to %d bytes", MaxUserLen)
	}
	return nil
}

// unavailable answers a call the Backend could not carry out now: 503
// with Retry-After, -32001 when the cross-instance bus could not take the
// message (it was delivered nowhere: retrying cannot duplicate it).
//
// Every refusal for an unreachable Redis carries the reason a client's
// publish gets for it: BUS for the bus, HISTORY_UNAVAILABLE for the
// history store.
func (h *Handler) unavailable(err error) *apiError {
	code, reason := protocol.CodeInternal, ""
	var pe *protocol.Error
	switch {
	case errors.Is(err, bus.ErrQueueFull) || errors.Is(err, bus.ErrDegraded):
		code, reason = protocol.CodeOverloaded, message.ReasonBus
	case errors.As(err, &pe) && pe.Code == protocol.CodeOverloaded:
		code = pe.Code
		if d, ok := pe.Data.(protocol.OverloadedData); ok {
			reason = d.Reason
		}
	}
	e := fail(http.StatusServiceUnavailable, code, "%v", err)
	e.retryAfter, e.reason = true, reason
	return e
}

func (h *Handler) publish(ctx context.Context, body []byte) ([]byte, *apiError) {
	v, aerr := members(body, "topic", "data", "idempotencyKey")
	if aerr != nil {
		return nil, aerr
	}
	topic, aerr := stringParam("topic", v[0])
	if aerr != nil {
		return nil, aerr
	}
	if aerr := checkTopic("topic", topic); aerr != nil {
		return nil, aerr
	}
	data := v[1]
	if data == nil {
		return nil, badParams("missing data")
	}
	key, aerr := idempotencyKey(v[2])
	if aerr != nil {
		return nil, aerr
	}
	pos, err := h.publishAt(ctx, topic, data, key)
	if err != nil {
		return nil, h.unavailable(err)
	}
	if pos == nil {
		return okResult, nil
	}
	return asResult(protocol.AppendPosition(nil, pos.Epoch, pos.Offset)), nil
}

// asResult wraps an encoded result as every successful call answers it:
// {"result":...}.
func asResult(res []byte) []byte {
	return append(append([]byte(`{"result":`), res...), '}')
}

// publishAt publishes through the history backend when there is one.
func (h *Handler) publishAt(ctx context.Context, topic string, data json.RawMessage, key string) (*history.Position, error) {
	if hb, ok := h.b.(HistoryBackend); ok {
		return hb.PublishAt(ctx, topic, data, key)
	}
	return nil, h.b.Publish(topic, data)
}

// idempotencyKey decodes the idempotencyKey member ("" when absent).
func idempotencyKey(v []byte) (string, *apiError) {
	key, aerr := stringParam("idempotencyKey", v)
	if aerr != nil {
		return "", aerr
	}
	if v != nil && (key == "" || len(key) > protocol.MaxIdempotencyKey) {
		return "", badParams("idempotencyKey must be 1 to %d bytes", protocol.MaxIdempotencyKey)
	}
	return key, nil
}

// history answers the history method, with the client method's params.
func (h *Handler) history(ctx context.Context, body []byte) ([]byte, *apiError) {
	v, aerr := members(body, "topic")
	if aerr != nil {
		return nil, aerr
	}
	topic, aerr := stringParam("topic", v[0])
	if aerr != nil {
		return nil, aerr
	}
	if aerr := checkTopic("topic", topic); aerr != nil {
		return nil, aerr
	}
	hp, perr := protocol.DecodeHistoryParams(body)
	if perr != nil {
		return nil, badParams("%s", perr.Message)
	}
	hb, ok := h.b.(HistoryBackend)
	if !ok {
		return nil, badParams("%s", ErrNoHistory)
	}
	res, err := hb.History(ctx, topic, hp.Since, hp.Limit)
	switch {
	case errors.Is(err, ErrNoHistory):
		return nil, badParams("%s", err)
	case err != nil:
		return nil, h.unavailable(err)
	}
	return asResult(res), nil
}

func (h *Handler) broadcast(ctx context.Context, body []byte) ([]byte, *apiError) {
	v, aerr := members(body, "topics", "data", "idempotencyKey")
	if aerr != nil {
		return nil, aerr
	}
	var topics []string
	if v[0] != nil && (v[0][0] != '[' || json.Unmarshal(v[0], &topics) != nil) {
		return nil, badParams("topics must be a JSON array of strings")
	}
	if len(topics) == 0 || len(topics) > MaxBroadcastTopics {
		return nil, badParams("topics must list 1 to %d topics", MaxBroadcastTopics)
	}
	for i, t := range topics {
		if aerr := checkTopic("topics["+strconv.Itoa(i)+"]", t); aerr != nil {
			return nil, aerr
		}
	}
	data := v[1]
	if data == nil {
		return nil, badParams("missing data")
	}
	key, aerr := idempotencyKey(v[2])
	if aerr != nil {
		return nil, aerr
	}
	// The positions of the history topics among them, in order:
	// {"positions":[{"topic":T,"epoch":E,"offset":N}...]}.
	var out []byte
	for i, t := range topics {
		pos, err := h.publishAt(ctx, t, data, key)
		if err != nil {
			return nil, h.unavailable(fmt.Errorf("published to %d of %d topics, then: %w", i, len(topics), err))
		}
		if pos == nil {
			continue
		}
		if out == nil {
			out = append(out, `{"positions":[`...)
		} else {
			out = append(out, ',')
		}
		tb, _ := json.Marshal(t)
		out = append(append(append(out, `{"topic":`...), tb...), ',')
		out = append(out, protocol.AppendPosition(nil, pos.Epoch, pos.Offset)[1:]...)
	}
	if out == nil {
		return okResult, nil
	}
	return asResult(append(out, "]}"...)), nil
}

func (h *Handler) disconnect(body []byte) ([]byte, *apiError) {
	v, aerr := members(body, "user")
	if aerr != nil {
		return nil, aerr
	}
	user, aerr := stringParam("user", v[0])
	if aerr != nil {
		return nil, aerr
	}
	if aerr := checkUser(user); aerr != nil {
		return nil, aerr
	}
	if err := h.b.Disconnect(user); err != nil {
		return nil, h.unavailable(err)
	}
	return okResult, nil
}

func (h *Handler) unsubscribe(body []byte) ([]byte, *apiError) {
	v, aerr := members(body, "user", "topic")
	if aerr != nil {
		return nil, aerr
	}
	user, aerr := stringParam("user", v[0])
	if aerr != nil {
		return nil, aerr
	}
	topic, aerr := stringParam("topic", v[1])
	if aerr != nil {
		return nil, aerr
	}
	if aerr := checkUser(user); aerr != nil {
		return nil, aerr
	}
	if aerr := checkTopic("topic", topic); aerr != nil {
		return nil, aerr
	}
	if err := h.b.Unsubscribe(user, topic); err != nil {
		return nil, h.unavailable(err)
	}
	return okResult, nil
}

func (h *Handler) info() ([]byte, *apiError) {
	b, err := json.Marshal(struct {
		Result Info `json:"result"`
	}{h.b.Info()})
	if err != nil {
		return nil, fail(http.StatusInternalServerError, protocol.CodeInternal, "%v", err)
	}
	return b, nil
}

func (h *Handler) presence(ctx context.Context, name string, body []byte) ([]byte, *apiError) {
	m, aerr := members(body, "topic", "cursor")
	if aerr != nil {
		return nil, aerr
	}
	var p struct{ Topic, Cursor string }
	if p.Topic, aerr = stringParam("topic", m[0]); aerr != nil {
		return nil, aerr
	}
	if p.Cursor, aerr = stringParam("cursor", m[1]); aerr != nil {
		return nil, aerr
	}
	if aerr := checkTopic("topic", p.Topic); aerr != nil {
		return nil, aerr
	}
	var v any
	var err error
	if name == MethodPresence {
		v, err = h.b.Presence(ctx, p.Topic, p.Cursor)
	} else {
		v, err = h.b.PresenceStats(ctx, p.Topic)
	}
	if errors.Is(err, presence.ErrOff) {
		return nil, badParams("topic: %v", err)
	}
	if err != nil {
		return nil, h.unavailable(err)
	}
	b, err := json.Marshal(struct {
		Result any `json:"result"`
	}{v})
	if err != nil {
		return nil, fail(http.StatusInternalServerError, protocol.CodeInternal, "%v", err)
	}
	return b, nil
}
