package acceptlog

import (
	"errors"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Message is what a failed accept for want of descriptors logs.
const Message = "accept failed: out of file descriptors; new connections wait until some close (raise the open-files limit, ulimit -n / LimitNOFILE, or lower handshake.maxConnections)"

// Listener counts and logs inner's accept failures for want of file
// descriptors; everything else passes through.
type Listener struct {
	net.Listener
	count prometheus.Counter // nil: not counted
	log   *slog.Logger
}

// Wrap returns inner with the failures counted in count and logged in log
// (which should be rate-limited, as the node's is). A listener that takes
// accept deadlines (a *net.TCPListener does) still takes them once
// wrapped: the handshake tier's door needs them to serve upgrades at all.
func Wrap(inner net.Listener, count prometheus.Counter, log *slog.Logger) net.Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Listener{Listener: inner, count: count, log: log}
	if dl, ok := inner.(deadliner); ok {
		return &deadlineListener{Listener: l, dl: dl}
	}
	return l
}

// deadliner is a listener that takes accept deadlines.
type deadliner interface{ SetDeadline(time.Time) error }

// deadlineListener is a Listener whose inner listener takes deadlines.
type deadlineListener struct {
	*Listener
	dl deadliner
}

// SetDeadline is inner's.
func (l *deadlineListener) SetDeadline(t time.Time) error { return l.dl.SetDeadline(t) }

// Accept is inner's, with descriptor exhaustion counted and logged.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil && OutOfFiles(err) {
		if l.count != nil {
			l.count.Inc()
		}
		l.log.Error(Message, "addr", l.Addr().String(), "err", err)
	}
	return c, err
}

// OutOfFiles reports whether err is the process's or the system's file
// descriptor limit.
func OutOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
