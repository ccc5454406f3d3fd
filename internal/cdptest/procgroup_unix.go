//go:build unix

package cdptest

import (
	"os/exec"
	"syscall"
)

// ownGroup starts cmd in its own process group, so that the renderers and
// helpers Chromium forks stop with it (killGroup).
func ownGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// killGroup kills cmd's process group.
func killGroup(cmd *exec.Cmd) { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
