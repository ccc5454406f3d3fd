package publishrate

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/internal/conf"
	"github.com/rtserver/rtserver/internal/instance"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
)

// Defaults of Options (the publishRate.* keys of docs/configuration.md).
const (
	DefaultChannel          = "rt:pressure:rates"
	DefaultPublishInterval  = 250 * time.Millisecond
	DefaultStaleAfter       = 12 * time.Second
	DefaultTopN             = 20
	DefaultMaxInstances     = 1024
	DefaultMaxEnvelopeBytes = 64 << 10
	DefaultMaxClockSkew     = 5 * time.Second

	// The values of Options.Mode.
	ModeBroadcast = "broadcast"
	ModeMerged    = "merged"

	// MaxInstanceIDLen bounds instance ids, ours and those read off the wire.
	MaxInstanceIDLen = 128
	// MaxUserLen bounds user ids read off the wire: the longest user a
	// token may name (handshake.MaxUserLen), so that every user can be a
	// top publisher in the cluster view.
	MaxUserLen = 1024
)

// Local is this instance's own source of publish rates. *pressure.Monitor
// satisfies it, and LiveLocal too.
type Local interface {
	// Snapshot returns the latest sample; never nil.
	Snapshot() *pressure.Snapshot
	// OnSample registers a listener called with every new sample.
	OnSample(func(*pressure.Snapshot))
}

// LiveLocal is a Local whose rates are current at every call (the
// pressure monitor's rates over the last second). When the Local given
// to New is one, RateOf and RateOfUser count this instance's share live
// rather than as of its last sample, and the envelope carries the live
// rates at sending rather than averages over the interval: the cluster
// view then lags the fleet by the trip through Redis alone.
type LiveLocal interface {
	Local
	RateOf(topic string) float64
	RateOfUser(user string) float64
	// LiveTop returns the n topics and n users with the highest rates,
	// descending.
	LiveTop(n int) ([]pressure.TopicRate, []pressure.UserRate)
}

// SubjectCount is this instance's live subscriber count for one topic.
type SubjectCount = bus.TopicCount

// Entry is one topic of the merged cluster-wide view.
type Entry struct {
	Topic                 string
	MessagesPerSec        float64
	BytesPerSec           float64
	ContributingInstances int // instances (self included) whose slice carries the topic
}

// Subscribers are this instance's subscriber counts per topic
// (*server.Subscribers, which the server keeps as clients subscribe and
// leave). Built before the server, they are handed to New in Deps.
type Subscribers interface {
	// Subjects lists this instance's topics with their subscriber counts.
	// It is called once per broadcast tick (and at Start); its top-N by
	// count is broadcast as "subs", and the whole list is the local part
	// of SubscribersOf unless the Subscribers are LiveSubscribers.
	Subjects() []SubjectCount
}

// LiveSubscribers are Subscribers that answer one topic's count at the
// moment of the call: SubscribersOf uses Count for the local part instead
// of the list Subjects returned on the last tick. Count runs on the
// caller's goroutine, so it must be cheap and must not call back into the
// Aggregator.
type LiveSubscribers interface {
	Subscribers
	Count(topic string) int
}

// Breaker guards the publish call: while Allow is false the broadcast is
// skipped (and counted in Stats.BreakerSkips). NewBreaker is the default.
type Breaker interface {
	Allow() bool
	Success()
	Failure()
}

