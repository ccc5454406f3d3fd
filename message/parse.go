package message

import (
	"fmt"
	"slices"

	"github.com/rtserver/rtserver/pressure"
)

// ParseFailPolicy parses the config word "open" or "closed".
func ParseFailPolicy(s string) (FailPolicy, error) {
	switch s {
	case "open":
		return FailOpen, nil
	case "closed":
		return FailClosed, nil
	}
	return FailOpen, fmt.Errorf("message: fail policy must be open or closed (got %q)", s)
}

// ParseReasons parses config words (MEMORY, PUBLISH_RATE, SUBSCRIBERS, BUS) into
// a Rule's Reasons, in order, dropping repeats. An unknown word is an error
// naming it.
func ParseReasons(words []string) ([]pressure.Reason, error) {
	out := make([]pressure.Reason, 0, len(words))
	for i, w := range words {
		r, ok := pressure.ParseReason(w)
		if !ok {
			return nil, fmt.Errorf("message: reasons[%d]: unknown pressure reason %q (want MEMORY, PUBLISH_RATE, SUBSCRIBERS or BUS)", i, w)
		}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out, nil
}
