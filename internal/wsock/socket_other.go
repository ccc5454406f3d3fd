//go:build !linux

package wsock

import "errors"

// native: this system lacks the descriptor calls, so Descriptor reports
// none and the functions below are never reached.
const native = false

// WriteFD is never called here (Descriptor is nil): it writes nothing.
func WriteFD(uintptr, []byte) (n int, full bool, err error) { return 0, true, nil }

// SendLastFD is never called here: it writes nothing.
func SendLastFD(uintptr, []byte) (int, error) { return 0, nil }

// ReadFD is never called here: it reads nothing.
func ReadFD(uintptr, []byte) int { return 0 }

// PeekFD is never called here: nothing has arrived.
func PeekFD(uintptr, []byte) (n int, wait bool) { return 0, true }

// hungUpFD is never called here: no peer is seen to go.
func hungUpFD(uintptr) bool { return false }

// setRcvLowat is never called here.
func setRcvLowat(uintptr, int32) {}

// deferAcceptFD is never called here (DeferAccept needs a descriptor).
func deferAcceptFD(uintptr, int) error { return errors.ErrUnsupported }
