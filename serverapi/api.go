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

	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/bufpool"
	"github.com/rtserver/rtserver/metrics"
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
var ErrNoHistory = errors.New("topic keeps no history")

// Info is the result of the info method.
type Info struct {
	InstanceID  string `json:"instanceId"`
	Connections int64  `json:"connections"` // open WebSocket connections on this instance
	Topics      int    `json:"topics"`      // topics with a subscriber on this instance
	Instances   int    `json:"instances"`   // this one plus every sibling with a fresh rate envelope
}

// Options configures the API handler.
type Options struct {
	// Key is the API key callers present as "Authorization: apikey KEY".
	// Required.
	Key string
	// MaxBodyBytes caps a request body; a larger one answers 413.
	// 0: 65536 (rtserver passes limits.maxMessageBytes).
	MaxBodyBytes int64
	// Backend carries out the calls. Required.
	Backend Backend
	// Metrics receives api_requests_total. nil: metrics.NewDiscard().
	Metrics *metrics.Metrics
	// Logger logs calls that fail on the backend's side. nil: discard.
	Logger *slog.Logger
}

// API methods, the last element of the path /api/<method>.
const (
	MethodPublish     = "publish"
	MethodBroadcast   = "broadcast"
	MethodDisconnect  = "disconnect"
	MethodUnsubscribe = "unsubscribe"
	MethodInfo        = "info"
	MethodHistory     = "history"
	// unknownMethod is the method label of paths that name no method.
	unknownMethod = "unknown"
)

// Limits on params.
const (
	MaxUserLen         = 1024 // bytes of a user id
	MaxBroadcastTopics = 1000 // topics of one broadcast
)

// Prefix is the path under which the handler serves: mount it at Prefix.
const Prefix = "/api/"

// Handler serves the API. Create it with New.
type Handler struct {
	keyHash [sha256.Size]byte
	max     int64
	b       Backend
	m       *metrics.Metrics
	log     *slog.Logger
}

// New returns the API handler.
func New(o Options) (*Handler, error) {
	if o.Key == "" {
		return nil, errors.New("serverapi: empty key")
	}
	if o.Backend == nil {
		return nil, errors.New("serverapi: no backend")
	}
	h := &Handler{keyHash: sha256.Sum256([]byte(o.Key)), max: o.MaxBodyBytes, b: o.Backend, m: o.Metrics, log: o.Logger}
	if h.max <= 0 {
		h.max = 65536
	}
	if h.m == nil {
		h.m = metrics.NewDiscard()
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	return h, nil
}

// apiError is an error answer: the HTTP status and the JSON-RPC error.
type apiError struct {
	status  int
	code    int
	message string
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
		var b []byte
		b = append(b, `{"error":{"code":`...)
		b = strconv.AppendInt(b, int64(aerr.code), 10)
		b = append(b, `,"message":`...)
		msg, _ := json.Marshal(aerr.message)
		b = append(b, msg...)
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
	case MethodPublish, MethodBroadcast, MethodDisconnect, MethodUnsubscribe, MethodInfo, MethodHistory:
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
		return nil, fail(http.StatusNotFound, protocol.CodeMethodNotFound, "unknown method %q (want publish, broadcast, history, disconnect, unsubscribe or info)", name)
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
	return body, nil
}

// tooBig is the answer to a body over the limit, built only when one is:
// every call reads a body, and formatting it up front cost each of them
// two allocations.
func (h *Handler) tooBig() *apiError {
	return fail(http.StatusRequestEntityTooLarge, protocol.CodeLimitExceeded, "body over %d bytes (limits.maxMessageBytes)", h.max)
}

// decode unmarshals a valid JSON object body into p.
func decode(body []byte, p any) *apiError {
	if err := json.Unmarshal(body, p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return badParams("%s must be a JSON %s", te.Field, jsonType(te.Type.String()))
		}
		return badParams("%v", err)
	}
	return nil
}

