package engine

import "time"

// stepKind is what a worker must do at a given time, given the plan it holds.
type stepKind uint8

const (
	// stepStay: the plan holds; decide from it.
	stepStay stepKind = iota
	// stepRoll: the plan's window is over (or the clock stepped back by
	// more than a window): plan the clock's window afresh.
	stepRoll
	// stepReplan: newcomers wait and MinCycle has passed since the last
	// plan: re-plan the rest of the window with them counted in.
	stepReplan
	// stepPending: a newcomer waits for the next allowed re-plan.
	stepPending
	// stepTableFull: a newcomer finds MaxClients clients registered or
	// waiting.
	stepTableFull
	// stepJump: the clock has read behind the plan's window, which did not
	// move, for Cycle + MinCycle: open a window after it (see transition).
	stepJump
)

// caller is who asks transition: it decides what a step may be.
type caller uint8

const (
	// callerCounted: a client the plan counts, a tick, or nobody.
	callerCounted caller = iota
	// callerNew: a client the table does not hold (a newcomer).
	callerNew
	// callerWaiting: a newcomer the table holds, waiting for a plan to
	// count it: the one unproven newcomer a re-plan may count (promote).
	callerWaiting
)

var stepNames = [...]string{"stay", "roll", "replan", "pending", "table_full", "jump"}

func (s stepKind) String() string {
	if int(s) < len(stepNames) {
		return stepNames[s]
	}
	return "unknown"
}

// transition is the one place that decides how the plan moves: it is a pure
// function of the plan a worker holds, the config, the time and who asks
// (a counted client, a newcomer the table does not hold yet, or one it
// holds that waits), and of how long this worker has read its clock
// behind the plan's window (behind, 0 when it is not). It returns the step
// and the window the next plan is for (the running one for a re-plan).
//
// now is the worker's clock reading plus the plan's shift (see jumpShift).
//
//   - Windows are aligned (WindowAt), so every worker agrees on when a
//     window ends without talking to anyone. The running window ends when
//     the config that planned it says: during a reconfiguration that
//     changes the cycle, old and new configs honour each other's windows
//     instead of re-planning on every request.
//   - Windows only move forward. A reading before the plan's window (a
//     late read, a lagging or stepped-back clock) counts in the plan's
//     window: the newest one the store has opened. Only a reading at or
//     past its end opens a new window.
//   - A clock that stays behind while the plan's window does not move for
//     Cycle + MinCycle is a jump: someone's clock ran ahead and opened a
//     window that ends far in the future of every clock now. stepJump
//     opens a new window after it, shifting every worker's clock by whole
//     cycles onto it (jumpShift), so that admissions resume within
//     Cycle + MinCycle of the clock's return and no window opens twice.
//   - An empty plan (no client counted or waiting) is never rolled: there
//     is nothing to share until a newcomer arrives.
//   - A re-plan is wanted by a newcomer's own request, or by a proven (or
//     declared) client waiting (p.pending); unproven newcomers that did
//     not come back want nothing, and the table bound does not count them.
//     Re-plans are at least MinCycle apart, so a flood of new ids costs at
//     most one re-plan per MinCycle, and each re-plan counts at most one
//     unproven newcomer. With no client counted there is nobody to
//     disturb, so the first client never waits.
func transition(p *plan, cfg *Config, now, behind int64, who caller) (stepKind, int64) {
	newcomer := who != callerCounted
	empty := p.id == 0 || p.n+p.pending == 0
	start, end := planWindow(p, cfg)
	if p.id == 0 || now >= end {
		if empty && !newcomer {
			return stepStay, p.window
		}
		return stepRoll, windowIndex(now, cfg)
	}
	if now < start && behind >= int64(cfg.Cycle+cfg.MinCycle) && cfg.Fleet == nil {
		// (In fleet mode the windows are the fleet's, named by Gubernator
		// keys every replica shares: a shifted clock would lease from keys
		// no other replica uses. A clock behind waits for them.)
		return stepJump, p.window
	}
	if who == callerNew && int(p.n)+int(p.pending) >= cfg.MaxClients {
		return stepTableFull, p.window
	}
	if newcomer || p.pending > 0 {
		if replanAllowed(p, cfg, now) {
			return stepReplan, p.window
		}
		if newcomer {
			return stepPending, p.window
		}
	}
	return stepStay, p.window
}

// jumpShift is the clock shift after a jump out of plan p at now (a reading
// before p's window): the smallest whole number of cycles that moves now
// to or past the end of p's window. Whole cycles keep the new windows on
// the wall clock's boundaries.
func jumpShift(p *plan, cfg *Config, now int64) int64 {
	_, end := planWindow(p, cfg)
	c := int64(cfg.Cycle)
	return p.shift + (end-now+c-1)/c*c
}

// replanAllowed: MinCycle has passed since the last plan, or nobody is
// counted yet. (A reading before the plan's time waits like any other: a
// clock that went back is a jump, which opens a window of its own.)
func replanAllowed(p *plan, cfg *Config, now int64) bool {
	return p.n == 0 || now-p.at >= int64(cfg.MinCycle)
}

// untilReplan is how long a pending newcomer waits: until the next allowed
// re-plan, or the end of the window if that comes first (the next window's
// plan registers it too).
func untilReplan(p *plan, cfg *Config, now int64) time.Duration {
	return min(clampDuration(p.at+int64(cfg.MinCycle)-now), untilWindowEnd(p, cfg, now))
}

// untilWindowEnd is the time left in the plan's window. A reading before
// the window (a clock behind the store's newest window) sees at most
// Cycle + MinCycle: by then the window has moved, or the worker jumps.
func untilWindowEnd(p *plan, cfg *Config, now int64) time.Duration {
	start, end := planWindow(p, cfg)
	if now < start {
		return min(clampDuration(end-now), cfg.Cycle+cfg.MinCycle)
	}
	return clampDuration(end - now)
}

// planWindow is the span of the plan's window, as the config that planned
// it defines windows (cfg's, for a plan of none).
func planWindow(p *plan, cfg *Config) (start, end int64) {
	if p.cycle <= 0 {
		return windowStart(p.window, cfg), windowEnd(p.window, cfg)
	}
	start = p.window*p.cycle + p.offset
	return start, start + p.cycle
}

func windowIndex(now int64, cfg *Config) int64 {
	k, _, _ := WindowAt(time.Unix(0, now), cfg.Cycle, cfg.WindowOffset)
	return k
}

func windowStart(k int64, cfg *Config) int64 { return k*int64(cfg.Cycle) + int64(cfg.WindowOffset) }
func windowEnd(k int64, cfg *Config) int64   { return windowStart(k+1, cfg) }

func clampDuration(ns int64) time.Duration {
	if ns < 0 {
		return 0
	}
	return time.Duration(ns)
}
