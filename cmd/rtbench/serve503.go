package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// overloaded503 answers every request as rtserver's handshake tier sheds
// an upgrade in http mode (docs/handshake.md): 503, Retry-After and the
// JSON body. It is the control of the storm-isolation measurement: the
// cheapest server that gives the storm's clients the same answer.
func overloaded503(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Retry-After", "1")
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write([]byte(`{"error":"OVERLOADED","retryAfterMs":1000}` + "\n"))
}

// serve503 answers 503 on ln until ctx ends.
func serve503(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: http.HandlerFunc(overloaded503), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
