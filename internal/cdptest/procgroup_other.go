//go:build !unix

package cdptest

import "os/exec"

// ownGroup: no process groups here (the browser tests run on Unix; this
// keeps the package compiling elsewhere).
func ownGroup(*exec.Cmd) {}

// killGroup kills cmd alone.
func killGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
