package filter

import (
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// Which refusals are held, and for how long: over_limit only, while its
// unit comes within max_wait of the request's arrival.
func TestHold(t *testing.T) {
	f, _ := mustFilter(t, `{"capacity": 10, "cycle": "10s", "max_wait": "2s"}`)
	none, _ := mustFilter(t, `{"capacity": 10, "cycle": "10s"}`)
	refused := func(r engine.Reason, after time.Duration) Outcome {
		return Outcome{Decision: engine.Decision{Reason: r, RetryAfter: after}, Client: "a"}
	}
	for _, c := range []struct {
		name   string
		f      *Filter
		o      Outcome
		waited time.Duration
		wait   time.Duration
		held   bool
	}{
		{"over_limit, its unit in 1.5 s", f, refused(engine.ReasonOverLimit, 1500*time.Millisecond), 0, 1500 * time.Millisecond, true},
		{"over_limit, its unit exactly at max_wait", f, refused(engine.ReasonOverLimit, 2*time.Second), 0, 2 * time.Second, true},
		{"over_limit, its unit past max_wait", f, refused(engine.ReasonOverLimit, 2001*time.Millisecond), 0, 0, false},
		{"held 1.5 s already, its next unit 0.6 s away", f, refused(engine.ReasonOverLimit, 600*time.Millisecond), 1500 * time.Millisecond, 0, false},
		{"held 1.5 s already, its next unit 0.5 s away", f, refused(engine.ReasonOverLimit, 500*time.Millisecond), 1500 * time.Millisecond, 500 * time.Millisecond, true},
		{"pending: the newcomer asks again itself", f, refused(engine.ReasonPending, 100*time.Millisecond), 0, 0, false},
		{"table_full", f, refused(engine.ReasonTableFull, 100*time.Millisecond), 0, 0, false},
		{"admitted", f, Outcome{Decision: engine.Decision{Allowed: true, Reason: engine.ReasonOK}}, 0, 0, false},
		{"no limit decided", f, Outcome{Limit: -1}, 0, 0, false},
		{"max_wait 0: never", none, refused(engine.ReasonOverLimit, time.Millisecond), 0, 0, false},
	} {
		wait, held := c.f.Hold(c.o, c.waited)
		if held != c.held || wait != c.wait {
			t.Errorf("%s: (%v, %t), want (%v, %t)", c.name, wait, held, c.wait, c.held)
		}
	}
}

// The tick comes every tenth of the shortest max_wait, within [10 ms,
// 50 ms]; housekeeping keeps its period.
func TestHoldTickPeriod(t *testing.T) {
	for _, c := range []struct {
		config             string
		tick, housekeeping time.Duration
	}{
		{`{"capacity": 10, "cycle": "10s"}`, time.Second, time.Second},
		{`{"capacity": 10, "cycle": "10s", "max_wait": "300ms"}`, 30 * time.Millisecond, time.Second},
		{`{"capacity": 10, "cycle": "10s", "max_wait": "5s"}`, 50 * time.Millisecond, time.Second},
		{`{"capacity": 10, "cycle": "10s", "max_wait": "20ms"}`, 10 * time.Millisecond, time.Second},
		{`{"capacity": 10, "cycle": "10s", "limits": [{"name": "a", "max_wait": "3s", "match": {"path_prefix": "/a"}}, {"name": "b", "cycle": "2s"}]}`, 50 * time.Millisecond, 200 * time.Millisecond},
	} {
		f, _ := mustFilter(t, c.config)
		if f.TickPeriod() != c.tick || f.HousekeepingPeriod() != c.housekeeping {
			t.Errorf("%s: tick %v, housekeeping %v; want %v, %v", c.config, f.TickPeriod(), f.HousekeepingPeriod(), c.tick, c.housekeeping)
		}
	}
}
