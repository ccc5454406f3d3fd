package admitgrpc_test

import (
	"context"
	"io"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"pgregory.net/rapid"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/admitgrpc"
)

// call is one call the model knows about.
type call struct {
	c         *ctl
	cancel    context.CancelFunc
	result    chan error // the client's view: the unary result, or the stream's end
	stream    bool
	cancelled bool
}

// TestExactlyOnceReleaseProperty drives random interleavings of unary and
// stream calls over a real loopback connection, sharing one
// Concurrency{Max: k} class through a glob: start, handler return (the end
// of a stream), handler panic (recovered outside the interceptor) and
// client cancel (after which the handler notices and later returns or
// panics). After every step the class's in-flight count is exactly the
// model's and the releases that happened are exactly the ones the step
// implies, with the right outcome; a call started while k are held is shed
// with Unavailable. At the end nothing is held.
func TestExactlyOnceReleaseProperty(t *testing.T) {
	leakcheck.Check(t)
	s := startServer(t)
	cl := s.dial(t)
	rapid.Check(t, func(rt *rapid.T) {
		k := rapid.IntRange(1, 3).Draw(rt, "k")
		a := testkit.Must(message.New(message.Config{}, message.Deps{}))
		if err := a.Register("c", message.Rule{Concurrency: &message.Concurrency{Max: k}}); err != nil {
			rt.Fatal(err)
		}
		class, _ := a.Class("c")
		r, err := message.NewRouter(a, map[string]string{"/grpc.health.v1.Health/*": "c"})
		if err != nil {
			rt.Fatal(err)
		}
		releases := make(chan message.Outcome, 1024)
		hook := admitgrpc.OnReleased(func(o message.Outcome) { releases <- o })
		s.set(admitgrpc.UnaryServerInterceptor(r, hook), admitgrpc.StreamServerInterceptor(r, hook))

		var live []*call
		expect := func(step string, want ...message.Outcome) {
			for _, w := range want {
				// The release ran before the chain returned, which the
				// step has already waited for: it is in the channel.
				select {
				case got := <-releases:
					if got != w {
						rt.Fatalf("%s: released as %v, want %v", step, got, w)
					}
				default:
					rt.Fatalf("%s: no release (want %v)", step, w)
				}
			}
			select {
			case o := <-releases:
				rt.Fatalf("%s: an extra release (%v)", step, o)
			default:
			}
			if got := class.InFlight(); got != int64(len(live)) {
				rt.Fatalf("%s: in flight %d, model %d", step, got, len(live))
			}
		}
		start := func(stream bool) {
			ctx, cancel := context.WithCancel(context.Background())
			ctx, c := s.controlled(ctx)
			l := &call{c: c, cancel: cancel, result: make(chan error, 1), stream: stream}
			go func() {
				if !stream {
					_, err := cl.Check(ctx, &healthpb.HealthCheckRequest{})
					l.result <- err
					return
				}
				st, err := cl.Watch(ctx, &healthpb.HealthCheckRequest{})
				if err == nil {
					_, err = st.Recv()
				}
				l.result <- err
			}()
			admit := len(live) < k
			select {
			case <-c.entered:
				if !admit {
					rt.Fatalf("admitted with %d of %d held", len(live), k)
				}
				live = append(live, l)
			case err := <-l.result:
				<-c.finished
				cancel()
				if admit {
					rt.Fatalf("shed (%v) with %d of %d held", err, len(live), k)
				}
				if status.Code(err) != codes.Unavailable {
					rt.Fatalf("shed with %v, want Unavailable", err)
				}
			}
			expect("start")
		}
		end := func(i int, act action) {
			l := live[i]
			live = append(live[:i], live[i+1:]...)
			l.c.act <- act
			<-l.c.finished
			err := <-l.result
			l.cancel()
			switch {
			case l.cancelled:
				if !isCanceled(err) {
					rt.Fatalf("cancelled call ended with %v", err)
				}
			case act == actPanic:
				if status.Code(err) != codes.Internal {
					rt.Fatalf("panicked call ended with %v", err)
				}
			case l.stream && err != io.EOF:
				rt.Fatalf("stream ended with %v, want EOF", err)
			case !l.stream && err != nil:
				rt.Fatalf("call ended with %v", err)
			}
			o := message.Completed
			if act == actPanic || l.cancelled {
				o = message.Dropped
			}
			expect("end", o)
		}

		steps := rapid.IntRange(1, 30).Draw(rt, "steps")
		for range steps {
			switch op := rapid.IntRange(0, 4).Draw(rt, "op"); {
			case op <= 1 || len(live) == 0:
				start(op == 1)
			case op == 2:
				end(rapid.IntRange(0, len(live)-1).Draw(rt, "i"), actReturn)
			case op == 3:
				end(rapid.IntRange(0, len(live)-1).Draw(rt, "i"), actPanic)
			default:
				l := live[rapid.IntRange(0, len(live)-1).Draw(rt, "i")]
				if l.cancelled {
					continue
				}
				l.cancelled = true
				l.cancel()
				<-l.c.gone // the server saw it: the handler's context has ended
				expect("cancel")
			}
		}
		for len(live) > 0 {
			end(0, actReturn)
		}
		if n := class.InFlight(); n != 0 {
			rt.Fatalf("in flight %d at the end", n)
		}
	})
	s.set(nil, nil)
}
