package engine

import "time"

// Observer hears about the rare events an operator wants counted or logged.
// None of them happens per admitted request in steady state. Calls come from
// the goroutine that calls the Limiter.
type Observer interface {
	// Rollover: this worker published plan ev.Plan (a new window's, or a
	// re-plan of the running window for newcomers).
	Rollover(ev RolloverEvent)
	// CASRetry: a compare-and-swap lost a race and was retried.
	CASRetry()
	// StoreFailure: the store failed, or CAS retries ran out, on op.
	StoreFailure(op string, err error)
	// ValueReset: an unreadable shared value was found (and is reset by the
	// next plan).
	ValueReset(key string, err error)
	// ClockJump: this worker found the clock behind a window that stopped
	// moving (a clock that ran ahead came back, or stepped back), and
	// opened a window after it, shifting every worker's clock by shift.
	ClockJump(shift time.Duration)
}

// RolloverEvent describes a plan this worker published.
type RolloverEvent struct {
	Plan   uint64 // the plan id: the share period it starts
	Window int64  // the aligned window it plans
	Early  bool   // the same as Replan (the name predates aligned windows)
	Replan bool   // a re-plan of the running window for newcomers
	// Provisional: published without reading the table (a large one), with
	// the parameters of the plan before; Clients, Registered and Forgotten
	// are the plan before's, and Closed is not judged. The plan that
	// replaces it, on a tick, is a re-plan that reads every client.
	Provisional bool
	// Completes: the plan replaces a provisional one with the one read
	// over the table, a slice at a time; not a rollover of its own.
	Completes  bool
	Clients    int // counted in the plan
	Registered int // newcomers counted for the first time
	Forgotten  int // idle clients no longer counted
	// Closed judges the window this plan's roll closed (Judged is false
	// for a re-plan, and for a roll out of a window nobody was counted in).
	Closed WindowFairness
}

// NopObserver ignores every event.
type NopObserver struct{}

func (NopObserver) Rollover(RolloverEvent) {}

func (NopObserver) CASRetry() {}

func (NopObserver) StoreFailure(string, error) {}

func (NopObserver) ValueReset(string, error) {}

func (NopObserver) ClockJump(time.Duration) {}
