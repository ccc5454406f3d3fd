//go:build unix

package main

import "syscall"

// raiseNoFile lifts the soft open-files limit to the hard one: idle and
// connect modes hold thousands of sockets. (The Go runtime does the same at
// start-up since Go 1.19; doing it here keeps that explicit and reports a
// failure.)
func raiseNoFile() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= lim.Max {
		return nil
	}
	lim.Cur = lim.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}
