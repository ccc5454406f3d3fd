package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"
)

// siblingsConfig drives the siblings mode: N simulated instances publish
// the cluster rate envelope of docs/cluster.md on Channel, each once per
// Interval (spread evenly over it), for Duration, to a real rtserver on
// the same Redis. Each envelope carries TopN topics, users and subscriber
// counts: a hot topic and a hot user whose rates are spread evenly over
// the siblings (HotRate/N each), and TopN-1 of the sibling's own, of which
// a Churn fraction are renamed every interval. With a Secret the envelopes
// are signed as docs/cluster.md says.
type siblingsConfig struct {
	RedisURL   string
	Channel    string
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
	// Fleet-wide Redis egress if every one of N+1 instances subscribed:
	// each envelope is delivered to N instances.
	FleetEgressMBps float64 `json:"fleetEgressMBps"`
	StaleSeconds    float64 `json:"staleSeconds,omitempty"`
}

// wireEnvelope is the envelope of docs/cluster.md, in its member order.
type wireEnvelope struct {
	V          int         `json:"v"`
	InstanceID string      `json:"instanceId"`
	TS         int64       `json:"ts"`
	Slice      []wireTopic `json:"slice"`
	Users      []wireUser  `json:"users"`
	Subs       []wireSub   `json:"subs"`
}

type wireTopic struct {
	Topic          string  `json:"topic"`
	MessagesPerSec float64 `json:"messagesPerSec"`
	BytesPerSec    float64 `json:"bytesPerSec"`
}

type wireUser struct {
	User           string  `json:"user"`
	MessagesPerSec float64 `json:"messagesPerSec"`
}

type wireSub struct {
	Topic string `json:"topic"`
	Count int    `json:"count"`
}

const (
	hotTopic = "rtbench:hot"
	hotUser  = "rtbench-hot-user"
)

// rateSliceLabel is what docs/cluster.md says a rate envelope's MAC
// covers in front of the envelope: the label, then one 0x00 byte.
const rateSliceLabel = "rtserver rate slice v1\x00"

// siblingEnvelope is sibling i's envelope in round k, signed with secret
// when it is set, from the bytes docs/cluster.md documents (not from the
// server's code, so the test against a real node checks the document): B
// is the envelope marshalled without sig, and the bytes sent are B with its
// final '}' replaced by ,"sig":"<hex HMAC-SHA256(secret, label + B)>"}.
func siblingEnvelope(i, k int, cfg siblingsConfig, now time.Time) ([]byte, error) {
	e := wireEnvelope{V: 1, InstanceID: fmt.Sprintf("rtbench-sibling-%05d", i), TS: now.UnixMilli()}
	share := cfg.HotRate / float64(cfg.N)
	e.Slice = append(e.Slice, wireTopic{hotTopic, share, 100 * share})
	e.Users = append(e.Users, wireUser{hotUser, share})
	churned := int(math.Round(cfg.Churn * float64(cfg.TopN-1)))
	for j := 1; j < cfg.TopN; j++ {
		topic := fmt.Sprintf("sibling-%05d/room-%02d", i, j)
		if j <= churned {
			topic = fmt.Sprintf("sibling-%05d/room-%02d-round-%d", i, j, k)
		}
		rate := float64(cfg.TopN-j) / 2
		e.Slice = append(e.Slice, wireTopic{topic, rate, 120 * rate})
		e.Users = append(e.Users, wireUser{fmt.Sprintf("sibling-%05d/user-%02d", i, j), rate})
	}
	for j := range cfg.TopN {
		e.Subs = append(e.Subs, wireSub{fmt.Sprintf("sibling-%05d/room-%02d", i, j), 10 + j})
	}
	b, err := json.Marshal(&e)
	if err != nil || cfg.Secret == "" {
		return b, err
	}
	mac := hmac.New(sha256.New, []byte(cfg.Secret))
	mac.Write([]byte(rateSliceLabel))
	mac.Write(b)
	out := append(b[:len(b)-1:len(b)-1], `,"sig":"`...)
	out = hex.AppendEncode(out, mac.Sum(nil))
	return append(out, '"', '}'), nil
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
	res := &siblingsResult{Siblings: cfg.N, Signed: cfg.Secret != "", Churn: cfg.Churn, WantHotRate: cfg.HotRate}

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

	// One publisher paces N envelopes per interval; the first interval
	// fills the view and is not measured.
	step := cfg.Interval / time.Duration(cfg.N)
	tick := time.NewTicker(max(step, time.Microsecond))
	defer tick.Stop()
	start := time.Now()
	end := start.Add(cfg.Duration)
	var bytes int64
	var recv0 float64
	// lastSent is taken before each publish, so the server's arrival stamp
	// of that envelope is not earlier.
	var measureStart, lastSent time.Time
	for k := 0; ; k++ {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		if measureStart.IsZero() && now.Sub(start) >= cfg.Interval {
			measureStart = now
			if recv0, err = scrapeMetric(ctx, cfg.MetricsURL, "cluster_publish_rate_received_total"); err != nil {
				return nil, err
			}
			if cpu, err = startCPU(cfg.ServerPID); err != nil {
				return nil, err
			}
		}
		b, err := siblingEnvelope(k%cfg.N, k/cfg.N, cfg, now)
		if err != nil {
			return nil, err
		}
		lastSent = time.Now()
		if err := rdb.Publish(ctx, cfg.Channel, b).Err(); err != nil {
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
	res.FleetEgressMBps = float64(cfg.N) * float64(cfg.N) * res.EnvelopeBytes / cfg.Interval.Seconds() / 1e6
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
