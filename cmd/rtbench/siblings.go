package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/publishrate"
)

// siblingsConfig drives the siblings mode: N simulated instances publish
// the cluster rate envelope of docs/cluster.md on Channel, each once per
// Interval (spread evenly over it), for Duration, to a real rtserver on
// the same Redis. Each envelope carries TopN topics, users and subscriber
// counts: from the second interval on, a hot topic and a hot user whose
// rates are spread evenly over the siblings (HotRate/N each), and TopN-1
// of the sibling's own, of which a Churn fraction are renamed every
// interval. With a Secret the envelopes are signed as docs/cluster.md
// says.
//
// Mode "merged" (publishRate.mode merged on the server) publishes the
// slices on Channel+":in" instead, where the server, the fleet's only
// real instance and so its merging instance, merges them; the simulator
// subscribes to the merged views on Channel+":view" to measure their size
// and when they carry the hot user.
type siblingsConfig struct {
	RedisURL   string
	Channel    string
	Mode       string
	N          int
	Interval   time.Duration
	Duration   time.Duration
	TopN       int
	Secret     string
	Churn      float64
	HotRate    float64
	MetricsURL string
	ServerPID  int
	// Stale waits, after the last envelope, until the server's view is
	// empty, and reports how long that took.
	Stale bool
}

type siblingsResult struct {
	Siblings      int     `json:"siblings"`
	Envelopes     int64   `json:"envelopesSent"`
	EnvelopeBytes float64 `json:"envelopeBytesMean"`
	Seconds       float64 `json:"seconds"`
	Signed        bool    `json:"signed"`
	Churn         float64 `json:"churn"`
	// Server side, over the measured window (after one interval of warm-up).
	Received     float64 `json:"serverEnvelopesReceived"`
	ServerCPU    float64 `json:"serverCpuSeconds,omitempty"`
	CPUPercent   float64 `json:"serverCpuPercentOfCore,omitempty"`
	IdlePercent  float64 `json:"serverIdleCpuPercentOfCore,omitempty"`
	PerEnvelope  float64 `json:"serverCpuPerEnvelopeUs,omitempty"`
	RSSBytes     int64   `json:"serverRssBytes,omitempty"`
	ViewSiblings float64 `json:"viewSiblings"`
	ViewHotRate  float64 `json:"viewHotTopicRate"`
	WantHotRate  float64 `json:"wantHotTopicRate"`
	ViewCorrect  bool    `json:"viewCorrect"`
	// Fleet-wide Redis egress if N+1 such instances ran. Broadcast: each
	// envelope is delivered to N instances. Merged: each slice to the
	// merging instance, each merged view (measured) to all N+1.
	FleetEgressMBps float64 `json:"fleetEgressMBps"`
	StaleSeconds    float64 `json:"staleSeconds,omitempty"`
	Mode            string  `json:"mode"`
	// CatchSeconds: from the first envelope carrying the hot topic and
	// user until the server's view has the hot topic's whole rate (its
	// cluster_topic_publish_rate gauge); 0 when it never did within three
	// intervals (then Caught is false).
	CatchSeconds float64 `json:"catchSeconds"`
	Caught       bool    `json:"caught"`
	// Merged mode: views received, their mean size, and from the first
	// envelope carrying the hot user until a view carried its whole rate.
	Views         int64   `json:"views,omitempty"`
	ViewBytes     float64 `json:"viewBytesMean,omitempty"`
	UserCatchSecs float64 `json:"userCatchSeconds,omitempty"`
}

// receivedUsers is what the view counter reads of a merged view: its
// users.
type receivedUsers struct {
	Users []receivedUser `json:"users"`
}

type receivedUser struct {
	User           string  `json:"user"`
	MessagesPerSec float64 `json:"messagesPerSec"`
}

const (
	hotTopic = "rtbench:hot"
	hotUser  = "rtbench-hot-user"
)

