package server

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// startServer runs s behind a real TCP listener and returns its ws:// URL.
func startServer(t *testing.T, opts Options) (*Server, string) {
	t.Helper()
	s := New(opts)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		hs.Close()
	})
	return s, "ws" + strings.TrimPrefix(hs.URL, "http")
}
