//go:build !linux

package publishrate

import "time"

// threadCPU is not measured here: cpu-ns/op reads 0.
func threadCPU() time.Duration { return 0 }
