package admithttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/admithttp"
)

// TestAdmittedPathAllocatesNothing: an admitted request of an IPv4 client
// through a class with rate and concurrency parts costs no allocation
// beyond the bare handler's (here none), with and without DropOn5xx.
func TestAdmittedPathAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under -race")
	}
	for _, opts := range [][]admithttp.Option{nil, {admithttp.DropOn5xx()}} {
		c := newClass(t, message.Rule{
			Rate:        &message.Rate{Limit: 1 << 30, Per: 1 << 40},
			Concurrency: &message.Concurrency{Max: 8},
		})
		h := admithttp.Middleware(c, opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		}))
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		h.ServeHTTP(w, r) // warm the pool and the limiter's key
		if n := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, r) }); n != 0 {
			t.Errorf("%d options: %v allocs per admitted request, want 0", len(opts), n)
		}
		if c.InFlight() != 0 {
			t.Errorf("in flight %d", c.InFlight())
		}
	}
}
