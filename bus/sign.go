package bus

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"io"
	"sync"
)

// Signed envelopes. Anyone who can PUBLISH on a fleet's Redis can inject
// messages on any topic (and control messages: disconnect any user)
// unless the envelopes are signed. With RedisOptions.HMACSecret set, every
// envelope, data or control, ends with the 32-byte HMAC-SHA256 of all the
// bytes before it, and a receiver drops (reason malformed, with a
// rate-limited warning) any envelope without a valid one. The MAC does not
// stop a replay of a captured message (the same data again on the same
// topic); keep Redis private all the same (docs/security.md).
//
// Cost (BenchmarkSign, BenchmarkVerify; 2-core machine, busy, medians of
// 5): about 0.8 µs to sign and 0.5 µs to verify a 128-byte message, 1.2 µs
// to sign a 1 KiB one; paid once by the sender and once by every
// receiving instance. No allocation when signing (keyed MACs are pooled).

// sigLen is the MAC's length at the end of a signed envelope.
const sigLen = sha256.Size

// signer holds the key and a pool of keyed MACs (creating one costs as
// much as using it); a nil signer means unsigned envelopes.
type signer struct{ macs sync.Pool }

func newSigner(key []byte) *signer {
	if len(key) == 0 {
		return nil
	}
	key = append([]byte(nil), key...)
	s := &signer{}
	s.macs.New = func() any { return hmac.New(sha256.New, key) }
	return s
}

// sign appends the MAC of env to env (which must have room or grows).
func (s *signer) sign(env []byte) []byte {
	m := s.macs.Get().(hash.Hash)
	m.Reset()
	m.Write(env)
	env = m.Sum(env)
	s.macs.Put(m)
	return env
}

// verify returns the envelope inside a signed payload, or ok false when
// the payload is too short or its MAC is not the key's.
func (s *signer) verify(p string) (env string, ok bool) {
	if len(p) < sigLen+1 {
		return "", false
	}
	env, sig := p[:len(p)-sigLen], p[len(p)-sigLen:]
	m := s.macs.Get().(hash.Hash)
	m.Reset()
	io.WriteString(m, env)
	var sum [sigLen]byte
	ok = hmac.Equal(m.Sum(sum[:0]), []byte(sig))
	s.macs.Put(m)
	return env, ok
}
