package server

import (
	"context"
	"fmt"
	"testing"

	"github.com/rtserver/rtserver/internal/wstest"
)

// A batch that holds an application method runs off the read goroutine;
// the built-ins in it must not race the built-ins of the next frames.
func TestBatchWithBuiltinsAndRPCDoesNotRace(t *testing.T) {
	s, url := startServer(t, Deps{})
	s.Handle("echo", func(context.Context, *Request) (any, error) { return nil, nil })
	c := wstest.Dial(t, url)
	const n = 50
	for i := range n {
		c.Send(fmt.Sprintf(`[{"jsonrpc":"2.0","id":%d,"method":"subscribe","params":{"topic":"a%d"}},{"jsonrpc":"2.0","id":"e%d","method":"echo"}]`, i, i, i))
		c.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":"s%d","method":"subscribe","params":{"topic":"b%d"}}`, i, i))
	}
	for range 2 * n {
		c.RecvRaw()
	}
}
