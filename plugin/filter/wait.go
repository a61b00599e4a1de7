package filter

import (
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// Holding a request instead of refusing it (max_wait). A request the limit
// would refuse, whose unit the engine says comes within max_wait of the
// request's arrival (its Retry-After), is held by the host (the stream is
// paused) and decided again when that time comes, on a tick: admitted then,
// it was granted its unit like any other request; refused again, it is
// held again if its next unit still comes within max_wait, else it gets
// the reply it would have had. The host bounds what it holds per worker
// (max_waiting) and frees a held request whose stream ends.

// The tick of a limit that holds requests: a tenth of max_wait, within
// [minHoldTick, maxHoldTick]. A held request is served at most one tick
// after its unit comes; an idle tick costs a comparison.
const (
	minHoldTick = 10 * time.Millisecond
	maxHoldTick = 50 * time.Millisecond
)

// holdTickPeriod is how often the host should tick for this limit's held
// requests; the housekeeping period when the limit holds nothing.
func (c *Config) holdTickPeriod() time.Duration {
	if c.MaxWait <= 0 {
		return c.HousekeepingPeriod()
	}
	return min(max(c.MaxWait/10, minHoldTick), maxHoldTick)
}

// Hold reports whether the request of the refused outcome o, held for
// waited so far, may be held until its unit comes, and for how long more:
// an over_limit refusal (the client's share, the window's budget, pacing
// or the fair gate), within the limit's max_wait. Not pending: deciding a
// newcomer's request again proves it (view.arrive), and the plugin must
// not prove one-shot ids on their behalf; a genuine newcomer asks again
// itself.
func (f *Filter) Hold(o Outcome, waited time.Duration) (time.Duration, bool) {
	if !o.Matched() || o.Decision.Allowed {
		return 0, false
	}
	c := f.limits[o.Limit].cfg
	if c.MaxWait <= 0 || o.Decision.Reason != engine.ReasonOverLimit {
		return 0, false
	}
	wait := max(o.Decision.RetryAfter, time.Nanosecond)
	if waited+wait > c.MaxWait {
		return 0, false
	}
	return wait, true
}

// MaxWaiting is how many requests one worker may hold for limit i.
func (f *Filter) MaxWaiting(i int) int { return f.limits[i].cfg.MaxWaiting }

// MaxWait is how long limit i may hold a request.
func (f *Filter) MaxWait(i int) time.Duration { return f.limits[i].cfg.MaxWait }

// Now is the filter's clock: a held request's times are read on it.
func (f *Filter) Now() time.Time { return f.clock.Now() }

// Redecide decides a held request again, for the limit and client that
// decided it first (a peer's id was counted then), at its cost. waited and
// promised are carried to the new outcome.
func (f *Filter) Redecide(o Outcome, waited time.Duration) Outcome {
	next := f.limits[o.Limit].decide(f.clock.Now(), "", false, o.Client)
	next.Limit, next.Waited, next.Promised = o.Limit, waited, o.Promised
	return next
}
