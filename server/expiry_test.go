package server

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// expiryProbe records what a tokenExpiry did, at the bubble's fake time.
type expiryProbe struct {
	mu      sync.Mutex
	start   time.Time
	notices []time.Duration // time since start of each notice
	lefts   []time.Duration // what each notice said was left
	expired []time.Duration
}

func (p *expiryProbe) warn(left time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notices = append(p.notices, time.Since(p.start))
	p.lefts = append(p.lefts, left)
}

func (p *expiryProbe) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expired = append(p.expired, time.Since(p.start))
}

func (p *expiryProbe) snapshot() (notices, lefts, expired []time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Duration(nil), p.notices...), append([]time.Duration(nil), p.lefts...), append([]time.Duration(nil), p.expired...)
}

func TestTokenExpiryNoticeThenClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &expiryProbe{start: time.Now()}
		e := newTokenExpiry(newExpiryHeap(), p.start.Add(time.Minute), 30*time.Second, time.Now, p.warn, p.expire)
		defer e.stop()
		time.Sleep(time.Hour) // fake time: everything due has run
		notices, lefts, expired := p.snapshot()
		if len(notices) != 1 || len(expired) != 1 {
			t.Fatalf("notices %v, expired %v; want one of each", notices, expired)
		}
		if lefts[0] < 30*time.Second {
			t.Errorf("notice said %v left, want at least the 30s refresh notice", lefts[0])
		}
		if time.Minute-notices[0] < 30*time.Second {
			t.Errorf("notice sent at %v, less than 30s before exp at 1m", notices[0])
		}
		if expired[0] != time.Minute {
			t.Errorf("expired at %v, want at exp (1m)", expired[0])
		}
	})
}

func TestTokenExpiryRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &expiryProbe{start: time.Now()}
		e := newTokenExpiry(newExpiryHeap(), p.start.Add(time.Minute), 30*time.Second, time.Now, p.warn, p.expire)
		defer e.stop()
		time.Sleep(45 * time.Second) // past the notice
		if n, _, _ := p.snapshot(); len(n) != 1 {
			t.Fatalf("%d notices by 45s, want 1", len(n))
		}
		// Refreshed to exp at 2m: no close at 1m, a new notice before 2m.
		if !e.extend(p.start.Add(2 * time.Minute)) {
			t.Fatal("extend refused before exp")
		}
		time.Sleep(time.Minute) // now at 1m45s
		notices, lefts, expired := p.snapshot()
		if len(expired) != 0 {
			t.Fatalf("closed at %v despite the refresh", expired)
		}
		if len(notices) != 2 || lefts[1] < 30*time.Second || notices[1] > 90*time.Second {
			t.Fatalf("notices at %v saying %v left; want a second one at least 30s before 2m", notices, lefts)
		}
		// Refreshed with a token without exp: never closed.
		if !e.extend(time.Time{}) {
			t.Fatal("extend refused")
		}
		time.Sleep(time.Hour)
		if n, _, ex := p.snapshot(); len(n) != 2 || len(ex) != 0 {
			t.Fatalf("after a refresh without exp: notices %v, expired %v", n, ex)
		}
	})
}

// A token with less than the notice left at connect gets its notice at
// once; once expired, extend is refused and nothing fires again.
func TestTokenExpiryShortToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &expiryProbe{start: time.Now()}
		e := newTokenExpiry(newExpiryHeap(), p.start.Add(10*time.Second), 30*time.Second, time.Now, p.warn, p.expire)
		defer e.stop()
		synctest.Wait()
		notices, lefts, _ := p.snapshot()
		if len(notices) != 1 || notices[0] != 0 || lefts[0] != 10*time.Second {
			t.Fatalf("notices %v saying %v; want one at once saying 10s", notices, lefts)
		}
		time.Sleep(time.Hour)
		if _, _, ex := p.snapshot(); len(ex) != 1 || ex[0] != 10*time.Second {
			t.Fatalf("expired %v, want once at 10s", ex)
		}
		if e.extend(p.start.Add(2 * time.Hour)) {
			t.Fatal("extend accepted after expiry")
		}
		time.Sleep(3 * time.Hour)
		if n, _, ex := p.snapshot(); len(n) != 1 || len(ex) != 1 {
			t.Fatalf("fired again after expiry: notices %v expired %v", n, ex)
		}
	})
}

// stop (the connection ended) silences everything.
func TestTokenExpiryStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &expiryProbe{start: time.Now()}
		e := newTokenExpiry(newExpiryHeap(), p.start.Add(time.Minute), 30*time.Second, time.Now, p.warn, p.expire)
		e.stop()
		time.Sleep(time.Hour)
		if n, _, ex := p.snapshot(); len(n) != 0 || len(ex) != 0 {
			t.Fatalf("after stop: notices %v expired %v", n, ex)
		}
	})
}
