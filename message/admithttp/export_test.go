package admithttp

import (
	"net/http"

	"github.com/rtserver/rtserver/message"
)

// OnReleased calls f from the one release of each admitted request, with
// the outcome it reported.
func OnReleased(f func(message.Outcome)) Option {
	return func(c *config) { c.onReleased = f }
}

// WriteShed answers d as the middleware of class would.
func WriteShed(w http.ResponseWriter, class string, d message.Decision) {
	s := newShedder(class)
	s.write(w, d)
}
