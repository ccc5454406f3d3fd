//go:build !unix

package presence

import "time"

// cpuTime is not measured here: the benchmarks that report it run on Unix.
func cpuTime() time.Duration { return 0 }
