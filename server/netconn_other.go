//go:build !linux

package server

import (
	"net"
	"syscall"
)

// syscallConn: the direct, non-blocking write path is Linux only; other
// systems write through net.Conn (a writer goroutine per burst).
func syscallConn(net.Conn) syscall.RawConn { return nil }

func (c *rawConn) writeFD(uintptr) bool { return true }

func (c *rawConn) inputFD(uintptr) {}

func (c *rawConn) awaitFD(uintptr) bool { return true }

func (h *holdSet) readFD(uintptr) {}
