package engine

import "time"

// Clock tells the time. Engines take one so that tests, the simulator and
// hosts whose clock is fake (the SDK's wasm emulator) drive time explicitly.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now implements Clock.
func (SystemClock) Now() time.Time { return time.Now() }
