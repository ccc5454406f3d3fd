package rtserver

import "errors"

// Start starts the node's parts without a listener of its own, for a
// program that mounts Handler on its own http.Server (its mux, its TLS,
// its middleware; docs/embedding.md), and returns once they run: Handler
// serves from then on. It returns the error of a part that failed to
// start. Stop the node with Shutdown or Close as after Serve; a part that
// fails later stops everything at once and is logged. A node starts or
// serves once: Start after Serve, Shutdown or Close returns
// ErrNodeClosed.
func (n *Node) Start() error {
	n.life.Lock()
	again := n.served || n.stopping
	n.life.Unlock()
	if again {
		return ErrNodeClosed
	}
	served := make(chan error, 1)
	go func() {
		err := n.Serve(nil)
		if !errors.Is(err, ErrNodeClosed) {
			select {
			case <-n.started:
				n.log.Error("rtserver stopped", "err", err)
			default:
			}
		}
		served <- err
	}()
	select {
	case <-n.started:
		return nil
	case err := <-served:
		return err
	}
}
