package server

import (
	"context"
	"errors"
	"testing"

	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/protocol"
)

// TestCallOutcome pins what an adaptive concurrency limit learns from a
// handler: overload signals are dropped, the client's own mistakes are not.
func TestCallOutcome(t *testing.T) {
	live := context.Background()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want message.Outcome
	}{
		{"success", live, nil, message.Completed},
		{"bad params", live, protocol.NewError(protocol.CodeInvalidParams, "", nil), message.Completed},
		{"forbidden", live, protocol.NewError(protocol.CodeForbidden, "", nil), message.Completed},
		{"upstream timeout", live, protocol.NewError(protocol.CodeUpstream, "", nil), message.Dropped},
		{"internal", live, protocol.NewError(protocol.CodeInternal, "", nil), message.Dropped},
		{"plain Go error", live, errors.New("db down"), message.Dropped},
		{"client gone", gone, nil, message.Dropped},
	}
	for _, tt := range tests {
		if got := callOutcome(tt.ctx, tt.err); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
