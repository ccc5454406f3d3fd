//go:build unix

package testkit

import (
	"syscall"
	"time"
)

// ProcessCPU is the CPU time this process has used (user and system), for
// benchmarks that report CPU per operation on a shared machine.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
