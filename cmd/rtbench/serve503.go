package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/rtserver/rtserver/internal/retryhint"
)

// overloaded503 answers every request as rtserver's handshake tier sheds
// an upgrade in http mode (docs/handshake.md): 503, Retry-After and the
// JSON body. It is the control of the storm-isolation measurement: the
// cheapest server that gives the storm's clients the same answer.
func overloaded503(w http.ResponseWriter, _ *http.Request) {
	retryhint.Answer(w, http.StatusServiceUnavailable, retryhint.HeadOverloaded, 1000)
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
