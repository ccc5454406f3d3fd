package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// The api mode sends the key and body it is given, counts every answer by
// status (calls cut off by the end of the run are not counted), and measures a server's CPU when given its pid (here our own).
func TestRunAPI(t *testing.T) {
	var seen atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "apikey k" || r.Method != http.MethodPost {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		seen.Add(1)
		w.Write([]byte(`{"result":{}}`))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/api/publish")
	res, err := runAPI(context.Background(), apiConfig{URL: u, Key: "k", Body: `{}`, C: 4, Duration: 200 * time.Millisecond, ServerPID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || int64(res.Status["200"]) != res.Requests || seen.Load() < res.Requests || res.Errors != 0 {
		t.Fatalf("requests %d, status %v, server saw %d, errors %d", res.Requests, res.Status, seen.Load(), res.Errors)
	}
	if res.Latency.N != uint64(res.Requests) || res.CPUPerRequestUs <= 0 {
		t.Errorf("latency n %d, cpu per request %v", res.Latency.N, res.CPUPerRequestUs)
	}
	if _, err := runAPI(context.Background(), apiConfig{URL: u, C: 1, Duration: time.Second}); err == nil {
		t.Error("no key accepted")
	}
}