// Options configure an Aggregator. The zero value of every field is the
// documented default.
type Options struct {
	// Channel is the Redis pub/sub channel. Default "rt:pressure:rates".
	Channel string `yaml:"channel" help:"Redis channel of the rate envelopes; empty: rt:pressure:rates"`
	// PublishInterval is how often this instance broadcasts its slice, and
	// how often stale sibling slices are expired. Default 250ms.
	PublishInterval time.Duration `yaml:"publishInterval" help:"period of this instance's envelope; 0 = 250ms"`
	// StaleAfter drops a sibling whose last envelope arrived longer ago
	// than this, by this instance's clock. Must be >= PublishInterval
	// (2x or more is advisable). Default 12s.
	StaleAfter time.Duration `yaml:"staleAfter" help:"a sibling's slice is dropped when nothing newer arrived within this; at least publishInterval; 0 = 12s"`
	// TopN caps each list in the envelope and the merged TopPublishers.
	// Default 20.
	TopN int `yaml:"topN" help:"topics and users carried per envelope; 0 = 20"`
	// MaxClockSkew is how far apart the instances' clocks may be. An
	// envelope whose ts is further than StaleAfter+MaxClockSkew from this
	// instance's clock is dropped (Stats.Outdated), as is one not newer
	// than the last accepted from its sender, even after that sender was
	// forgotten: a captured envelope cannot be replayed. Default 5s.
	MaxClockSkew time.Duration `yaml:"maxClockSkew" help:"how far apart the instances' clocks may be: an envelope whose ts is further than staleAfter + this from the receiver's clock is dropped, as is a replayed one; 0 = 5s"`
	// MaxInstances bounds the siblings held at once. Envelopes from further
	// new instances are ignored until a held one goes stale, and counted
	// (cluster_publish_rate_ignored_total, Stats.InstancesIgnored); the
	// instances left out are counted too
	// (cluster_publish_rate_instances_ignored). Memory and the periodic
	// re-sum grow with it; an envelope's merge does not. Default 1024.
	MaxInstances int `yaml:"maxInstances" help:"siblings held in the cluster view at most; envelopes of further instances are ignored and counted (cluster_publish_rate_ignored_total, cluster_publish_rate_instances_ignored); 0 = 1024"`
	// Mode is how the fleet shares its slices (docs/cluster.md, "Merged
	// mode"). "merged" (the default): every instance publishes its slice
	// on Channel+":in", one merging instance elected through Redis (a
	// lease key, SET NX with a TTL) merges them and publishes the merged
	// view on Channel+":view" twice per interval, and every instance
	// takes that view as its cluster view: Redis delivers about 2N
	// envelopes per interval. "broadcast": every instance publishes its
	// slice on Channel and merges every sibling's, so Redis delivers N²
	// slices per interval. Every instance of a fleet uses the same mode.
	Mode string `yaml:"mode" help:"merged (one merging instance elected through Redis publishes the merged view: Redis egress grows with the fleet) or broadcast (every instance merges every slice: egress grows with the fleet squared, a view about half an interval fresher, for small fleets); the same on every instance; empty: merged"`
	// HMACSecret, when set, signs every envelope and makes receivers drop
	// (and count) envelopes whose signature is missing or wrong.
	HMACSecret []byte `yaml:"hmacSecret" help:"when set, rate envelopes and bus messages are signed (HMAC-SHA256) and unsigned or badly signed ones are dropped; the same on every instance"`

	// maxEnvelopeBytes bounds an envelope, sent or received; 0 =
	// DefaultMaxEnvelopeBytes (no key sets it; this package's tests do).
	maxEnvelopeBytes int
}

// Deps are what an Aggregator uses beside its configuration.
type Deps struct {
	// Client reaches Redis; required.
	Client redis.UniversalClient
	// Local is this instance's monitor, whose samples are the slice the
	// aggregator shares; required.
	Local Local
	// Subscribers are this instance's subscriber counts per topic; nil:
	// no "subs" in the envelopes and no local part in SubscribersOf.
	Subscribers Subscribers
	// InstanceID tags this instance's envelopes: 1 to 128 bytes of the
	// topic alphabet [A-Za-z0-9_.:/@-]. Empty: a new random id.
	InstanceID string
	// Breaker guards the publish call. Nil: NewBreaker(3,
	// 2*PublishInterval, the clock).
	Breaker Breaker
	// Metrics receives the cluster_* metrics. Nil: metrics.NewDiscard().
	Metrics *metrics.Metrics
	// Logger for broadcast failures, breaker changes and dropped envelopes
	// (rate limited). Nil: slog.Default().
	Logger *slog.Logger

	// now is the clock for freshness and interval averaging; nil:
	// time.Now. The broadcast ticker is a time.Ticker (fake inside
	// testing/synctest).
	now func() time.Time
}