func jsonType(goType string) string {
	switch {
	case goType == "string":
		return "string"
	case strings.HasPrefix(goType, "[]"):
		return "array"
	}
	return "value of another type"
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

func (h *Handler) unavailable(err error) *apiError {
	return fail(http.StatusServiceUnavailable, protocol.CodeInternal, "%v", err)
}

func (h *Handler) publish(ctx context.Context, body []byte) ([]byte, *apiError) {
	var p struct {
		Topic          string          `json:"topic"`
		Data           json.RawMessage `json:"data"`
		IdempotencyKey string          `json:"idempotencyKey"`
	}
	if aerr := decode(body, &p); aerr != nil {
		return nil, aerr
	}
	if aerr := checkTopic("topic", p.Topic); aerr != nil {
		return nil, aerr
	}
	if p.Data == nil {
		return nil, badParams("missing data")
	}
	if aerr := checkKey(p.IdempotencyKey); aerr != nil {
		return nil, aerr
	}
	pos, err := h.publishAt(ctx, p.Topic, p.Data, p.IdempotencyKey)
	if err != nil {
		return nil, h.unavailable(err)
	}
	if pos == nil {
		return okResult, nil
	}
	return protocol.AppendPosition(nil, pos.Epoch, pos.Offset), nil
}

// publishAt publishes through the history backend when there is one.
func (h *Handler) publishAt(ctx context.Context, topic string, data json.RawMessage, key string) (*history.Position, error) {
	if hb, ok := h.b.(HistoryBackend); ok {
		return hb.PublishAt(ctx, topic, data, key)
	}
	return nil, h.b.Publish(topic, data)
}

func checkKey(key string) *apiError {
	if len(key) > protocol.MaxIdempotencyKey {
		return badParams("idempotencyKey must be 1 to %d bytes", protocol.MaxIdempotencyKey)
	}
	return nil
}

// history answers the history method, with the client method's params.
func (h *Handler) history(ctx context.Context, body []byte) ([]byte, *apiError) {
	var p struct {
		Topic string `json:"topic"`
	}
	if aerr := decode(body, &p); aerr != nil {
		return nil, aerr
	}
	if aerr := checkTopic("topic", p.Topic); aerr != nil {
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
	res, err := hb.History(ctx, p.Topic, hp.Since, hp.Limit)
	switch {
	case errors.Is(err, ErrNoHistory):
		return nil, badParams("%s", err)
	case err != nil:
		return nil, h.unavailable(err)
	}
	return res, nil
}

func (h *Handler) broadcast(ctx context.Context, body []byte) ([]byte, *apiError) {
	var p struct {
		Topics         []string        `json:"topics"`
		Data           json.RawMessage `json:"data"`
		IdempotencyKey string          `json:"idempotencyKey"`
	}
	if aerr := decode(body, &p); aerr != nil {
		return nil, aerr
	}
	if len(p.Topics) == 0 || len(p.Topics) > MaxBroadcastTopics {
		return nil, badParams("topics must list 1 to %d topics", MaxBroadcastTopics)
	}
	for i, t := range p.Topics {
		if aerr := checkTopic("topics["+strconv.Itoa(i)+"]", t); aerr != nil {
			return nil, aerr
		}
	}
	if p.Data == nil {
		return nil, badParams("missing data")
	}
	if aerr := checkKey(p.IdempotencyKey); aerr != nil {
		return nil, aerr
	}
	// The positions of the history topics among them, in order:
	// {"positions":[{"topic":T,"epoch":E,"offset":N}...]}.
	var out []byte
	for i, t := range p.Topics {
		pos, err := h.publishAt(ctx, t, p.Data, p.IdempotencyKey)
		if err != nil {
			return nil, h.unavailable(fmt.Errorf("published to %d of %d topics, then: %w", i, len(p.Topics), err))
		}
		if pos == nil {
			continue
		}
		if out == nil {
			out = append(out, `{"positions":[`...)
		} else {
			out = append(out, ',')
		}
		pb := protocol.AppendPosition(nil, pos.Epoch, pos.Offset)
		tb, _ := json.Marshal(t)
		out = append(append(append(out, `{"topic":`...), tb...), ',')
		out = append(out, pb[1:]...)
	}
	if out == nil {
		return okResult, nil
	}
	return append(out, "]}"...), nil
}

func (h *Handler) disconnect(body []byte) ([]byte, *apiError) {
	var p struct {
		User string `json:"user"`
	}
	if aerr := decode(body, &p); aerr != nil {
		return nil, aerr
	}
	if aerr := checkUser(p.User); aerr != nil {
		return nil, aerr
	}
	if err := h.b.Disconnect(p.User); err != nil {
		return nil, h.unavailable(err)
	}
	return okResult, nil
}

func (h *Handler) unsubscribe(body []byte) ([]byte, *apiError) {
	var p struct {
		User  string `json:"user"`
		Topic string `json:"topic"`
	}
	if aerr := decode(body, &p); aerr != nil {
		return nil, aerr
	}
	if aerr := checkUser(p.User); aerr != nil {
		return nil, aerr
	}
	if aerr := checkTopic("topic", p.Topic); aerr != nil {
		return nil, aerr
	}
	if err := h.b.Unsubscribe(p.User, p.Topic); err != nil {
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
