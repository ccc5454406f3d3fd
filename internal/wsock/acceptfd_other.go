//go:build !linux

package wsock

import (
	"errors"
	"net"
	"syscall"
)

// AcceptFD is never reached here (ListenerDescriptor is nil): nothing is
// taken.
func AcceptFD(syscall.RawConn) (fd int, err error) { return -1, errors.ErrUnsupported }

// CloseFD is never reached here.
func CloseFD(int) {}

// ConnFromFD is never reached here.
func ConnFromFD(int, net.KeepAliveConfig) (net.Conn, error) { return nil, errors.ErrUnsupported }

// KeepAliveOf reads nothing here.
func KeepAliveOf(net.Conn) (net.KeepAliveConfig, bool) { return net.KeepAliveConfig{}, false }
