package admithttp_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/admithttp"
)

// get requests url and prints the status and, for a shed answer, its
// error word and binding reason.
func get(client *http.Client, url string) {
	resp, err := client.Get(url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d %s", resp.StatusCode, body)
		return
	}
	var shed struct{ Error, Class, Reason string }
	_ = json.NewDecoder(resp.Body).Decode(&shed)
	fmt.Println(resp.StatusCode, shed.Error, shed.Class, shed.Reason, "Retry-After:", resp.Header.Get("Retry-After"))
}

// The middleware in front of the standard library's mux: two requests per
// minute per client IP, at most 64 in flight. The rate part is GCRA: the
// third request may come 30 seconds after the budget was spent, which the
// answer says in Retry-After (and, in milliseconds, in retryAfterMs).
func Example() {
	a, err := message.New(message.Config{Classes: map[string]message.Rule{"api": {
		Rate:        &message.Rate{Limit: 2, Per: time.Minute, By: "ip"},
		Concurrency: &message.Concurrency{Max: 64},
	}}}, message.Deps{})
	if err != nil {
		panic(err)
	}
	api, _ := a.Class("api")

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	srv := httptest.NewServer(admithttp.Middleware(api)(mux))
	defer srv.Close()

	for range 3 {
		get(srv.Client(), srv.URL+"/hello")
	}
	// Output:
	// 200 hello
	// 200 hello
	// 429 RATE_LIMITED api RATE Retry-After: 30
}

// With chi, the middleware goes in Use for every route, or in With for
// one route. Here the expensive route has its own class keyed by the
// caller's user id (from an auth header, for brevity), and the health
// check is not guarded at all.
func Example_chi() {
	a, err := message.New(message.Config{Classes: map[string]message.Rule{"report": {
		Rate: &message.Rate{Limit: 1, Per: time.Hour}, // by user
	}}}, message.Deps{})
	if err != nil {
		panic(err)
	}
	report, _ := a.Class("report")
	byUser := admithttp.Key(func(r *http.Request) string { return r.Header.Get("X-User") })

	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	r.With(admithttp.Middleware(report, byUser)).Get("/report", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "report for", r.Header.Get("X-User"))
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	client := srv.Client()
	as := func(user string) *http.Client {
		return &http.Client{Transport: roundTripper(func(req *http.Request) (*http.Response, error) {
			req.Header.Set("X-User", user)
			return client.Transport.RoundTrip(req)
		})}
	}
	get(as("ann"), srv.URL+"/report")
	get(as("ann"), srv.URL+"/report")
	get(as("bob"), srv.URL+"/report")
	get(client, srv.URL+"/healthz")
	// Output:
	// 200 report for ann
	// 429 RATE_LIMITED report RATE Retry-After: 3600
	// 200 report for bob
	// 200 ok
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
