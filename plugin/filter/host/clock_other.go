//go:build !wasm

package host

import "time"

// wallClock is the filter's clock; natively (tests under the SDK's
// emulator) it is time.Now.
type wallClock struct{}

// Now implements engine.Clock.
func (wallClock) Now() time.Time { return time.Now() }
