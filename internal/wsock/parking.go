package wsock

import (
	"net"
	"sync/atomic"
)

// A Parkable is a connection without a descriptor that tells, as the
// Poller tells of a socket, when it has input: an in-memory socket. Its
// read goroutine parks as a socket's does (Conn.Park), and wsock reads
// its frames (ReadMessage), so an idle one costs no goroutine either.
type Parkable interface {
	net.Conn
	// Ready reports, without waiting, whether a Read would return at
	// once: input is there, or its end (or a failure) is.
	Ready() bool
	// Arm asks for w.Wake once, when Read would no longer wait: at once
	// (on the caller's goroutine) if it would not now. Whatever sockets
	// the connection stands for may be armed in p under key, to the same
	// Waker; p is nil when there is no Poller. An error means nothing
	// will be reported.
	Arm(p *Poller, key uint64, w Waker) error
}

// Parking is the state of a read goroutine that may end while its socket
// waits in a Poller, and of the wake-ups that must start exactly one
// goroutine to continue its work.
//
// The goroutine calls Begin, arms the Poller, then Settle: when Settle
// says park, the goroutine returns and owns nothing any more. Anything
// that must resume it (the Poller's readiness, a close from another
// goroutine) calls Wake, and starts the goroutine only when Wake says so.
// A Wake that comes while the goroutine is still arming is not lost:
// Settle then says not to park, and the goroutine carries on itself.
// A Wake while the goroutine runs does nothing: a goroutine that runs
// sees for itself whatever the wake-up was for (input, or a closed
// socket) at its next read. The zero value is a running goroutine.
type Parking struct{ state atomic.Uint32 }

// Parking states.
const (
	running uint32 = iota // a goroutine owns the work
	arming                // it is handing the socket to the Poller
	parked                // no goroutine: the next Wake starts one
	woken                 // woken while arming: the goroutine carries on
)

// Begin marks the goroutine as arming the Poller. Owner only.
func (p *Parking) Begin() { p.state.Store(arming) }

// Settle ends the arming: armed reports whether the Poller now watches
// the socket. It returns true when the goroutine must return (it is
// parked: a Wake starts the next one), false when it must carry on (the
// arming failed, or a Wake came meanwhile). Owner only, after Begin.
func (p *Parking) Settle(armed bool) (park bool) {
	if armed && p.state.CompareAndSwap(arming, parked) {
		return true
	}
	p.state.Store(running)
	return false
}

// Wake reports whether the caller must start the goroutine: true exactly
// once per park, however many wake-ups race.
func (p *Parking) Wake() (start bool) {
	for {
		switch p.state.Load() {
		case parked:
			if p.state.CompareAndSwap(parked, running) {
				return true
			}
		case arming:
			if p.state.CompareAndSwap(arming, woken) {
				return false
			}
		default:
			return false
		}
	}
}

// Parked reports whether no goroutine owns the work now (for tests and
// counts).
func (p *Parking) Parked() bool { return p.state.Load() == parked }