// DefaultOptions is the publishRate.* defaults of docs/configuration.md.
func DefaultOptions() Options {
	return Options{
		Channel:         DefaultChannel,
		PublishInterval: DefaultPublishInterval,
		StaleAfter:      DefaultStaleAfter,
		TopN:            DefaultTopN,
		MaxClockSkew:    DefaultMaxClockSkew,
		MaxInstances:    DefaultMaxInstances,
		Mode:            ModeMerged,
	}
}

// Validate reports every invalid publishRate.* value at once, naming each
// key (zero values mean the defaults).
func (o Options) Validate() error {
	var p conf.Problems
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"publishRate.publishInterval", o.PublishInterval}, {"publishRate.staleAfter", o.StaleAfter}, {"publishRate.maxClockSkew", o.MaxClockSkew}} {
		if d.v < 0 {
			p.Add(d.key, "must not be negative (0 = the default), got %s", d.v)
		}
	}
	if o.TopN < 0 {
		p.Add("publishRate.topN", "must not be negative (0 = %d), got %d", DefaultTopN, o.TopN)
	}
	if o.MaxInstances < 0 {
		p.Add("publishRate.maxInstances", "must not be negative (0 = %d), got %d", DefaultMaxInstances, o.MaxInstances)
	}
	interval := cmp.Or(max(o.PublishInterval, 0), DefaultPublishInterval)
	if o.StaleAfter > 0 && o.StaleAfter < interval {
		p.Add("publishRate.staleAfter", "must be at least publishRate.publishInterval (%s), got %s", interval, o.StaleAfter)
	}
	if o.Mode != "" && o.Mode != ModeBroadcast && o.Mode != ModeMerged {
		p.Add("publishRate.mode", "must be %s or %s, got %q", ModeBroadcast, ModeMerged, o.Mode)
	}
	return p.Err()
}

// withDefaults validates o and fills its zero fields.
func (o Options) withDefaults() (Options, error) {
	if err := o.Validate(); err != nil {
		return o, err
	}
	if o.Channel == "" {
		o.Channel = DefaultChannel
	}
	if o.PublishInterval == 0 {
		o.PublishInterval = DefaultPublishInterval
	}
	if o.Mode == "" {
		o.Mode = ModeMerged
	}
	if o.StaleAfter == 0 {
		o.StaleAfter = max(DefaultStaleAfter, o.PublishInterval)
	}
	if o.TopN == 0 {
		o.TopN = DefaultTopN
	}
	if o.MaxInstances == 0 {
		o.MaxInstances = DefaultMaxInstances
	}
	if o.maxEnvelopeBytes <= 0 {
		o.maxEnvelopeBytes = DefaultMaxEnvelopeBytes
	}
	if o.MaxClockSkew == 0 {
		o.MaxClockSkew = DefaultMaxClockSkew
	}
	return o, nil
}

// withDefaults checks d and fills its nil fields; interval is the
// configuration's publish interval, the breaker's.
func (d Deps) withDefaults(interval time.Duration) (Deps, error) {
	if d.Client == nil || d.Local == nil {
		return d, errors.New("publishrate: Deps.Client and Deps.Local are required")
	}
	if d.InstanceID != "" && !validInstanceID(d.InstanceID) {
		return d, fmt.Errorf("publishrate: instance id must be 1 to %d bytes of [A-Za-z0-9_.:/@-], got %q", MaxInstanceIDLen, d.InstanceID)
	}
	if d.Metrics == nil {
		d.Metrics = metrics.NewDiscard()
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.now == nil {
		d.now = time.Now
	}
	if d.InstanceID == "" {
		d.InstanceID = instance.NewID()
	}
	if d.Breaker == nil {
		d.Breaker = NewBreaker(3, 2*interval, d.now)
	}
	return d, nil
}
