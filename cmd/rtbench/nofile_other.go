//go:build !unix

package main

// raiseNoFile has nothing to raise on this system: it has no open-files
// rlimit.
func raiseNoFile() error { return nil }
