package clusterrate

import (
	"context"
	"sync"
	"time"
)

// warmUpWait bounds one warm-up attempt (Preload): a cold Redis Cluster
// is dialled, asked for its slots and sent the script.
const warmUpWait = 5 * time.Second

// warmUpRetry is the pause between warm-up attempts while Redis is
// unreachable.
const warmUpRetry = time.Second

// warmUp is a Limiter's background warm-up (Start, Close).
type warmUp struct {
	mu     sync.Mutex
	cancel context.CancelFunc // nil: not started, or closed
	done   chan struct{}
}

// Start warms the limiter up: it loads the script on Redis (Preload),
// and, when Redis does not take it, keeps trying in the background
// every second until it does or Close. A cold first check (dial, cluster
// slots, script load) can outlast its timeout and be decided by the
// caller's fail policy; a warm one does not. Start waits for the first
// attempt at most until ctx ends, and returns nil: checks work without a
// warm-up. Calling it while started does nothing.
func (l *Limiter) Start(ctx context.Context) error {
	l.warm.mu.Lock()
	if l.warm.cancel != nil {
		l.warm.mu.Unlock()
		return nil
	}
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done, first := make(chan struct{}), make(chan struct{})
	l.warm.cancel, l.warm.done = cancel, done
	l.warm.mu.Unlock()

	go func() {
		defer close(done)
		l.warmUp(life, first)
	}()
	select {
	case <-first:
	case <-ctx.Done():
	}
	return nil
}

// warmUp tries Preload until it succeeds or life ends, closing first once
// the first attempt has ended. A failed first attempt is logged once.
func (l *Limiter) warmUp(life context.Context, first chan<- struct{}) {
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(life, warmUpWait)
		err := l.Preload(ctx)
		cancel()
		if attempt == 0 {
			close(first)
		}
		if err == nil || life.Err() != nil {
			if err == nil && attempt > 0 {
				l.log.Info("cluster-scoped admission: Redis is ready; checks are warm")
			}
			return
		}
		if attempt == 0 {
			l.log.Warn("cluster-scoped admission: Redis not ready at start; checks decide by admission.failPolicy until it is", "err", err)
		}
		t := time.NewTimer(warmUpRetry)
		select {
		case <-t.C:
		case <-life.Done():
			t.Stop()
			return
		}
	}
}

// Close stops a warm-up still in progress and waits for it. It returns
// nil; closing a limiter that never started does nothing.
func (l *Limiter) Close() error {
	l.warm.mu.Lock()
	cancel, done := l.warm.cancel, l.warm.done
	l.warm.cancel = nil
	l.warm.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}
