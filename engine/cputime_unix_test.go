//go:build unix

package engine

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process used so far. Benchmarks report
// it per operation next to the wall time: on a loaded machine the wall time
// includes waiting for a core, the CPU time does not.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
