package rtserver

import (
	"context"
	"errors"
	"net"
	"os"
	"os/signal"
	"syscall"
)

// RunUntilSignal serves n on ln (nil: a listener on Config.Listen) until
// the process gets SIGTERM or SIGINT, then shuts n down: the first signal
// drains over drain.duration, a second one stops at once. It returns nil
// after a stop by signal, or the error that stopped n (ErrNodeClosed when
// something else called Shutdown or Close).
func RunUntilSignal(n *Node, ln net.Listener) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	return n.runUntil(ln, sigs)
}

// runUntil is RunUntilSignal on a channel of signals.
func (n *Node) runUntil(ln net.Listener, sigs <-chan os.Signal) error {
	served := make(chan error, 1)
	go func() {
		if ln == nil {
			served <- n.ListenAndServe()
		} else {
			served <- n.Serve(ln)
		}
	}()
	select {
	case err := <-served:
		return err
	case <-sigs:
	}
	n.log.Info("signal: draining; send again to stop at once")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-sigs:
			cancel() // cuts the drain short: the rest are closed at once
		case <-ctx.Done():
		}
	}()
	_ = n.Shutdown(ctx) // ctx's error when the second signal came: a stop asked for
	if err := <-served; !errors.Is(err, ErrNodeClosed) {
		return err
	}
	return nil
}
