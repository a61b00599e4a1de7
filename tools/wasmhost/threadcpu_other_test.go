//go:build !linux

package wasmhost

import "time"

// threadCPU reports false: only Linux gives a thread's CPU time here.
func threadCPU() (time.Duration, bool) { return 0, false }