// siblingEnvelope is sibling i's envelope in round k, encoded (and signed
// with cfg.Secret when it is set) by the library, as an instance would.
func siblingEnvelope(i, k int, cfg siblingsConfig, now time.Time) ([]byte, error) {
	s := publishrate.Slice{InstanceID: fmt.Sprintf("rtbench-sibling-%05d", i), TS: now}
	if k > 0 { // the hot publisher starts after the warm-up interval
		share := cfg.HotRate / float64(cfg.N)
		s.Topics = append(s.Topics, pressure.TopicRate{Topic: hotTopic, MessagesPerSec: share, BytesPerSec: 100 * share})
		s.Users = append(s.Users, pressure.UserRate{User: hotUser, MessagesPerSec: share})
	}
	churned := int(math.Round(cfg.Churn * float64(cfg.TopN-1)))
	for j := 1; j < cfg.TopN; j++ {
		topic := fmt.Sprintf("sibling-%05d/room-%02d", i, j)
		if j <= churned {
			topic = fmt.Sprintf("sibling-%05d/room-%02d-round-%d", i, j, k)
		}
		rate := float64(cfg.TopN-j) / 2
		s.Topics = append(s.Topics, pressure.TopicRate{Topic: topic, MessagesPerSec: rate, BytesPerSec: 120 * rate})
		s.Users = append(s.Users, pressure.UserRate{User: fmt.Sprintf("sibling-%05d/user-%02d", i, j), MessagesPerSec: rate})
	}
	for j := range cfg.TopN {
		s.Subjects = append(s.Subjects, publishrate.SubjectCount{Topic: fmt.Sprintf("sibling-%05d/room-%02d", i, j), Count: 10 + j})
	}
	var secret []byte
	if cfg.Secret != "" {
		secret = []byte(cfg.Secret)
	}
	return publishrate.EncodeSlice(s, secret)
}

func checkRedisURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("redis url %q: %w", raw, err)
	}
	if u.Scheme != "redis" || !loopbackHost(u.Hostname()) {
		return fmt.Errorf("redis url %q: must be redis:// on a loopback host", raw)
	}
	return nil
}

