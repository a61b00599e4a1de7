package wasmhost

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the CPU time the calling OS thread has used (its goroutine
// locked to it), and true. A callback's share of it is the work it did,
// without the time its thread waited for a core, or in which the
// hypervisor ran another tenant (steal). (getrusage's thread times move in
// scheduler ticks of a few milliseconds; this clock does not.)
func threadCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
