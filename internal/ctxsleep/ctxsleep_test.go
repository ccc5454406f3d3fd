package ctxsleep

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := Sleep(context.Background(), time.Second); err != nil || time.Since(start) != time.Second {
			t.Fatalf("Sleep(1s) = %v after %v", err, time.Since(start))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start = time.Now()
		if err := Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Fatalf("Sleep past the deadline = %v after %v", err, time.Since(start))
		}
		if err := Sleep(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Sleep(0) on an ended ctx = %v", err)
		}
		if err := Sleep(context.Background(), -time.Second); err != nil {
			t.Fatalf("Sleep(-1s) = %v", err)
		}
	})
}
