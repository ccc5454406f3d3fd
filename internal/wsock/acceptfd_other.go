//go:build !linux

package wsock

import (
	"errors"
	"net"
)

// RawListener is never made here (NewRawListener is nil).
type RawListener struct{}

// NewRawListener is nil here: net's accept takes every connection.
func NewRawListener(net.Listener) *RawListener { return nil }

// Accept is never reached here: nothing is taken.
func (*RawListener) Accept(func() bool) (fd int, err error) { return -1, errors.ErrUnsupported }

// Wake is never reached here.
func (*RawListener) Wake() {}

// Rearm is never reached here.
func (*RawListener) Rearm() {}

// Close is never reached here.
func (*RawListener) Close() error { return nil }

// CloseFD is never reached here.
func CloseFD(int) {}

// ConnFromFD is never reached here.
func ConnFromFD(int, net.KeepAliveConfig) (net.Conn, error) { return nil, errors.ErrUnsupported }

// KeepAliveOf reads nothing here.
func KeepAliveOf(net.Conn) (net.KeepAliveConfig, bool) { return net.KeepAliveConfig{}, false }
