package rtserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// A part is a background part of a node. Start brings it up, waiting at
// most until ctx ends: a part that needs Redis and cannot reach it in time
// runs on, degraded, and keeps connecting in the background (an error
// means it cannot run at all). Close stops it and waits for its
// goroutines; it is safe on a part that never started.
type part interface {
	Start(ctx context.Context) error
	Close() error
}

// namedPart is a part with the name its errors carry.
type namedPart struct {
	name string
	part
}

// startWait bounds the start of all parts together, whatever Redis does:
// a PING times out in half of it, so a dead Redis is known by then.
const startWait = time.Second

// parts lists the node's parts in order of start; they close in reverse.
// Each gets what it needs at construction (New builds them in dependency
// order), and Start takes nothing but its deadline.
func (n *Node) buildParts() {
	if n.cluster != nil {
		n.parts = append(n.parts, namedPart{"redis client", clientPart{n.cluster.client}})
	}
	if n.history != nil {
		// After the server in the order of stop: it still delivers to it.
		n.parts = append(n.parts, namedPart{"history store", n.history})
	}
	n.parts = append(n.parts, namedPart{"server", n.server})
	if n.cluster != nil {
		n.parts = append(n.parts, namedPart{"cluster aggregator", n.cluster.agg})
		if n.cluster.scoped {
			// Some class has a cluster-scoped part: warm its checks up.
			n.parts = append(n.parts, namedPart{"cluster-scoped admission", n.cluster.limiter})
		}
	}
	if n.cluster != nil && n.admit.HasCeilings() {
		n.parts = append(n.parts, namedPart{"shared ceilings", n.admit})
	}
	n.parts = append(n.parts, namedPart{"pressure monitor", n.pressure})
}

// startParts starts the parts in order, all within startWait; a stop
// (Shutdown, Close) or a failed listener cuts the wait short.
func (n *Node) startParts(failed context.Context) error {
	ctx, cancel := context.WithTimeout(failed, startWait)
	defer cancel()
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for _, p := range n.parts {
		if err := p.Start(ctx); err != nil {
			return fmt.Errorf("rtserver: start %s: %w", p.name, err)
		}
	}
	return nil
}

// closeParts closes every part in reverse order of start, once.
func (n *Node) closeParts() error {
	var err error
	n.release.Do(func() {
		for i := len(n.parts) - 1; i >= 0; i-- {
			if e := n.parts[i].Close(); e != nil {
				err = errors.Join(err, fmt.Errorf("rtserver: close %s: %w", n.parts[i].name, e))
			}
		}
	})
	return err
}

// clientPart is the Redis client the cluster parts share: closed last.
type clientPart struct{ c redis.UniversalClient }

func (clientPart) Start(context.Context) error { return nil }
func (p clientPart) Close() error              { return p.c.Close() }
