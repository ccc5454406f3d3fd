package server

import (
	"time"

	"github.com/rtserver/rtserver/internal/conf"
	"github.com/rtserver/rtserver/protocol"
)

// Config holds the per-connection limits (limits.* in
// docs/configuration.md). Zero values mean the documented defaults.
type Config struct {
	MaxMessageBytes         int64         `yaml:"maxMessageBytes" help:"largest client message; a larger one closes the connection with 1009; 0 = 65536"`
	MaxSubscriptionsPerConn int           `yaml:"maxSubscriptionsPerConn" help:"topics one connection may subscribe to; past it: -32004 LIMIT_EXCEEDED; 0 = 128"`
	SendQueueBytes          int           `yaml:"sendQueueBytes" help:"bytes queued in the server for one client that its socket would not take (the client is not reading); past this while the socket is full: close 1013; 0 = 1048576"`
	WriteTimeout            time.Duration `yaml:"writeTimeout" help:"longest one socket write may take: a client whose socket takes nothing for this long has stopped reading and is closed with 1013; 0 = 5s"`
	PingInterval            time.Duration `yaml:"pingInterval" help:"period of WebSocket pings that detect dead peers; 0 = 25s"`
	MessageTimeout          time.Duration `yaml:"messageTimeout" help:"longest a client message may take from its first frame to its last (a fragmented message its client never finishes, though it answers pings); past it: close 1008, checked at each keepalive step, so at most one pingInterval late; 0 = 30s"`
	PortableSockets         bool          `yaml:"portableSockets" help:"true: after the upgrade rtserver makes no socket call of its own (reads wait inside the WebSocket library, frames are written through net.Conn, no poller parks idle connections, so each keeps a goroutine and more memory); for a platform or kernel where the fast path misbehaves"`
	MaxJSONDepth            int           `yaml:"maxJSONDepth" help:"how deeply JSON may nest in a client message or a server API body; deeper: -32600 (client) or 400 (API), never forwarded to a handler or backend; 0 = 64"`
}

// maxCallsPerConn is the application RPCs in flight per connection.
const maxCallsPerConn = 16

// DefaultConfig is the limits.* defaults of docs/configuration.md.
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

// setDefaults gives the zero values their documented defaults.
func (c *Config) setDefaults() {
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = 65536
	}
	if c.MaxSubscriptionsPerConn <= 0 {
		c.MaxSubscriptionsPerConn = 128
	}
	if c.SendQueueBytes <= 0 {
		c.SendQueueBytes = 1 << 20
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 5 * time.Second
	}
	if c.PingInterval <= 0 {
		c.PingInterval = 25 * time.Second
	}
	if c.MessageTimeout <= 0 {
		c.MessageTimeout = 30 * time.Second
	}
	if c.MaxJSONDepth <= 0 {
		c.MaxJSONDepth = protocol.DefaultMaxDepth
	}
}

// Validate reports every negative limit at once, naming each key (zero
// means the default).
func (c Config) Validate() error {
	var p conf.Problems
	p.NonNegative("limits.maxMessageBytes", c.MaxMessageBytes)
	p.NonNegative("limits.maxSubscriptionsPerConn", int64(c.MaxSubscriptionsPerConn))
	p.NonNegative("limits.sendQueueBytes", int64(c.SendQueueBytes))
	p.NonNegativeDuration("limits.writeTimeout", c.WriteTimeout)
	p.NonNegativeDuration("limits.pingInterval", c.PingInterval)
	p.NonNegativeDuration("limits.messageTimeout", c.MessageTimeout)
	p.NonNegative("limits.maxJSONDepth", int64(c.MaxJSONDepth))
	return p.Err()
}
