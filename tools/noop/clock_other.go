//go:build !wasm

package main

import "time"

// wallClockNanos is the wall clock outside a Wasm VM.
func wallClockNanos() int64 { return time.Now().UnixNano() }
