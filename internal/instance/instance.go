// Package instance names a running instance: the one id its bus
// envelopes, rate envelopes, shared ceilings, presence entries and the
// server API's info carry, made once per node.
package instance

import (
	"crypto/rand"
	"encoding/hex"
)

// NewID is a new random instance id: 16 hex digits, within every
// package's bound on ids and of the topic alphabet.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
