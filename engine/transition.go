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

var stepNames = [...]string{"stay", "roll", "replan", "pending", "table_full"}

func (s stepKind) String() string {
	if int(s) < len(stepNames) {
		return stepNames[s]
	}
	return "unknown"
}

// transition is the one place that decides how the plan moves: it is a pure
// function of the plan a worker holds, the config, the time and who asks
// (a counted client, a newcomer the table does not hold yet, or one it
// holds that waits). It returns the step and the window the next plan is
// for (the running one for a re-plan).
//
//   - Windows are aligned (WindowAt), so every worker agrees on when a
//     window ends without talking to anyone. The running window ends when
//     the config that planned it says: during a reconfiguration that
//     changes the cycle, old and new configs honour each other's windows
//     instead of re-planning on every request. A time up to one window
//     before the plan's is read as the plan's window: workers read the
//     clock at slightly different moments, and a late read must neither go
//     back to a finished window nor start one. Further back is a clock
//     step: the clock's window is planned afresh, under a new plan id.
//   - An empty plan (no client counted or waiting) is never rolled: there
//     is nothing to share until a newcomer arrives.
//   - A re-plan is wanted by a newcomer's own request, or by a proven (or
//     declared) client waiting (p.pending); unproven newcomers that did
//     not come back want nothing, and the table bound does not count them. Re-plans are at least MinCycle apart, so a flood of new
//     ids costs at most one re-plan per MinCycle, and each re-plan counts
//     at most one unproven newcomer. With no client counted there is
//     nobody to disturb, so the first client never waits.
func transition(p *plan, cfg *Config, now int64, who caller) (stepKind, int64) {
	newcomer := who != callerCounted
	k := windowIndex(now, cfg)
	empty := p.id == 0 || p.n+p.pending == 0
	start, end := planWindow(p, cfg)
	if p.id == 0 || now >= end || now < start-(end-start) {
		if empty && !newcomer {
			return stepStay, p.window
		}
		return stepRoll, k
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

// replanAllowed: MinCycle has passed since the last plan (or the clock went
// back past it), or nobody is counted yet.
func replanAllowed(p *plan, cfg *Config, now int64) bool {
	return p.n == 0 || now-p.at >= int64(cfg.MinCycle) || now < p.at
}

// untilReplan is how long a pending newcomer waits: until the next allowed
// re-plan, or the end of the window if that comes first (the next window's
// plan registers it too).
func untilReplan(p *plan, cfg *Config, now int64) time.Duration {
	return min(clampDuration(p.at+int64(cfg.MinCycle)-now), untilWindowEnd(p, cfg, now))
}

// untilWindowEnd is the time left in the plan's window.
func untilWindowEnd(p *plan, cfg *Config, now int64) time.Duration {
	_, end := planWindow(p, cfg)
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