func runSiblings(ctx context.Context, cfg siblingsConfig) (*siblingsResult, error) {
	if cfg.N <= 0 || cfg.Interval <= 0 || cfg.Duration < 2*cfg.Interval || cfg.TopN < 1 {
		return nil, errors.New("siblings: -n, --interval and --topn must be positive, --duration at least two intervals")
	}
	sliceChannel, merged := cfg.Channel, false
	switch cfg.Mode {
	case "", "broadcast":
		cfg.Mode = "broadcast"
	case "merged":
		sliceChannel, merged = cfg.Channel+":in", true
	default:
		return nil, fmt.Errorf("siblings: --mode %q: broadcast or merged", cfg.Mode)
	}
	if err := checkRedisURL(cfg.RedisURL); err != nil {
		return nil, err
	}
	if _, err := checkURL(cfg.MetricsURL); err != nil {
		return nil, err
	}
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	res := &siblingsResult{Siblings: cfg.N, Signed: cfg.Secret != "", Churn: cfg.Churn, WantHotRate: cfg.HotRate, Mode: cfg.Mode}
	var views *viewCounter
	if merged {
		if views, err = watchViews(ctx, rdb, cfg.Channel+":view", cfg.HotRate); err != nil {
			return nil, err
		}
		defer views.close()
	}

	// The server alone first: its own idle CPU, to tell the aggregator's
	// share from the rest.
	idle := min(cfg.Interval, 5*time.Second)
	cpu, err := startCPU(cfg.ServerPID)
	if err != nil {
		return nil, fmt.Errorf("server cpu: %w", err)
	}
	if !sleepCtx(ctx, idle) {
		return nil, ctx.Err()
	}
	if c, ok, err := cpu.stop(); err != nil {
		return nil, err
	} else if ok {
		res.IdlePercent = 100 * c.Total().Seconds() / idle.Seconds()
	}

	// One publisher paces N envelopes per interval. The hot publisher
	// starts with the second interval (hotFrom); the measured window
	// starts once the view has caught it (or given up on it three
	// intervals later), so the polling that times the catch is not
	// measured.
	step := cfg.Interval / time.Duration(cfg.N)
	tick := time.NewTicker(max(step, time.Microsecond))
	defer tick.Stop()
	start := time.Now()
	end := start.Add(cfg.Duration)
	var bytes int64
	var recv0 float64
	var hotFrom time.Time
	catch := make(chan time.Time, 1) // when the view had the whole hot rate; zero: never
	// lastSent is taken before each publish, so the server's arrival stamp
	// of that envelope is not earlier.
	var measureStart, lastSent time.Time
	for k := 0; ; k++ {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		if k == cfg.N {
			hotFrom = now
			go awaitCatch(ctx, cfg, hotFrom, catch)
		}
		if measureStart.IsZero() && !hotFrom.IsZero() {
			select {
			case at := <-catch:
				if !at.IsZero() {
					res.Caught, res.CatchSeconds = true, at.Sub(hotFrom).Seconds()
				}
				measureStart = now
				if recv0, err = scrapeMetric(ctx, cfg.MetricsURL, "cluster_publish_rate_received_total"); err != nil {
					return nil, err
				}
				if cpu, err = startCPU(cfg.ServerPID); err != nil {
					return nil, err
				}
				if views != nil {
					views.reset()
				}
			default:
			}
		}
		b, err := siblingEnvelope(k%cfg.N, k/cfg.N, cfg, now)
		if err != nil {
			return nil, err
		}
		lastSent = time.Now()
		if err := rdb.Publish(ctx, sliceChannel, b).Err(); err != nil {
			return nil, fmt.Errorf("publish: %w", err)
		}
		res.Envelopes++
		bytes += int64(len(b))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	if measureStart.IsZero() {
		return nil, errors.New("siblings: --duration too short to time the catch and measure after it (give it five intervals or more)")
	}
	measured := time.Since(measureStart)
	res.Seconds = measured.Seconds()
	if c, ok, err := cpu.stop(); err != nil {
		return nil, err
	} else if ok {
		res.ServerCPU = c.Total().Seconds()
		res.CPUPercent = 100 * res.ServerCPU / measured.Seconds()
		if rss, err := procRSS(cfg.ServerPID); err == nil {
			res.RSSBytes = rss
		}
	}
	recv1, err := scrapeMetric(ctx, cfg.MetricsURL, "cluster_publish_rate_received_total")
	if err != nil {
		return nil, err
	}
	res.Received = recv1 - recv0
	if res.Received > 0 && res.ServerCPU > 0 {
		res.PerEnvelope = 1e6 * (res.ServerCPU - res.IdlePercent/100*measured.Seconds()) / res.Received
	}
	res.EnvelopeBytes = float64(bytes) / float64(res.Envelopes)
	fleet := float64(cfg.N + 1)
	res.FleetEgressMBps = float64(cfg.N) * float64(cfg.N) * res.EnvelopeBytes / cfg.Interval.Seconds() / 1e6
	if views != nil {
		n, b, userAt := views.result()
		res.Views = n
		if n > 0 {
			res.ViewBytes = float64(b) / float64(n)
		}
		if !userAt.IsZero() {
			res.UserCatchSecs = userAt.Sub(hotFrom).Seconds()
		}
		// Every instance's slice reaches the merging instance alone;
		// every view reaches every instance.
		res.FleetEgressMBps = (fleet*res.EnvelopeBytes/cfg.Interval.Seconds() + fleet*float64(b)/measured.Seconds()) / 1e6
	}
	// The topic gauges follow the merged sums at each pressure sample, so
	// the view is read until it is right or a sample interval has surely
	// passed (viewWait), not once right after the last envelope.
	for viewDeadline := time.Now().Add(viewWait); ; {
		if res.ViewSiblings, err = scrapeMetric(ctx, cfg.MetricsURL, "cluster_publish_rate_instances"); err != nil {
			return nil, err
		}
		// The hot topic is the fleet's hottest, so it is in the merged top-N.
		res.ViewHotRate, _ = scrapeMetric(ctx, cfg.MetricsURL, `cluster_topic_publish_rate{topic="`+hotTopic+`"}`)
		res.ViewCorrect = res.ViewSiblings == float64(cfg.N) && math.Abs(res.ViewHotRate-cfg.HotRate) <= 1e-6*cfg.HotRate
		if res.ViewCorrect || time.Now().After(viewDeadline) {
			break
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return nil, ctx.Err()
		}
	}

	if cfg.Stale {
		for {
			n, err := scrapeMetric(ctx, cfg.MetricsURL, "cluster_publish_rate_instances")
			if err != nil {
				return nil, err
			}
			if n == 0 {
				res.StaleSeconds = time.Since(lastSent).Seconds()
				break
			}
			if !sleepCtx(ctx, 50*time.Millisecond) {
				return nil, ctx.Err()
			}
		}
	}
	return res, nil
}

// awaitCatch polls the server's view of the hot topic from hotFrom until
// it has the whole hot rate, and sends when that was; the zero time when
// three intervals passed without it.
func awaitCatch(ctx context.Context, cfg siblingsConfig, hotFrom time.Time, out chan<- time.Time) {
	deadline := hotFrom.Add(3 * cfg.Interval)
	for time.Now().Before(deadline) {
		v, _ := scrapeMetric(ctx, cfg.MetricsURL, `cluster_topic_publish_rate{topic="`+hotTopic+`"}`)
		if math.Abs(v-cfg.HotRate) <= 1e-6*cfg.HotRate {
			out <- time.Now()
			return
		}
		if !sleepCtx(ctx, min(cfg.Interval/50, 100*time.Millisecond)) {
			break
		}
	}
	out <- time.Time{}
}

// viewCounter counts the merged views Redis delivers (merged mode): how
// many and how many bytes since reset, and when one first carried the
// hot user's whole rate.
type viewCounter struct {
	ps   *redis.PubSub
	done chan struct{}

	mu     sync.Mutex
	n, b   int64
	userAt time.Time
}

func watchViews(ctx context.Context, rdb *redis.Client, channel string, hotRate float64) (*viewCounter, error) {
	ps := rdb.Subscribe(ctx, channel)
	if _, err := ps.Receive(ctx); err != nil { // the confirmation
		ps.Close()
		return nil, fmt.Errorf("subscribe %s: %w", channel, err)
	}
	v := &viewCounter{ps: ps, done: make(chan struct{})}
	go func() {
		defer close(v.done)
		for m := range ps.Channel() {
			var e receivedUsers
			caught := json.Unmarshal([]byte(m.Payload), &e) == nil && slices.ContainsFunc(e.Users, func(u receivedUser) bool {
				return u.User == hotUser && math.Abs(u.MessagesPerSec-hotRate) <= 1e-6*hotRate
			})
			v.mu.Lock()
			v.n++
			v.b += int64(len(m.Payload))
			if caught && v.userAt.IsZero() {
				v.userAt = time.Now()
			}
			v.mu.Unlock()
		}
	}()
	return v, nil
}

func (v *viewCounter) reset() {
	v.mu.Lock()
	v.n, v.b = 0, 0
	v.mu.Unlock()
}

func (v *viewCounter) result() (n, b int64, userAt time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.n, v.b, v.userAt
}

func (v *viewCounter) close() {
	v.ps.Close()
	<-v.done
}

// viewWait bounds how long the view may trail the last envelope: the
// pressure sample interval (1s by default) plus scheduling slack.
const viewWait = 1500 * time.Millisecond

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
