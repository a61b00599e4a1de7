package engine

import (
	"testing"
	"time"
)

// The transition function over synthetic times, like x/time/rate's tests:
// one plan, one config, and the step each (time, caller) pair leads to.
func TestTransition(t *testing.T) {
	cfg := testConfig() // window 10 s, MinCycle 1 s
	cfg.MaxClients = 3
	k := windowIndex(t0.UnixNano(), &cfg)
	ws := windowStart(k, &cfg)
	sec := int64(time.Second)
	running := plan{id: 5, roll: 4, window: k, at: ws + 2*sec, n: 2}
	withPending := running
	withPending.pending = 1
	full := running
	full.n, full.pending = 2, 1
	empty := running
	empty.n = 0
	tests := []struct {
		name   string
		p      plan
		at     int64
		behind int64
		who    caller
		want   stepKind
		window int64
	}{
		{"no plan, nobody", plan{}, ws, 0, callerCounted, stepStay, 0},
		{"no plan, a newcomer starts the clock's window", plan{}, ws + 3*sec, 0, callerNew, stepRoll, k},
		{"empty plan is never rolled", empty, ws + 50*sec, 0, callerCounted, stepStay, k},
		{"empty plan, a newcomer plans the clock's window", empty, ws + 50*sec, 0, callerNew, stepRoll, k + 5},
		{"inside the window", running, ws + 9*sec, 0, callerCounted, stepStay, k},
		{"last nanosecond of the window", running, ws + 10*sec - 1, 0, callerCounted, stepStay, k},
		{"the deadline rolls", running, ws + 10*sec, 0, callerCounted, stepRoll, k + 1},
		{"long after the deadline rolls to the clock's window", running, ws + 35*sec, 0, callerCounted, stepRoll, k + 3},
		{"a small step back stays in the plan's window", running, ws - 5*sec, 0, callerCounted, stepStay, k},
		{"a step back past a window stays in the plan's window", running, ws - 15*sec, 0, callerCounted, stepStay, k},
		{"behind the window for less than Cycle+MinCycle stays", running, ws - 15*sec, 11*sec - 1, callerCounted, stepStay, k},
		{"behind the window that did not move for Cycle+MinCycle jumps", running, ws - 15*sec, 11 * sec, callerCounted, stepJump, k},
		{"a late read inside the window is not behind", running, ws + sec, 11 * sec, callerCounted, stepStay, k},
		{"newcomer within MinCycle waits", running, ws + 2500*int64(time.Millisecond), 0, callerNew, stepPending, k},
		{"newcomer after MinCycle re-plans", running, ws + 3*sec, 0, callerNew, stepReplan, k},
		{"newcomer at the deadline rolls", running, ws + 10*sec, 0, callerNew, stepRoll, k + 1},
		{"newcomer finds the table full", full, ws + 3*sec, 0, callerNew, stepTableFull, k},
		{"proven newcomers re-plan on a tick after MinCycle", withPending, ws + 3*sec, 0, callerCounted, stepReplan, k},
		{"proven newcomers hold within MinCycle", withPending, ws + 2*sec + 1, 0, callerCounted, stepStay, k},
		{"a waiting newcomer's own request re-plans after MinCycle", withPending, ws + 3*sec, 0, callerWaiting, stepReplan, k},
		{"a waiting newcomer's own request within MinCycle waits", withPending, ws + 2*sec + 1, 0, callerWaiting, stepPending, k},
		{"a waiting newcomer already holds its room in a full table", full, ws + 3*sec, 0, callerWaiting, stepReplan, k},
		{"nobody counted: the first newcomer never waits", plan{id: 1, roll: 1, window: k, at: ws + 9*sec, pending: 1}, ws + 9*sec, 0, callerNew, stepReplan, k},
		{"a reading before the plan's time waits for MinCycle like any other", running, ws + sec, 0, callerNew, stepPending, k},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			step, w := transition(&tt.p, &cfg, tt.at, tt.behind, tt.who)
			if step != tt.want || w != tt.window {
				t.Fatalf("transition = %s, window %d; want %s, window %d", step, w-k, tt.want, tt.window-k)
			}
		})
	}
}

// TestFairReplansAfterTheRoll: under the fair policy a newcomer need not
// wait for MinCycle after the window's own plan, but does after a re-plan;
// under the seed it waits after either.
func TestFairReplansAfterTheRoll(t *testing.T) {
	cfg := testConfig() // window 10 s, MinCycle 1 s
	k := windowIndex(t0.UnixNano(), &cfg)
	ws := windowStart(k, &cfg)
	sec := int64(time.Second)
	roll := plan{id: 4, roll: 4, window: k, at: ws, n: 2}
	replanned := plan{id: 5, roll: 4, window: k, at: ws + sec/2, n: 3, replan: true}
	for _, tt := range []struct {
		name   string
		policy Policy
		p      plan
		want   stepKind
	}{
		{"fair, after the window's own plan", Fair{}, roll, stepReplan},
		{"fair, after a re-plan", Fair{}, replanned, stepPending},
		{"seed, after the window's own plan", Seed{}, roll, stepPending},
		{"static, after the window's own plan", Static{}, roll, stepPending},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg.Policy = tt.policy
			if step, _ := transition(&tt.p, &cfg, ws+sec*3/4, 0, callerNew); step != tt.want {
				t.Fatalf("transition = %s, want %s", step, tt.want)
			}
		})
	}
}

// FuzzTransition: any plan, time and caller give a step without panicking,
// and the step's window is the clock's for a roll, and later than the
// plan's, and the plan's otherwise; only a newcomer is ever told to wait or
// that the table is full.
func FuzzTransition(f *testing.F) {
	f.Add(uint64(5), int64(100), int64(1000), uint32(2), uint32(1), int64(1005), true, int64(0))
	f.Add(uint64(0), int64(0), int64(0), uint32(0), uint32(0), int64(-1), false, int64(0))
	f.Add(uint64(5), int64(100), int64(1000), uint32(2), uint32(1), int64(500), false, int64(20_000))
	f.Fuzz(func(t *testing.T, id uint64, window, at int64, n, pending uint32, nowSec int64, newcomer bool, behindMs int64) {
		cfg := testConfig()
		p := plan{id: id, roll: id, window: window % maxWindow, at: at, n: n % 10, pending: pending % 10}
		now := (nowSec % (1 << 40)) * int64(time.Millisecond)
		who := caller(uint64(id) % 3)
		if !newcomer {
			who = callerCounted
		}
		behind := max(0, behindMs%(1<<40)) * int64(time.Millisecond)
		step, w := transition(&p, &cfg, now, behind, who)
		switch step {
		case stepRoll:
			if w != windowIndex(now, &cfg) {
				t.Fatalf("roll to window %d, clock's is %d", w, windowIndex(now, &cfg))
			}
			if p.id != 0 && w <= p.window {
				t.Fatalf("roll from window %d back to %d", p.window, w)
			}
		case stepJump:
			if start, _ := planWindow(&p, &cfg); now >= start || behind < int64(cfg.Cycle+cfg.MinCycle) {
				t.Fatalf("jump at %d (window from %d) after %d behind", now, start, behind)
			}
		case stepPending, stepTableFull:
			if who == callerCounted || (step == stepTableFull && who != callerNew) {
				t.Fatalf("%s for a %d caller", step, who)
			}
			fallthrough
		default:
			if w != p.window {
				t.Fatalf("%s names window %d, plan's is %d", step, w, p.window)
			}
		}
	})
}
