//go:build wasm

package host

import "time"

// wallClock is the filter's clock in a wasm VM: one WASI clock_time_get of
// the realtime clock per reading. time.Now also reads the monotonic clock,
// a second host call on every request that the engine has no use for: its
// times are compared across workers, where only wall time means anything.
type wallClock struct{}

const clockRealtime = 0 // WASI clockid

// Now implements engine.Clock.
func (wallClock) Now() time.Time {
	var ns uint64
	if clockTimeGet(clockRealtime, 1, &ns) != 0 {
		return time.Now()
	}
	return time.Unix(0, int64(ns))
}

//go:wasmimport wasi_snapshot_preview1 clock_time_get
//go:noescape
func clockTimeGet(id uint32, precision uint64, ns *uint64) uint32
