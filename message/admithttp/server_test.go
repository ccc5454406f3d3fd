package admithttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/admithttp"
)

// TestClientGoneOverTheNetwork: a real client disconnects while the
// handler runs. By default the lease is held until the handler returns
// (it is still working) and released once, as Dropped; with
// ReleaseWhenClientGone it is released as soon as the server notices,
// while the handler is still blocked, and not again when it returns. A
// second client is shed with 503 while the lease is held.
func TestClientGoneOverTheNetwork(t *testing.T) {
	for _, onGone := range []bool{false, true} {
		t.Run(map[bool]string{false: "release at return", true: "release when client gone"}[onGone], func(t *testing.T) {
			leakcheck.Check(t)
			c := newClass(t, message.Rule{Concurrency: &message.Concurrency{Max: 1}})
			releases := make(chan message.Outcome, 4)
			opts := []admithttp.Option{admithttp.OnReleased(func(o message.Outcome) { releases <- o })}
			if onGone {
				opts = append(opts, admithttp.ReleaseWhenClientGone())
			}
			entered, sawGone, unblock, returned := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
			mux := http.NewServeMux()
			mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
				defer close(returned)
				close(entered)
				<-r.Context().Done()
				close(sawGone)
				<-unblock
			})
			srv := httptest.NewServer(admithttp.Middleware(c, opts...)(mux))
			defer srv.Close()
			client := srv.Client()
			defer client.CloseIdleConnections()

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/slow", nil)
			errc := make(chan error, 1)
			go func() {
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				errc <- err
			}()
			<-entered

			resp, err := client.Get(srv.URL + "/slow")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("second client: %d, Retry-After %q; want 503 with a hint", resp.StatusCode, resp.Header.Get("Retry-After"))
			}

			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("client: %v", err)
			}
			<-sawGone
			if onGone {
				if o := <-releases; o != message.Dropped {
					t.Errorf("released as %v, want dropped", o)
				}
				if n := c.InFlight(); n != 0 {
					t.Errorf("in flight %d after the client left", n)
				}
			} else if n := c.InFlight(); n != 1 {
				t.Errorf("in flight %d while the handler still runs, want 1", n)
			}
			close(unblock)
			<-returned
			if !onGone {
				if o := <-releases; o != message.Dropped {
					t.Errorf("released as %v, want dropped", o)
				}
			}
			// The handler has returned; its deferred release ran before
			// ServeHTTP returned, which a new request observes.
			resp, err = client.Get(srv.URL + "/missing")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("after release: %d, want the mux's 404", resp.StatusCode)
			}
			if n := c.InFlight(); n != 0 {
				t.Errorf("in flight %d at the end", n)
			}
			select {
			case o := <-releases:
				if o != message.Completed {
					t.Errorf("the 404 request released as %v", o)
				}
			default:
				t.Error("the 404 request was not released")
			}
			select {
			case o := <-releases:
				t.Errorf("extra release %v", o)
			default:
			}
		})
	}
}
