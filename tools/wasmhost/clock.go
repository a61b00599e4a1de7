package wasmhost

import (
	"sync"
	"sync/atomic"
	"time"
)

// DefaultStart is where a host's clock starts unless Options.Clock says
// otherwise: a fixed instant, so that runs are reproducible.
var DefaultStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is the time every VM of a host sees through WASI: the wall clock
// (clock_time_get realtime, time.Now in the guest) and the monotonic clock
// (what Go uses for time.Since). It moves only when told, so a test decides
// exactly which cycle each request falls in.
//
// Stepping the wall clock back does not move the monotonic clock back: a real
// host's monotonic clock never decreases, and Go's runtime relies on that.
type Clock struct {
	mu   sync.Mutex // serialises writers; readers use the atomics
	wall atomic.Int64
	mono atomic.Int64
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock {
	c := &Clock{}
	c.wall.Store(start.UnixNano())
	// Start the monotonic clock well above zero: a guest that treats zero as
	// "unset" must not be fooled by a fresh host.
	c.mono.Store(int64(time.Hour))
	return c
}

// Now returns the wall-clock time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.wall.Load()).UTC() }

// Advance moves both clocks forward by d, or only the wall clock back when d
// is negative.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall.Add(int64(d))
	if d > 0 {
		c.mono.Add(int64(d))
	}
}

// Set moves the wall clock to t, and the monotonic clock forward by the same
// amount when t is later.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := t.UnixNano() - c.wall.Load()
	c.wall.Store(t.UnixNano())
	if d > 0 {
		c.mono.Add(d)
	}
}

// walltime and nanotime have the signatures wazero's sys package wants.
func (c *Clock) walltime() (int64, int32) {
	ns := c.wall.Load()
	return ns / 1e9, int32(ns % 1e9)
}

func (c *Clock) nanotime() int64 { return c.mono.Load() }
