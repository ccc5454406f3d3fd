package access

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/rtserver/rtserver/metrics"
)

// maxProxyAnswer bounds the body read from the backend: {"allow":true} is
// 14 bytes.
const maxProxyAnswer = 4 << 10

type proxy struct {
	cfg    Proxy
	client *http.Client
	now    func() time.Time
	group  singleflight.Group
	cache  *answerCache // nil without CacheTTL
	errs   map[string]prometheus.Counter
	log    *slog.Logger
	// waiting, when set (tests), is called once a caller waits for the
	// answer to its question, shared or not.
	waiting func()
}

func newProxy(cfg Proxy, deps Deps, m *metrics.Metrics, log *slog.Logger) *proxy {
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	client, now := deps.ProxyClient, deps.now
	if client == nil {
		// Every question goes to one host: keep enough idle connections
		// for a burst of them (the default keeps 2, and the rest would be
		// opened and closed each time).
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		client = &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if now == nil {
		now = time.Now
	}
	p := &proxy{cfg: cfg, client: client, now: now, errs: map[string]prometheus.Counter{}, log: log}
	for _, r := range metrics.ProxyErrorReasons {
		p.errs[r] = m.TopicProxyErrors.WithLabelValues(r)
	}
	if cfg.CacheTTL > 0 {
		p.cache = newAnswerCache(proxyCacheSize)
	}
	return p
}

// question is the JSON body of a proxy request.
type question struct {
	Action   string `json:"action"`
	Topic    string `json:"topic"`
	User     string `json:"user"`
	ConnID   uint64 `json:"connId"`
	ClientIP string `json:"clientIp"`
}

// ask answers q through the cache, else the backend.
func (p *proxy) ask(ctx context.Context, q Question) Decision {
	cacheable := p.cache != nil && q.Action == Publish && q.User != ""
	if cacheable {
		if allow, ok := p.cache.get(q.User, q.Topic, p.now()); ok {
			return decisionOf(allow)
		}
	}
	body := question{Action: q.Action.String(), Topic: q.Topic, User: q.User, ConnID: q.ConnID}
	if q.IP.IsValid() {
		body.ClientIP = q.IP.String()
	}
	key := body.Action + "\x00" + body.Topic + "\x00" + body.User + "\x00" + strconv.FormatUint(body.ConnID, 10) + "\x00" + body.ClientIP
	ch := p.group.DoChan(key, func() (any, error) {
		allow, err := p.post(body)
		if err == nil && cacheable {
			p.cache.put(q.User, q.Topic, allow, p.now().Add(p.cfg.CacheTTL))
		}
		return allow, err
	})
	if p.waiting != nil {
		p.waiting()
	}
	select {
	case res := <-ch:
		if res.Err != nil {
			if p.cfg.Fail == FailOpen {
				return Allow
			}
			return Unavailable
		}
		return decisionOf(res.Val.(bool))
	case <-ctx.Done():
		return Unavailable // the connection is gone; nobody reads the answer
	}
}

func decisionOf(allow bool) Decision {
	if allow {
		return Allow
	}
	return Deny
}

// post asks the backend once. A failure is counted and logged here, once
// for every caller that shared the question.
func (p *proxy) post(q question) (bool, error) {
	allow, reason, err := p.do(q)
	if err != nil {
		p.errs[reason].Inc()
		p.log.Warn("topic grant proxy failed", "reason", reason, "action", q.Action, "topic", q.Topic, "failOpen", p.cfg.Fail == FailOpen, "err", err)
	}
	return allow, err
}

func (p *proxy) do(q question) (allow bool, reason string, err error) {
	// Not the asking connection's context: the request is shared with
	// every caller of the same question, and one of them leaving must not
	// fail the others.
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Timeout)
	defer cancel()
	b, _ := json.Marshal(q)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.URL, bytes.NewReader(b))
	if err != nil {
		return false, metrics.ProxyErrorTransport, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return false, transportReason(err), err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProxyAnswer+1))
	if err != nil {
		return false, transportReason(err), err
	}
	if resp.StatusCode != http.StatusOK {
		return false, metrics.ProxyErrorStatus, fmt.Errorf("status %d", resp.StatusCode)
	}
	if len(body) > maxProxyAnswer {
		return false, metrics.ProxyErrorBadResponse, fmt.Errorf("answer over %d bytes", maxProxyAnswer)
	}
	var a struct {
		Allow *bool `json:"allow"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return false, metrics.ProxyErrorBadResponse, fmt.Errorf(`want {"allow": true|false}: %w`, err)
	}
	if a.Allow == nil {
		return false, metrics.ProxyErrorBadResponse, errors.New(`want {"allow": true|false}: no allow field`)
	}
	return *a.Allow, "", nil
}

// transportReason is the error reason of a request that failed before an
// answer was read: the timeout, or the transport.
func transportReason(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return metrics.ProxyErrorTimeout
	}
	return metrics.ProxyErrorTransport
}

// answerCache holds proxy answers until they expire, at most size of them.
// Two generations: writes go to cur; when cur holds size/2, it becomes old
// and a new cur starts. Lookups try cur, then old. Memory stays bounded,
// nothing scans, and an entry in use within a generation's lifetime
// survives at least one turnover (it is copied forward when read from old).
type answerCache struct {
	mu       sync.Mutex
	cur, old map[answerKey]answer
	half     int
}

type answerKey struct{ user, topic string }

type answer struct {
	allow   bool
	expires time.Time
}

func newAnswerCache(size int) *answerCache {
	half := max(size/2, 1)
	return &answerCache{cur: make(map[answerKey]answer), half: half}
}

func (c *answerCache) get(user, topic string, now time.Time) (allow, ok bool) {
	k := answerKey{user, topic}
	c.mu.Lock()
	a, found := c.cur[k]
	if !found {
		if a, found = c.old[k]; found && now.Before(a.expires) {
			c.addLocked(k, a)
		}
	}
	c.mu.Unlock()
	if !found || !now.Before(a.expires) {
		return false, false
	}
	return a.allow, true
}

func (c *answerCache) put(user, topic string, allow bool, expires time.Time) {
	c.mu.Lock()
	c.addLocked(answerKey{user, topic}, answer{allow: allow, expires: expires})
	c.mu.Unlock()
}

func (c *answerCache) addLocked(k answerKey, a answer) {
	if _, ok := c.cur[k]; !ok && len(c.cur) >= c.half {
		c.old, c.cur = c.cur, make(map[answerKey]answer, c.half)
	}
	c.cur[k] = a
}

func (c *answerCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.old)
}
