package admithttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/admithttp"
)

// The budget (docs/admission.md, BENCHMARKS.md): at most 300 ns per
// request over the bare handler and no allocation on the admitted path.
// Compare BenchmarkHTTP/bare with the others of the same run.
//
//	go test -run '^$' -bench BenchmarkHTTP -benchmem -count=5 ./message/admithttp
func BenchmarkHTTP(b *testing.B) {
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	rule := message.Rule{
		Rate:        &message.Rate{Limit: 1 << 30, Per: 1 << 40},
		Concurrency: &message.Concurrency{Max: 1 << 20},
	}
	cases := []struct {
		name string
		h    func(b *testing.B) http.Handler
		ctx  bool // a cancellable request context, as net/http gives
	}{
		{name: "bare", h: func(*testing.B) http.Handler { return bare }},
		{name: "concurrency", h: func(b *testing.B) http.Handler {
			return admithttp.Middleware(newClass(b, message.Rule{Concurrency: &message.Concurrency{Max: 1 << 20}}))(bare)
		}},
		{name: "rate+concurrency", h: func(b *testing.B) http.Handler {
			return admithttp.Middleware(newClass(b, rule))(bare)
		}},
		{name: "rate+concurrency/dropOn5xx", h: func(b *testing.B) http.Handler {
			return admithttp.Middleware(newClass(b, rule), admithttp.DropOn5xx())(bare)
		}},
		{name: "rate+concurrency/cancellable", ctx: true, h: func(b *testing.B) http.Handler {
			return admithttp.Middleware(newClass(b, rule))(bare)
		}},
		{name: "rate+concurrency/releaseWhenClientGone", ctx: true, h: func(b *testing.B) http.Handler {
			return admithttp.Middleware(newClass(b, rule), admithttp.ReleaseWhenClientGone())(bare)
		}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			h := bc.h(b)
			r := httptest.NewRequest("GET", "/v1/thing", nil)
			if bc.ctx {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				r = r.WithContext(ctx)
			}
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
	// The class's own cost, without the middleware: the rest of each
	// middleware figure is the adapter's share.
	for _, rc := range []struct {
		name string
		r    message.Rule
	}{
		{"concurrency", message.Rule{Concurrency: &message.Concurrency{Max: 1 << 20}}},
		{"rate+concurrency", rule},
	} {
		b.Run("checkOnly/"+rc.name, func(b *testing.B) {
			c := newClass(b, rc.r)
			call := &message.Call{IP: "192.0.2.1"}
			b.ReportAllocs()
			for b.Loop() {
				c.Check(call)
				call.Release()
			}
		})
	}
	b.Run("parallel/bare", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			w, r := httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/thing", nil)
			for pb.Next() {
				bare.ServeHTTP(w, r)
			}
		})
	})
	b.Run("parallel/rate+concurrency", func(b *testing.B) {
		h := admithttp.Middleware(newClass(b, rule))(bare)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			w, r := httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/thing", nil)
			for pb.Next() {
				h.ServeHTTP(w, r)
			}
		})
	})
}
