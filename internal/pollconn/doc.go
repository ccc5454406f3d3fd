// Package pollconn turns a connection whose reader tolerates a short delay
// into one that is read on a timer instead of being woken by each arrival.
//
// A Go socket sits in the runtime's epoll set: every segment that arrives
// wakes the process (the netpoller returns, the scheduler looks for work,
// sysmon spins up), whether or not a goroutine is waiting to read it. For
// a stream of small messages nobody needs at once, such as the cluster
// aggregator's rate envelopes (about 200 a second at 1,000 siblings, each
// read once per sample), those wake-ups are most of what the stream costs.
// A polled connection holds a duplicate of the socket outside the epoll
// set (the original is closed, which removes it), reads it without
// blocking, and when nothing is buffered sleeps before trying again: the
// kernel gathers what arrives meanwhile, and one wake-up reads it all.
//
// The sleep starts at Poll.Min after a read that found data and doubles on
// each empty read up to Poll.Max, so a quiet stream costs a few wake-ups a
// second and a busy one at most one per Min. Read and write deadlines are
// kept (a read is tried once more at its deadline before timing out), and
// Close wakes a sleeping Read at once.
//
// It must never be used where latency matters (a message waits up to
// Poll.Max), nor for anything but a stream socket that implements
// syscall.Conn: Wrap returns every other connection (TLS, pipes, other
// platforms) unchanged, so callers need no fallback of their own.
package pollconn
