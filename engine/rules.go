package engine

// The engine's pure rules. None of them takes a Store: each is a function
// of explicit times and of values read before (a plan, an entry, a record),
// so that every worker that applies one to the same values decides the
// same. In order:
//
//   - the transition: which step a worker takes at a given time (stay,
//     roll, jump, re-plan, hold or refuse a newcomer), and window
//     arithmetic;
//   - shares: how a plan is computed from every client's entry, how one
//     client's share follows from the plan and its own entry, and the
//     newcomer rules (an unproven newcomer, asking again, expiry);
//   - the policies (Seed, Static, Fair) with weights, and Fair's borrow
//     gate with its late level;
//   - pacing arithmetic, and how a lease is sized;
//   - fleet sizing: how the syncer sizes a process's leases;
//   - the client id's hash.

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"
)

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
	// callerCounted: a client the plan counts, or nobody.
	callerCounted caller = iota
	// callerNew: a client the table does not hold (a newcomer).
	callerNew
	// callerWaiting: a newcomer the table holds, waiting for a plan to
	// count it: the one unproven newcomer a re-plan may count (promote).
	callerWaiting
	// callerTick: a tick, which is what plans over a large table (see
	// provisional); otherwise as callerCounted.
	callerTick
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
//     disturb, so the first client never waits. Under the fair policy the
//     window's first re-plan need not wait for MinCycle after the window's
//     own plan (see replanAllowed): one more per window.
func transition(p *plan, cfg *Config, now, behind int64, who caller) (stepKind, int64) {
	newcomer := who == callerNew || who == callerWaiting
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
	if p.provisional && who == callerTick {
		return stepReplan, p.window
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
//
// Under a lender policy (Fair) a window's first re-plan may also follow
// its own plan at once. A counted newcomer's limit is the capacity and its
// guarantee the default share, whatever it has shown, so counting the one
// whose request makes the re-plan costs it nothing, while waiting costs it
// its first requests (and a window with capacity free refuses them). Under
// a partition (Seed, Static) counting re-splits the window: the seed sizes
// a newcomer promoted at its first request from the one request it has
// shown for the rest of the window, where asking again would have had it
// counted at the default share, and the static split hands a one-shot id
// a whole share. There the wait is the better deal.
func replanAllowed(p *plan, cfg *Config, now int64) bool {
	if p.n == 0 || now-replanBase(p, cfg) >= int64(cfg.MinCycle) {
		return true
	}
	_, lends := cfg.policy().(lender)
	return lends && !p.replan
}

// replanBase is when the MinCycle before the next re-plan starts: a
// re-plan's publication, or the start of the window a roll opened. (A roll
// made late, by the first request after a quiet start, does not hold the
// window's first re-plan back: a newcomer told to come back MinCycle into
// the window finds it allowed, whoever rolled.)
func replanBase(p *plan, cfg *Config) int64 {
	if p.id != p.roll {
		return p.at // a re-plan
	}
	start, _ := planWindow(p, cfg)
	return min(p.at, start)
}

// untilReplan is how long a pending newcomer waits: until the next allowed
// re-plan. When the window ends first, a newcomer that asks again at the
// next window's start is proven then, and counted by that window's first
// re-plan: at once under a lender policy, MinCycle into the window under a
// partition (the roll itself counts only clients proven before it).
func untilReplan(p *plan, cfg *Config, now int64) time.Duration {
	end := untilWindowEnd(p, cfg, now)
	if next := clampDuration(replanBase(p, cfg) + int64(cfg.MinCycle) - now); next <= end {
		return next
	}
	if _, lends := cfg.policy().(lender); lends {
		return end
	}
	return end + cfg.MinCycle
}

// retryAt is what a refusal knows of when more may come: when the
// client's next unit accrues (Unix ns; 0: not in this window), whether
// the window's budget is spent, as far as the worker saw, and, for
// table_full, whether the table has room (the places a newcomer may take
// in its home bucket were what was full).
type retryAt struct {
	accrues int64
	turn    int64 // paced: the client's turn at the pacer (turnAt), which may be in the next window; 0: none
	spent   bool
	room    bool
}

// retryAfter is how long a request refused for reason at t should wait
// before a retry can succeed at the earliest (Decision.RetryAfter):
//
//   - over_limit: until the client's next unit accrues (the fair policy's
//     borrow gate, pacing, or in fleet mode the next lease), else until
//     the window's end: its share, or the window's budget, is spent;
//     paced, until its turn at the pacer, which may be in the next window;
//   - pending: until the re-plan that can count it (min_cycle after the
//     last one), or the window's end when the window's budget is spent,
//     since a newcomer counted then gets nothing before it; a newcomer
//     whose next unit is known (accrues) waits for that;
//   - table_full with room in the table: until the next re-plan allowed,
//     which counts a newcomer that asked again (its retry proves it);
//   - table_full, too_many_ids: until the window's end, when the next plan
//     forgets idle clients and every peer's ids start afresh;
//   - contended: briefly, min_cycle at most: nothing was wrong but a race;
//   - store_failure: one second.
func retryAfter(reason Reason, p *plan, cfg *Config, t int64, at retryAt) time.Duration {
	end := untilWindowEnd(p, cfg, t)
	switch reason {
	case ReasonOverLimit, ReasonPending:
		if at.turn > t {
			return min(time.Duration(at.turn-t), time.Duration(turnHorizon(cfg)))
		}
		if at.accrues > t {
			return min(time.Duration(at.accrues-t), end)
		}
		if reason == ReasonPending && !at.spent {
			return untilReplan(p, cfg, t)
		}
		return end
	case ReasonTableFull:
		if at.room {
			return untilReplan(p, cfg, t)
		}
	case ReasonContended:
		return min(cfg.MinCycle, max(end, time.Millisecond))
	case ReasonStoreFailure:
		return time.Second
	}
	return end
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

// WindowAt returns the aligned window that t falls in: window k spans
// [k·cycle + offset, (k+1)·cycle + offset) on the Unix epoch. Every worker and
// every replica with the same cycle and offset agrees on it without talking
// to anyone, and the end of the running window never moves. cycle must be
// positive.
func WindowAt(t time.Time, cycle, offset time.Duration) (index int64, start, end time.Time) {
	ns := t.UnixNano() - int64(offset)
	c := int64(cycle)
	index = ns / c
	if ns%c < 0 { // floor division for times before the epoch
		index--
	}
	startNs := index*c + int64(offset)
	return index, time.Unix(0, startNs), time.Unix(0, startNs+c)
}

// Shares: how a plan is computed from every client's entry (once per plan,
// O(clients)), and how one client's share follows from the plan and its own
// entry alone (once per client and plan, O(1)). The second uses exactly the
// arithmetic of the first, so every worker that derives a share gets the
// roller's number.

// planResetJump is how far a plan id jumps when an unreadable plan is
// replaced: ids must never be reused, and other workers may hold a later
// plan than anything the resetting worker can see.
const planResetJump = 1 << 20

// registered reports whether e is counted in plan p. A declared or proven
// entry is counted from the plan after the one it was (re-)written under
// (created), so the roller of p could see it. An unproven newcomer that
// waits is counted only by a plan that promoted it (names it); the first
// sync under that plan gives
// the entry a plan id, and from then on it is counted like any other.
// Every worker decides this from p and e alone.
func registered(e *entry, p *plan) bool {
	if waitingUnproven(e) {
		return e.hash == p.promoted && e.created < p.id
	}
	return e.created < p.id
}

// waitingUnproven: a newcomer seen once that no plan has counted yet.
func waitingUnproven(e *entry) bool { return e.tries == 1 && e.plan == 0 }

// askedAgain reports whether a client that entered unproven has asked for
// more than the request it was first seen with (prev, in its first
// window), or for anything in a later window: it is then proven (tries 2),
// and counts as any client from the next plan on.
func askedAgain(e *entry, cfg *Config) bool {
	if e.window != windowIndex(e.since, cfg) {
		return e.demand > 0
	}
	return float64(e.demand) > e.prev
}

// reclaimable reports whether an unproven newcomer's entry is over: its
// window ended without a plan counting it. Its place may be reused, and
// the table bound no longer counts it.
func reclaimable(e *entry, p *plan) bool {
	return waitingUnproven(e) && !registered(e, p) && e.window < p.window
}

// expired reports whether a client has been idle for more than IdleCycles
// windows at p's window: it is then no longer counted, and its entry may be
// reused. It is a function of the plan's window, so every worker agrees.
//
// A client that entered unproven (tries 1) and has shown nothing since is
// forgotten after one idle window rather than IdleCycles: a one-shot id
// promoted by a re-plan is counted in its window and the next, not for
// IdleCycles more, so a flood keeps few of them counted at a time.
func expired(e *entry, p *plan, cfg *Config) bool {
	idle := int64(cfg.IdleCycles)
	if e.tries == 1 {
		idle = min(idle, 1)
	}
	return p.window-e.active > idle
}

// oneShotPlans is how many MinCycle a client that entered unproven and
// has shown nothing since stays counted at most (see retired).
const oneShotPlans = 20

// retired reports whether a client that entered unproven (tries 1) and
// has shown nothing since is no longer counted in p, though its window is
// not over: p was published more than oneShotPlans × MinCycle after it
// arrived. Re-plans promote at most one such id per MinCycle, so a flood
// keeps at most about oneShotPlans of them counted at a time, in windows
// of a day as of a second (expired bounds it by windows, which a long
// window makes hours). A retired entry keeps its place until its window
// ends, with what it was granted in it: if its client asks again, it is
// proven (see view.arrive) and keeps to its share and cap in the window.
// Only a declared or proven client may take that place before (view.place),
// so that a flood of one-shot ids locks no newcomer out: its proof finds
// room.
func retired(e *entry, p *plan, cfg *Config) bool {
	return e.tries == 1 && p.at-e.since > oneShotPlans*int64(cfg.MinCycle)
}

// counted is registered, and neither expired nor retired.
func counted(e *entry, p *plan, cfg *Config) bool {
	return registered(e, p) && !expired(e, p, cfg) && !retired(e, p, cfg)
}

// isNew reports whether e counts as demanding the default share in p: it
// was registered by the plan that opened p's window or by a later one, so
// it has no full window of demand behind it.
func isNew(e *entry, p *plan) bool { return e.created+1 >= p.roll }

// demandOf is the full-window demand e's share in p's window is computed
// from: the demand of the previous window, scaled up when the client
// arrived during it (by cycle/elapsed, with elapsed at least MinCycle;
// not for a client that entered unproven). Once the entry's
// counters moved to p's window, the value frozen then (prev) is used.
func demandOf(e *entry, p *plan, cfg *Config) float64 {
	switch e.window {
	case p.window:
		return e.prev
	case p.window - 1:
		d := float64(e.demand)
		// An arrival in the first 1/1024 of the window counts as a whole
		// window: RegisterAt spaces the clients it declares a nanosecond
		// apart (their registration order breaks rounding ties), and that
		// must not scale their demand.
		// A client that entered unproven has shown a count, not a rate: its
		// demand is not extrapolated to the whole window.
		if start := windowStart(e.window, cfg); e.tries != 1 && e.since-start >= int64(cfg.Cycle)/1024 {
			elapsed := max(windowEnd(e.window, cfg)-e.since, int64(cfg.MinCycle))
			d *= float64(cfg.Cycle) / float64(elapsed)
		}
		return d
	}
	return 0
}

// fullShare is e's integer share of p's whole window: the policy's cap for
// its demand, rounded by p's largest-remainder threshold.
func fullShare(pol compactPolicy, p *plan, e *entry, cfg *Config) int64 {
	d, w := demandOf(e, p, cfg), cfg.weightOf(e.hash)
	if isNew(e, p) {
		d = newDemand(w*p.params[0], shown(e)) // p.params[0] is the default share per weight unit, C/W, for every policy
	}
	most := cfg.mostOf(e.hash)
	return roundCap(spreadCap(p, weightedCap(pol, &p.params, d, w, most), most), most, e.since, e.hash, p)
}

// spreadCap is a client's cap c, at most most, under p's spread (see
// spreadCaps): the one formula both a plan and a worker apply.
func spreadCap(p *plan, c, most float64) float64 {
	return min(most, p.spread*max(0, sanitize(c)))
}

// shown is what a newcomer that entered unproven has shown: the units it
// asked for while it waited (frozen in prev, which a new client's share
// does not otherwise read). -1 for any other client.
func shown(e *entry) float64 {
	if e.tries == 1 {
		return e.prev
	}
	return -1
}

// newDemand is the demand a client counts at in the window it was
// registered in: the default share def, as the seed promises, except that
// a newcomer that entered unproven counts at no more than what it has
// shown. A one-shot id is then a client with a surplus: it keeps the
// reservation and gives the rest of def back to those who want more, so a
// flood of them cannot dilute anyone's share by more than the
// reservations it holds.
func newDemand(def, shown float64) float64 {
	if shown < 0 {
		return def
	}
	return min(shown, def)
}

// roundCap rounds a client's cap c by p's largest-remainder threshold, to
// at most the capacity and its own cap most (a client at its cap does not
// round up).
func roundCap(c, most float64, since int64, hash uint64, p *plan) int64 {
	c = max(0, sanitize(c))
	f := math.Floor(c)
	if roundsUp(c-f, since, hash, p) {
		f++
	}
	return int64(min(min(f, float64(p.capacity)), most))
}

// roundsUp reports whether a client's cap rounds up under p's largest
// remainder threshold. Clients are ordered "larger fraction first, then
// earlier arrival (registration order), then lower hash", and the first
// capacity − Σfloor of them round up: the threshold is the last of those.
func roundsUp(frac float64, since int64, hash uint64, p *plan) bool {
	if p.provisional {
		// A provisional plan's threshold was computed over other caps:
		// there a client rounds up with a chance of its fraction instead,
		// drawn from its hash and the window (the same clients are not
		// favoured window after window), so that the shares sum to about
		// the capacity whatever the caps.
		return frac > float64(mixWord(hash, uint64(p.window))>>11)/(1<<53)
	}
	return before(frac, since, hash, p.thrFrac, p.thrSince, p.thrHash) ||
		(frac == p.thrFrac && since == p.thrSince && hash == p.thrHash)
}

// before is the rounding order: larger fraction, then earlier arrival,
// then lower hash.
func before(fa float64, sa int64, ha uint64, fb float64, sb int64, hb uint64) bool {
	if fa != fb {
		return fa > fb
	}
	if sa != sb {
		return sa < sb
	}
	return ha < hb
}

// allowance is what a client with the given full-window share, having been
// granted granted units of the window already, may still take under p.
func allowance(p *plan, full, granted int64) int64 {
	want := full - granted
	if want <= 0 {
		return 0
	}
	if p.scale >= 1 {
		return want
	}
	return int64(float64(want) * p.scale)
}

// rebase brings e to plan p (p.id > e.plan, e counted in p): it moves the
// counters to p's window when they belong to another one, freezing the
// demand the window's shares are computed from, and sets the share. The
// share is granted + allowance, so granted ≤ share holds after a rebase as
// before it.
func rebase(e *entry, p *plan, pol compactPolicy, cfg *Config) {
	if e.window != p.window {
		e.prev = demandOf(e, p, cfg)
		e.lastDemand, e.lastGranted = 0, 0
		if e.window == p.window-1 {
			e.lastDemand, e.lastGranted = e.demand, e.granted
		}
		e.window, e.granted, e.demand = p.window, 0, 0
	}
	e.share = e.granted + allowance(p, fullShare(pol, p, e, cfg), e.granted)
	e.plan = p.id
}

// planScratch holds a (re-)plan's per-client inputs, reused across plans.
type planScratch struct {
	hashes  []uint64
	since   []int64
	demands []float64
	isNew   []bool
	shown   []float64
	weights []float64
	mosts   []float64 // caps (rules.go, Caps), +Inf for an uncapped client
	granted []int64
	caps    []float64 // computePlan's: demands as counted, then the caps' floors
	fracs   []float64
	order   []int
	closed  closedScratch
}

func (s *planScratch) reset() {
	s.truncate(0, 0)
}

// truncate drops the clients recorded after the first n (and, of the
// window a roll closes, after the first c).
func (s *planScratch) truncate(n, c int) {
	s.hashes, s.since, s.demands, s.isNew, s.shown, s.granted = s.hashes[:n], s.since[:n], s.demands[:n], s.isNew[:n], s.shown[:n], s.granted[:n]
	s.weights, s.mosts = s.weights[:n], s.mosts[:n]
	s.closed.demands, s.closed.weights, s.closed.granted = s.closed.demands[:c], s.closed.weights[:c], s.closed.granted[:c]
}

// closedScratch holds what each client counted in the window a roll closes
// asked for and was granted in it, for judgeWindow.
type closedScratch struct {
	demands, weights, granted []float64
	order                     []int // judging's level search
}

// add records e, counted in cur, the plan of the window being closed.
func (c *closedScratch) add(e *entry, cur *plan, cfg *Config) {
	var d, g float64
	switch e.window {
	case cur.window:
		d, g = float64(e.demand), float64(e.granted)
	case cur.window + 1: // moved on since (a plan read in slices, after its window opened)
		d, g = float64(e.lastDemand), float64(e.lastGranted)
	}
	c.demands = append(c.demands, min(d, cfg.mostOf(e.hash))) // a cap bounds what a client may ask
	c.weights = append(c.weights, cfg.weightOf(e.hash))
	c.granted = append(c.granted, g)
}

// WindowFairness is how a window's capacity went among its clients, as the
// worker that rolled past it judged from the shared table: what each
// counted client asked for in it (its demand, as written back by then) and
// was granted (leases included). Nothing in it names a client.
type WindowFairness struct {
	Judged bool // a roll closed a window that counted clients; the rest is zero otherwise
	// Lent: units of equal shares (capacity × weight / total weight) that
	// the clients granted less left to the others; Borrowed: units clients
	// were granted beyond their equal share.
	Lent, Borrowed int64
	// HeldBelow: clients granted less than they asked for.
	HeldBelow int
	// Jain is Jain's fairness index, (Σx)² / (n·Σx²), of xᵢ = grantedᵢ /
	// fairᵢ over the clients that asked for anything, where fairᵢ is the
	// max-min (water-filling, weighted) split of the capacity over their
	// demands: 1 when every client got its max-min share, 1/n when one got
	// everything. 1 when nobody asked.
	Jain float64
}

// judgeWindow judges a closed window of the given capacity from what its
// counted clients asked for and were granted (see WindowFairness).
func judgeWindow(capacity int64, c *closedScratch) WindowFairness {
	var j judging
	j.start(capacity, c)
	j.step(math.MaxInt)
	return j.out
}

// judging is judgeWindow a step at a time, like planMath: the clients'
// total weight, what they lent and borrowed, the water level (a search),
// then Jain's index. out holds the judgment once done.
type judging struct {
	c                     *closedScratch
	capacity              float64
	phase                 int // 0 … 3 as above, 4 done
	i                     int
	total, lent, borrowed float64
	level                 levelSearch
	fair                  float64 // the level found
	sum, squares          float64
	asked                 int
	out                   WindowFairness
}

func (j *judging) start(capacity int64, c *closedScratch) {
	*j = judging{c: c, capacity: float64(capacity)}
	if len(c.demands) == 0 {
		j.phase = 4
		return
	}
	j.out = WindowFairness{Judged: true, Jain: 1}
}

func (j *judging) done() bool { return j.phase == 4 }

// step does at most budget client operations (at least one) and reports
// whether the judgment is done.
func (j *judging) step(budget int) bool {
	c, n := j.c, len(j.c.demands)
	budget = max(budget, 1)
	for budget > 0 && !j.done() {
		if j.phase == 2 {
			if budget = j.level.step(budget); j.level.done() {
				j.fair, j.phase = j.level.result(), 3
			}
			continue
		}
		end := j.i + min(budget, n-j.i)
		for i := j.i; i < end; i++ {
			switch g, w := c.granted[i], c.weights[i]; j.phase {
			case 0:
				j.total += w
			case 1:
				even := j.capacity * w / j.total
				j.lent += max(0, even-g)
				j.borrowed += max(0, g-even)
				if g < c.demands[i] {
					j.out.HeldBelow++
				}
			case 3:
				d := c.demands[i]
				fair := w * min(sanitize(d)/w, j.fair)
				if d <= 0 || fair <= 0 {
					continue
				}
				x := g / fair
				j.sum, j.squares, j.asked = j.sum+x, j.squares+x*x, j.asked+1
			}
		}
		budget -= end - j.i
		if j.i = end; end < n {
			break
		}
		j.i = 0
		switch j.phase {
		case 0:
			j.total = max(j.total, 1e-9) // (as totalWeight)
		case 1:
			// (Rounded to the nearest unit: equal shares are fractions.)
			j.out.Lent, j.out.Borrowed = int64(math.Round(j.lent)), int64(math.Round(j.borrowed))
			j.level.start(j.capacity, c.demands, c.weights, &c.order)
		case 3:
			if j.asked > 0 && j.squares > 0 {
				j.out.Jain = j.sum * j.sum / (float64(j.asked) * j.squares)
			} else if j.asked > 0 {
				j.out.Jain = 0 // every client that asked was granted nothing
			}
		}
		j.phase++
	}
	return j.done()
}

// add records one client counted in the plan being computed.
func (s *planScratch) add(e *entry, next *plan, cfg *Config) {
	s.hashes = append(s.hashes, e.hash)
	s.since = append(s.since, e.since)
	s.demands = append(s.demands, demandOf(e, next, cfg))
	s.isNew = append(s.isNew, isNew(e, next))
	s.shown = append(s.shown, shown(e))
	s.weights = append(s.weights, cfg.weightOf(e.hash))
	s.mosts = append(s.mosts, cfg.mostOf(e.hash))
	g := int64(0)
	if e.window == next.window {
		g = e.granted
	}
	s.granted = append(s.granted, g)
}

// Computing a plan takes a handful of passes over the clients a scan
// recorded (planScratch). Over a large table they are cut into steps, so
// that a plan read in slices (view.slice) is computed across ticks too:
// planMath is the computation as a state machine, each of whose passes
// resumes from an index and the sums so far, and computePlan runs it to
// the end at once. The same arithmetic either way, in the same order.

// mathPhase is the pass a planMath is in.
type mathPhase uint8

const (
	phaseWeight mathPhase = iota // W, the clients' total weight
	phaseDemand                  // each client's demand as counted: its cap's input
	phaseParams                  // the policy's parameters (fair: the level, a search)
	phaseAbove                   // fair: the clients wanting more than the level
	phaseCaps                    // each client's real-valued cap
	phaseSpread                  // a partition's spread, a round at a time
	phaseFloors                  // each cap's floor and fraction
	phaseRound                   // the largest-remainder threshold: a selection
	phaseWant                    // what the clients still want: a partition's scale
	phaseDone
)

// planMath computes next's parameters from the clients in s (see
// computePlan), a step at a time.
type planMath struct {
	next           plan
	s              *planScratch
	pol            compactPolicy
	capacity, left int64
	phase          mathPhase
	i              int // the next client of the pass
	weight, def    float64
	seed           seedSums
	level          levelSearch
	above          float64
	expected       float64 // the fair policy's fairExpected: what the clients are owed
	ahead          bool    // the clients may take after the scan read them, before the plan is in force (planOwes)
	spread         spreadRounds
	floors, want   int64
	sel            selection
}

// start sets m to compute next's parameters from s; capacity is what the
// shares split, left what remains of the window's budget.
func (m *planMath) start(next *plan, s *planScratch, pol compactPolicy, capacity, left int64) {
	*m = planMath{next: *next, s: s, pol: pol, capacity: capacity, left: left}
	n := len(s.hashes)
	p := &m.next
	p.capacity, p.n = capacity, uint32(n)
	p.thrFrac, p.thrSince, p.thrHash, p.scale, p.spread = 2, 0, 0, 1, 1
	if n == 0 {
		p.params = pol.params(capacity, nil, nil, nil)
		m.phase = phaseDone
		return
	}
	s.caps = resizeFloats(s.caps, n)
	s.fracs = resizeFloats(s.fracs, n)
}

// step does at most budget client operations (at least one) and reports
// whether the plan is computed: m.next then holds it.
func (m *planMath) step(budget int) bool {
	budget = max(budget, 1)
	for budget > 0 && m.phase != phaseDone {
		budget = m.stepPhase(budget)
	}
	return m.phase == phaseDone
}

// pass applies f to the pass's clients from m.i on, at most budget of
// them, and returns the budget left and whether the pass is over (m.i is
// then 0 again, for the next).
func (m *planMath) pass(budget int, f func(i int)) (int, bool) {
	n := len(m.s.hashes)
	end := m.i + min(budget, n-m.i)
	for i := m.i; i < end; i++ {
		f(i)
	}
	budget -= end - m.i
	if m.i = end; end < n {
		return budget, false
	}
	m.i = 0
	return budget, true
}

func (m *planMath) stepPhase(budget int) int {
	s, p, c := m.s, &m.next, float64(m.capacity)
	var over bool
	switch m.phase {
	case phaseWeight:
		if budget, over = m.pass(budget, func(i int) { m.weight += s.weights[i] }); over {
			m.def = c / max(m.weight, 1e-9) // per weight unit
			m.phase = phaseDemand
		}
	case phaseDemand:
		if budget, over = m.pass(budget, func(i int) {
			d := s.demands[i]
			if s.isNew[i] {
				d = newDemand(s.weights[i]*m.def, s.shown[i])
			}
			s.caps[i] = min(sanitize(d), s.mosts[i])
		}); over {
			m.phase = phaseParams
			switch pol := m.pol.(type) {
			case Seed:
				m.seed = seedSums{def: m.def, floor: m.def * clamp01(pol.Reservation)}
			case Fair:
				m.level.start(c, s.caps, s.weights, &s.order)
			default:
				p.params = policyParams{m.def}
				m.phase = phaseCaps
			}
		}
	case phaseParams:
		switch m.pol.(type) {
		case Seed:
			if budget, over = m.pass(budget, func(i int) { m.seed.add(s.caps[i], s.weights[i], s.mosts[i]) }); over {
				p.params = m.seed.params()
				m.phase = phaseCaps
			}
		case Fair:
			if budget = m.level.step(budget); m.level.done() {
				m.phase = phaseAbove
			}
		}
	case phaseAbove:
		level := m.level.result()
		if budget, over = m.pass(budget, func(i int) {
			if sanitize(s.caps[i])/s.weights[i] > level {
				m.above++
			}
			m.expected += float64(planOwes(m.def, s.weights[i], s.demands[i], s.mosts[i], s.granted[i], m.ahead))
		}); over {
			p.params = policyParams{m.def, level, c, m.above, m.expected}
			m.phase = phaseCaps
		}
	case phaseCaps:
		if budget, over = m.pass(budget, func(i int) {
			s.fracs[i] = max(0, sanitize(weightedCap(m.pol, &p.params, s.caps[i], s.weights[i], s.mosts[i])))
		}); over {
			m.phase = phaseFloors
			if _, lends := m.pol.(lender); !lends {
				m.spread = spreadRounds{capacity: c, k: 1}
				m.phase = phaseSpread
			}
		}
	case phaseSpread:
		if budget = m.spread.step(budget, s.fracs, s.mosts); m.spread.done {
			p.spread = m.spread.k
			m.phase = phaseFloors
		}
	case phaseFloors:
		if budget, over = m.pass(budget, func(i int) {
			x := spreadCap(p, s.fracs[i], s.mosts[i])
			f := math.Floor(x)
			s.fracs[i] = x - f
			s.caps[i] = f // the demand is not needed any more: keep the floor
			m.floors += int64(min(f, c))
		}); over {
			n := len(s.hashes)
			m.phase = phaseWant
			switch up := m.capacity - m.floors; {
			case up <= 0:
				// nobody rounds up (thrFrac 2 is above every fraction)
			case up >= int64(n):
				p.thrFrac, p.thrSince, p.thrHash = -1, math.MaxInt64, math.MaxUint64
			default:
				m.sel.start(int(up)-1, n, &s.order)
				m.phase = phaseRound
			}
		}
	case phaseRound:
		if budget = m.sel.step(budget, s); m.sel.done() {
			i := m.sel.result()
			p.thrFrac, p.thrSince, p.thrHash = s.fracs[i], s.since[i], s.hashes[i]
			m.phase = phaseWant
		}
	case phaseWant:
		if _, lends := m.pol.(lender); lends {
			m.phase = phaseDone // limits, not a partition: the budget and the borrow gate bound the window
			break
		}
		if budget, over = m.pass(budget, func(i int) {
			// caps[i] now holds the cap's floor (see above); roundCap's
			// arithmetic on the same cap gives the same integer.
			f := s.caps[i]
			if roundsUp(s.fracs[i], s.since[i], s.hashes[i], p) {
				f++
			}
			full := int64(min(min(f, c), s.mosts[i]))
			m.want += max(0, full-s.granted[i])
		}); over {
			if left := max(m.left, 0); m.want > left {
				p.scale = float64(left) / float64(m.want)
			}
			m.phase = phaseDone
		}
	}
	return budget
}

// seedSums are the seed's parameters summed one client at a time.
type seedSums struct {
	def, floor, deficit, surplus float64
}

func (a *seedSums) add(d, w, most float64) {
	g := w * (a.def - kept(sanitize(d)/w, a.floor, most/w))
	if g < 0 {
		a.deficit -= g
	} else {
		a.surplus += g
	}
}

func (a *seedSums) params() policyParams {
	return policyParams{a.def, a.floor, a.deficit, a.surplus, max(0, a.surplus-a.deficit)}
}

// spreadRounds is spreadCaps a round at a time (see spreadCaps).
type spreadRounds struct {
	capacity, k float64
	round, i    int
	fixed, free float64
	done        bool
}

func (r *spreadRounds) step(budget int, caps, mosts []float64) int {
	n := len(caps)
	for budget > 0 && !r.done {
		end := r.i + min(budget, n-r.i)
		for j := r.i; j < end; j++ {
			if c, m := caps[j], mosts[j]; r.k*c >= m {
				r.fixed += m
			} else {
				r.free += c
			}
		}
		budget -= end - r.i
		if r.i = end; end < n {
			return budget
		}
		r.i = 0
		r.finishRound()
	}
	return budget
}

// finishRound raises k to what fills the capacity with the clients not at
// their cap in the round just summed, or ends.
func (r *spreadRounds) finishRound() {
	fixed, free := r.fixed, r.free
	r.fixed, r.free = 0, 0
	r.round++
	if free <= 0 || fixed+r.k*free >= r.capacity*(1-1e-12) {
		r.done = true
		return
	}
	next := (r.capacity - fixed) / free
	if next <= r.k {
		r.done = true
		return
	}
	r.k = min(next, maxSpread)
	r.done = r.round >= 64 // (every k found is safe: a limit leaves units unshared, never too many)
}

// levelSearch finds the water level of a weighted max-min split (see
// weightedLevel) a step at a time: a quickselect over the units dᵢ/wᵢ.
// Each round partitions the clients not yet placed around a pivot unit,
// three ways, and places a side whole: below the level (demand met) when
// the level is above the pivot, else above it (held to the level). With
// none left, L = (c − Σ dᵢ below) / Σ wᵢ above, or c when all fit.
type levelSearch struct {
	c             float64
	d, w          []float64 // demands; weights (nil: 1 each)
	order         []int     // the clients; order[lo:hi] are not yet placed
	lo, hi        int
	below, aboveW float64
	// The round under way (active): order[lo:lt] below the pivot,
	// [lt:i] at it, [i:gt] not yet read, [gt:hi] above it.
	active                bool
	pivot                 float64
	lt, i, gt             int
	less, atD, atW, moreW float64
	round, seed           uint64 // (see pivotAt)
	filled                int    // order[:filled] is built (orderSome)
}

// start sets s to search over demands d and weights w (nil: 1 each),
// ordering the clients in *order (grown as needed).
func (s *levelSearch) start(c float64, d, w []float64, order *[]int) {
	*order = sizeOrder(*order, len(d))
	*s = levelSearch{c: c, d: d, w: w, order: *order, hi: len(d), seed: mixWord(pivotSecret, uint64(len(d)))}
}

func (s *levelSearch) unit(j int) float64 { return sanitize(s.d[j]) / weightAt(s.w, j) }

func (s *levelSearch) done() bool { return !s.active && s.lo >= s.hi }

// step reads at most budget clients and returns the budget left.
func (s *levelSearch) step(budget int) int {
	o := s.order
	if budget = orderSome(o, &s.filled, budget); s.filled < len(o) {
		return budget
	}
	for budget > 0 && !s.done() {
		if !s.active {
			p := s.lo + pivotAt(s.seed+s.round, s.lo, s.hi)
			s.pivot, s.round, s.active = s.unit(o[p]), s.round+1, true
			s.lt, s.i, s.gt = s.lo, s.lo, s.hi
			s.less, s.atD, s.atW, s.moreW = 0, 0, 0, 0
		}
		for ; budget > 0 && s.i < s.gt; budget-- {
			j := o[s.i]
			switch u := s.unit(j); {
			case u < s.pivot:
				s.less += sanitize(s.d[j])
				o[s.lt], o[s.i] = o[s.i], o[s.lt]
				s.lt++
				s.i++
			case u > s.pivot:
				s.moreW += weightAt(s.w, j)
				s.gt--
				o[s.i], o[s.gt] = o[s.gt], o[s.i]
			default:
				s.atD += sanitize(s.d[j])
				s.atW += weightAt(s.w, j)
				s.i++
			}
		}
		if s.i < s.gt {
			break
		}
		s.active = false
		if s.below+s.less+s.pivot*(s.atW+s.moreW+s.aboveW) < s.c {
			// The level is above the pivot. (At it exactly, the pivot's
			// clients are held to it: the level is the lowest that fills
			// the capacity.)
			s.below += s.less + s.atD
			s.lo = s.gt
		} else {
			s.aboveW += s.atW + s.moreW
			s.hi = s.lt
		}
	}
	return budget
}

// result is the level, once done.
func (s *levelSearch) result() float64 {
	if s.aboveW <= 0 {
		return s.c
	}
	return (s.c - s.below) / s.aboveW
}

// selection finds the k-th client (from 0) in the rounding order (see
// before) a step at a time: a quickselect with Lomuto partitions.
type selection struct {
	k, found int // found: the client, -1 until then
	order    []int
	lo, hi   int // the candidates: order[lo:hi]
	active   bool
	pivot    int // the pivot client, at order[hi-1]
	i, store int
	round    uint64
	seed     uint64 // (see pivotAt)
	filled   int    // order[:filled] is built (orderSome)
}

func (s *selection) start(k, n int, order *[]int) {
	*order = sizeOrder(*order, n)
	*s = selection{k: k, found: -1, order: *order, hi: n, seed: mixWord(pivotSecret, uint64(n)<<1|1)}
}

func (s *selection) done() bool  { return s.found >= 0 }
func (s *selection) result() int { return s.found }

// step compares at most budget clients and returns the budget left.
func (s *selection) step(budget int, sc *planScratch) int {
	o := s.order
	if budget = orderSome(o, &s.filled, budget); s.filled < len(o) {
		return budget
	}
	less := func(a, b int) bool {
		return before(sc.fracs[a], sc.since[a], sc.hashes[a], sc.fracs[b], sc.since[b], sc.hashes[b])
	}
	for budget > 0 && s.found < 0 {
		if !s.active {
			if s.hi-s.lo <= 1 {
				s.found = o[s.lo]
				break
			}
			p := s.lo + pivotAt(s.seed+s.round, s.lo, s.hi)
			o[p], o[s.hi-1] = o[s.hi-1], o[p]
			s.pivot, s.round, s.active = o[s.hi-1], s.round+1, true
			s.i, s.store = s.lo, s.lo
		}
		for ; budget > 0 && s.i < s.hi-1; budget-- {
			if less(o[s.i], s.pivot) {
				o[s.i], o[s.store] = o[s.store], o[s.i]
				s.store++
			}
			s.i++
		}
		if s.i < s.hi-1 {
			break
		}
		s.active = false
		o[s.store], o[s.hi-1] = o[s.hi-1], o[s.store]
		switch {
		case s.k == s.store:
			s.found = o[s.k]
		case s.k < s.store:
			s.hi = s.store
		default:
			s.lo = s.store + 1
		}
	}
	return budget
}

// pivotSecret seeds the searches' pivots (pivotAt): random for each VM, so
// that nobody outside can build an order against them, and the same for
// every search of a VM over the same clients, so that a plan read in
// slices sums in the order planning in place does (the level's float sums
// follow the pivots).
var pivotSecret = rand.Uint64()

// pivotAt picks a pivot in [0, hi−lo) from the round and the range, by a
// mix of their bits. The round is offset by a seed from pivotSecret:
// clients choose their demands, and so the order a fixed rule would pivot
// on, and an order built against a fixed rule makes every round a bad one
// (quadratic: 7,500 comparisons a client at 20,000).
func pivotAt(round uint64, lo, hi int) int {
	x := round*0x9e3779b97f4a7c15 ^ uint64(lo)<<32 ^ uint64(hi)
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 29
	return int(x % uint64(hi-lo))
}

// sizeOrder is o with room for n clients (o itself when it has it), to be
// built by orderSome.
func sizeOrder(o []int, n int) []int {
	if cap(o) < n {
		return make([]int, n)
	}
	return o[:n]
}

// orderSome puts clients *filled, … into order (order[i] = i), at most
// budget of them, and returns the budget left. The searches build their
// order a step at a time, as they read it: built whole in their start, it
// was 100,000 writes in one step at 100,000 clients, where a slice's
// budget is about a thousand.
func orderSome(order []int, filled *int, budget int) int {
	end := *filled + min(max(budget, 0), len(order)-*filled)
	for i := *filled; i < end; i++ {
		order[i] = i
	}
	budget -= end - *filled
	*filled = end
	return budget
}

// copyShares sets dst's share parameters (what a plan computes over its
// clients) to src's.
func copyShares(dst, src *plan) {
	dst.capacity, dst.n, dst.params, dst.scale, dst.spread = src.capacity, src.n, src.params, src.scale, src.spread
	dst.thrFrac, dst.thrSince, dst.thrHash = src.thrFrac, src.thrSince, src.thrHash
}

// computePlan fills next's parameters from the clients in s, at once (see
// planMath). capacity is what the shares split; left is what remains of
// the window's budget (the whole capacity for a new window).
func computePlan(next *plan, s *planScratch, pol compactPolicy, capacity, left int64) {
	var m planMath
	m.start(next, s, pol, capacity, left)
	m.step(math.MaxInt)
	copyShares(next, &m.next)
}

// planInPlaceMax is the largest table (clients counted and waiting) a
// request plans over: reading every bucket costs about a microsecond a
// client in Wasm, and a request must not wait much longer than a
// millisecond for it. Above it, a request publishes a provisional plan
// and a tick computes the plan that replaces it.
const planInPlaceMax = 1024

// provisional makes next, the plan a request would compute over a table
// larger than planInPlaceMax, a provisional one instead, when cur's
// parameters can stand for it, and reports whether it did: the shares
// follow cur's parameters (the policy's and the spread) with each
// client's own demand, rounded at random (roundsUp), until the plan read
// over every client in slices replaces next (view.slice). They need not
// sum to the capacity meanwhile; the window's budget bounds what it
// admits, as under any plan.
//
// cur's parameters stand only for a plan of the same capacity and
// settings, and about the same clients: a capacity that changed (a new
// config, a fleet lease), other settings (a new config's policy,
// reservation, pacing, weights or caps: sharePrint), or proven newcomers
// more than an eighth of those counted (cur's
// default share would be theirs), is planned in place. So is a roll over
// a plan whose parameters were carried over a roll already (its read
// never completed): carried again, the parameters of older and older
// windows would last, and the clients gone since would stay counted (only
// a plan read over the table forgets them). A roll over a provisional
// re-plan of a plan read over the table may carry its parameters: a
// newcomer's re-plan late in a window need not complete before the roll.
//
// inPlaceMax is planInPlaceMax (a test sets another).
func provisional(next, cur *plan, capacity int64, inPlaceMax int) bool {
	if cur.id == 0 || int(cur.n)+int(cur.pending) <= inPlaceMax || cur.capacity != capacity || cur.print != next.print || cur.pending > cur.n/8 ||
		cur.carried && !next.replan {
		return false
	}
	next.provisional = true
	next.carried = !next.replan || cur.carried
	next.capacity, next.n = capacity, cur.n+cur.pending
	if next.promoted != 0 {
		next.n++ // (the unproven newcomer whose request made it: counted, not pending)
	}
	next.params, next.spread = cur.params, cur.spread
	next.scale = 1
	if next.replan {
		next.scale = cur.scale
	}
	return true
}

// sharePrint is a fingerprint of the settings a plan's parameters depend
// on besides the capacity and the clients' demand: the policy, the
// reservation, pacing, weights and caps (see provisional).
func sharePrint(c *Config) uint64 {
	reservation := c.Reservation
	if s, ok := c.policy().(Seed); ok {
		reservation = s.Reservation // (the policy's own, which Config.Reservation sets by default)
	}
	h := mixWord(clientHash(c.policy().Name()), math.Float64bits(reservation))
	pace := uint64(0)
	if c.Pace {
		pace = 1
	}
	h = mixWord(mixWord(h, pace), math.Float64bits(c.Burst))
	h = mixWord(h, uint64(c.MaxShare))
	var weights, caps uint64 // (sums: in no order)
	for k, w := range c.hashedWeights {
		weights += mixWord(k, math.Float64bits(w))
	}
	for k, m := range c.hashedCaps {
		caps += mixWord(k, uint64(m))
	}
	return mixWord(mixWord(h, weights), caps)
}

// maxSpread bounds a plan's spread: far above any a real plan computes
// (capacity over the smallest cap that takes part).
const maxSpread = 1 << 62

// spreadCaps is the factor k ≥ 1 by which a partition's caps grow, each
// up to its client's cap (most), so that they share what the caps keep
// from capped clients: Σ min(mostᵢ, k·cᵢ) = capacity when the caps allow
// it, and every client at its cap otherwise. caps are the policy's caps,
// each already at most its client's cap; without caps, or when they sum
// to the capacity, k is 1.
//
// Each round raises k to what fills the capacity with the clients not yet
// at their cap, and then finds more of them at it. Every k found is safe:
// the sum never exceeds the capacity, so a round limit only leaves some
// units unshared, never too many.
func spreadCaps(capacity float64, caps, mosts []float64) float64 {
	r := spreadRounds{capacity: capacity, k: 1}
	for !r.done {
		r.step(math.MaxInt, caps, mosts)
	}
	return r.k
}

func resizeFloats(f []float64, n int) []float64 {
	if cap(f) < n {
		return make([]float64, n)
	}
	return f[:n]
}

// A Policy turns the previous window's demand into the next window's integer
// shares. Implementations must be pure: the same inputs give the same shares,
// the shares are never negative, and they sum to exactly capacity (whenever
// there is at least one client).
//
// demands are real numbers because a client that arrived during a window has
// its demand scaled up to a full window, and a newcomer is counted as
// demanding the default share C/N. dst is reused when it has room.
//
// The set is closed: Seed, Static and Fair. The engine derives each
// client's share on its own, from a plan's compact parameters and the
// client's demand (params, capOf), which only these policies define.
type Policy interface {
	Name() string
	Allocate(dst []int64, capacity int64, demands []float64) []int64
	// params are over every client's demand, weight and cap (mosts):
	// weights and mosts nil when there are none.
	params(capacity int64, demands, weights, mosts []float64) policyParams
	// capOf is a weight-1 client's cap for its demand, given the most it
	// may have (+Inf: no cap).
	capOf(p *policyParams, demand, most float64) float64
}

// policy is the config's Policy: Seed, with the config's reservation,
// unless another is set. A policy set by pointer is its value, which the
// rules tell apart (a plan's parameters are the policy's by a switch on
// it); a nil pointer is the default, as nil is.
func (c Config) policy() Policy {
	switch p := c.Policy.(type) {
	case *Seed:
		if p != nil {
			return *p
		}
	case *Static:
		if p != nil {
			return *p
		}
	case *Fair:
		if p != nil {
			return *p
		}
	case nil:
	default:
		return p
	}
	return Seed{Reservation: c.Reservation}
}

// Seed is the adaptive borrowing policy: clients that used less than their
// default share lend the difference (keeping a reservation), and clients that
// wanted more borrow it in proportion to their deficit.
type Seed struct {
	// Reservation is the fraction of the default share a client keeps even
	// when it was idle, so that it can start again without waiting a window.
	Reservation float64
}

// Name implements Policy.
func (Seed) Name() string { return "seed" }

// Allocate implements Policy.
func (p Seed) Allocate(dst []int64, capacity int64, demands []float64) []int64 {
	return allocateCompact(p, dst, capacity, demands)
}

// params computes the seed's compact parameters over every client's demand:
// the default share D, the reservation floor, and the three totals (per
// weight unit, see Weights below). With them, capOf gives any one client's
// real-valued cap from its own demand alone, which is what lets a worker
// derive one client's share without reading the others (see Shares above).
func (p Seed) params(capacity int64, demands, weights, mosts []float64) policyParams {
	def := float64(capacity) / totalWeight(weights, len(demands))
	sums := seedSums{def: def, floor: def * clamp01(p.Reservation)}
	for i, d := range demands {
		sums.add(d, weightAt(weights, i), mostAt(mosts, i))
	}
	return sums.params()
}

// capOf is one client's real-valued cap: D plus a loan in proportion to its
// deficit for a client that wanted more than D, and its reserved demand
// plus a part of what is left over for one that wanted less.
func (Seed) capOf(pp *policyParams, demand, most float64) float64 {
	def, floor, deficit, surplus, remaining := pp[0], pp[1], pp[2], pp[3], pp[4]
	r := kept(sanitize(demand), floor, most)
	g := def - r
	switch {
	case g <= 0 && deficit > 0:
		need := -g
		return def + min(need, need/deficit*surplus)
	case g <= 0:
		return def
	case surplus <= 0:
		// (Only under parameters computed over other demands, a
		// provisional plan's: a plan's own surplus counts this client's.)
		return r
	}
	return r + g/surplus*remaining
}

// Static splits capacity equally whatever the demand: the baseline that the
// seed policy is measured against.
type Static struct{}

// Name implements Policy.
func (Static) Name() string { return "static" }

// Allocate implements Policy.
func (p Static) Allocate(dst []int64, capacity int64, demands []float64) []int64 {
	return allocateCompact(p, dst, capacity, demands)
}

func (Static) params(capacity int64, demands, weights, _ []float64) policyParams {
	return policyParams{float64(capacity) / totalWeight(weights, len(demands))}
}

func (Static) capOf(pp *policyParams, _, _ float64) float64 { return pp[0] }

// policyParams are a policy's compact parameters: a few numbers computed
// over every client at a (re-)plan, from which capOf derives any one
// client's cap. They travel in the plan key, so their size is fixed.
type policyParams [5]float64

// compactPolicy is a Policy seen from the engine: its shares derive one
// client at a time, from the plan's parameters and that client's demand.
type compactPolicy = Policy

// allocateCompact is Allocate for a compact policy: every client's
// real-valued cap from the policy's parameters, then largest-remainder
// rounding, the same arithmetic a plan does one client at a time.
func allocateCompact(p compactPolicy, dst []int64, capacity int64, demands []float64) []int64 {
	n := len(demands)
	dst = resize(dst, n)
	if n == 0 || capacity <= 0 {
		return dst
	}
	params := p.params(capacity, demands, nil, nil)
	caps := scratchFloats(n)
	for i, d := range demands {
		caps[i] = p.capOf(&params, d, math.Inf(1))
	}
	return largestRemainder(dst, capacity, caps)
}

// Allocate applies the seed policy to integer demands (docs/contract.md,
// "How shares are computed"), for operators' what-if questions and the
// contract's worked examples (its tests check them).
func Allocate(capacity int64, reservation float64, demands []int64) []int64 {
	real := make([]float64, len(demands))
	for i, d := range demands {
		real[i] = float64(d)
	}
	return Seed{Reservation: reservation}.Allocate(nil, capacity, real)
}

// largestRemainder rounds real caps that sum to capacity into integers that
// sum to exactly capacity: floor everything, then hand the leftover units to
// the largest fractional parts, ties to the lower index. Rounding each cap to
// the nearest integer instead can overshoot the capacity.
func largestRemainder(dst []int64, capacity int64, caps []float64) []int64 {
	n := len(caps)
	var sum int64
	for i, c := range caps {
		c = max(0, sanitize(c))
		f := math.Floor(c)
		if f > float64(capacity) {
			f = float64(capacity)
		}
		dst[i] = int64(f)
		caps[i] = c - f // keep only the fractional part
		sum += dst[i]
	}
	left := capacity - sum
	if left <= 0 {
		// Floating-point noise can push the floors over capacity; take the
		// excess back from the largest shares so the sum stays exact.
		trimExcess(dst, -left)
		return dst
	}
	order := scratchInts(n)
	sort.SliceStable(order, func(a, b int) bool { return caps[order[a]] > caps[order[b]] })
	for k := int64(0); k < left; k++ {
		dst[order[k%int64(n)]]++
	}
	return dst
}

// trimExcess removes excess units, one at a time, from the largest shares.
func trimExcess(dst []int64, excess int64) {
	for ; excess > 0; excess-- {
		maxI := 0
		for i := range dst {
			if dst[i] > dst[maxI] {
				maxI = i
			}
		}
		dst[maxI]--
	}
}

// sanitize maps NaN and negative values, which no real demand can have, to 0.
func sanitize(x float64) float64 {
	if math.IsNaN(x) || x < 0 {
		return 0
	}
	if math.IsInf(x, 1) {
		return math.MaxFloat64 / 4
	}
	return x
}

func clamp01(x float64) float64 {
	if math.IsNaN(x) || x < 0 {
		return 0
	}
	return min(x, 1)
}

func resize(dst []int64, n int) []int64 {
	if cap(dst) < n {
		return make([]int64, n)
	}
	return dst[:n]
}

// Scratch space for rollovers. A rollover runs on one goroutine at a time per
// Limiter (each Envoy worker VM is single-threaded), but Allocate is also
// called from tests and tools concurrently, so the scratch is allocated per
// call; it is small next to the cost of reading the client slots.
func scratchFloats(n int) []float64 { return make([]float64, n) }

func scratchInts(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// Weights (Config.Weights) turn equal shares into weighted ones
// in every policy. A client of weight w counts as w clients of weight 1
// with the same demand per unit: its default share is w × C/W (W the
// total weight of the counted clients), its seed reservation w × the
// per-unit reservation, its fair guarantee and water level w × the
// per-unit ones. Policies compute their parameters per weight unit
// (params over demands and weights) and a client's cap is
// w × capOf(params, d / w) (weightedCap), so a plan still derives one
// client's share from the plan and that client's own entry.

// Bounds on Config.Weights.
const (
	MaxWeights = 10_000
	MaxWeight  = 1_000
	// MinWeight keeps C/W and the caps finite: a weight of 1e-300 would
	// make them overflow.
	MinWeight      = 0.001
	MaxWeightIDLen = 256
)

// weightAt is weights[i], or 1 without weights.
func weightAt(weights []float64, i int) float64 {
	if weights == nil {
		return 1
	}
	return weights[i]
}

// totalWeight is W, at least a hair above 0 so that C/W is finite.
func totalWeight(weights []float64, n int) float64 {
	if weights == nil {
		return float64(max(n, 1))
	}
	var w float64
	for _, x := range weights {
		w += x
	}
	return max(w, 1e-9)
}

// weightedCap is one client's real-valued cap under params pp: w times the
// cap of a weight-1 client with the same demand per unit. The fair
// policy's cap is a limit, the capacity, not a part of it (its weights act
// in the borrow gate), so it is not scaled: a light client alone may still
// use the whole window.
//
// A capped client's demand counts up to its cap (most), and its cap is
// at most that (see Caps).
func weightedCap(pol compactPolicy, pp *policyParams, demand, w, most float64) float64 {
	d := min(sanitize(demand), most)
	if _, limit := pol.(Fair); limit {
		return min(pol.capOf(pp, d, most), most)
	}
	return min(w*pol.capOf(pp, d/w, most/w), most)
}

// heaviest is the largest weight a client may have.
func (c *Config) heaviest() float64 {
	w := 1.0
	for _, x := range c.hashedWeights {
		w = max(w, x)
	}
	return w
}

// weightOf is the weight of the client with hash h (1 unless configured).
func (c *Config) weightOf(h uint64) float64 {
	if w, ok := c.hashedWeights[h]; ok {
		return w
	}
	return 1
}

// Caps (Config.MaxShare, Config.Caps) bound what one client may be
// granted in a window, in units, even when capacity is idle. What a cap
// keeps from a client goes to the others, as the policy lends anything:
//
//   - a capped client's demand counts up to its cap, in every policy's
//     parameters and in its own cap, so it never borrows what it may not
//     use and the others borrow it instead;
//   - under the seed policy, it keeps at most its cap of its reservation
//     (kept), so a reservation above a cap lends the difference;
//   - its share is at most its cap, and what that keeps from it is
//     spread over the others' shares (spreadCaps) in a partition (seed,
//     static); under the fair policy, a limit, the work-conserving pool
//     lends the rest.
//
// A plan leaves capacity unshared only when every client is at its cap.

// mostOf is the cap of the client with hash h, +Inf when it has none.
func (c *Config) mostOf(h uint64) float64 {
	if m, ok := c.hashedCaps[h]; ok {
		return float64(m)
	}
	if c.MaxShare > 0 {
		return float64(c.MaxShare)
	}
	return math.Inf(1)
}

// mostAt is mosts[i], or +Inf without caps.
func mostAt(mosts []float64, i int) float64 {
	if mosts == nil {
		return math.Inf(1)
	}
	return mosts[i]
}

// kept is what a seed client keeps of its default share (per weight
// unit): its demand, at least the reservation floor, at most its cap.
func kept(demand, floor, most float64) float64 {
	return min(max(demand, floor), most)
}

// byHash indexes a per-client map (Weights, Caps) by client hash, once
// per limiter; nil when it is empty.
func byHash[T any](m map[string]T) map[uint64]T {
	if len(m) == 0 {
		return nil
	}
	out := make(map[uint64]T, len(m))
	for id, v := range m {
		out[clientHash(id)] = v
	}
	return out
}

// validateCaps reports the first bad entry of Config.Caps.
func validateCaps(caps map[string]int64, capacity int64) error {
	return validatePerClient("caps", caps, func(m int64) string {
		if m < 1 || m > capacity {
			return fmt.Sprintf("must be an integer in [1, capacity=%d], got %d", capacity, m)
		}
		return ""
	})
}

// validateWeights reports the first bad entry of Config.Weights.
func validateWeights(ws map[string]float64) error {
	return validatePerClient("weights", ws, func(w float64) string {
		if math.IsNaN(w) || w < MinWeight || w > MaxWeight {
			return fmt.Sprintf("must be in [%v, %d], got %v", MinWeight, MaxWeight, w)
		}
		return ""
	})
}

// validatePerClient reports the first bad entry of a per-client map, in key
// order so that the message is the same on every run: at most MaxWeights
// entries, ids of 1 to MaxWeightIDLen bytes, and values bad says nothing
// against.
func validatePerClient[T any](field string, m map[string]T, bad func(T) string) error {
	if len(m) > MaxWeights {
		return fieldErr(field, "at most %d entries, got %d", MaxWeights, len(m))
	}
	for _, id := range slices.Sorted(maps.Keys(m)) {
		if id == "" || len(id) > MaxWeightIDLen {
			return fieldErr(field, "client ids must be 1 to %d bytes, got %d", MaxWeightIDLen, len(id))
		}
		if why := bad(m[id]); why != "" {
			return fieldErr(field, "%q: %s", id, why)
		}
	}
	return nil
}

// weightedLevel is the water level L per weight unit with
// Σ wᵢ·min(dᵢ/wᵢ, L) = capacity (the lowest such L), or capacity when
// the demands sum to less.
func weightedLevel(capacity float64, demands, weights []float64) float64 {
	var ls levelSearch
	var order []int // (per call: tools and tests call it concurrently)
	ls.start(capacity, demands, weights, &order)
	ls.step(math.MaxInt)
	return ls.result()
}

// Fair is the work-conserving policy. Every counted client may
// take up to the whole capacity; what bounds it is when it asks, in three
// tiers (borrowGate):
//
//   - its guarantee, the default share D = C/N, whatever it asked for
//     before: a client that comes back after an idle window gets what it
//     asks up to D at once;
//   - up to the water level L, it borrows from the pool: capacity that has
//     accrued in the window so far (elapsed/Cycle × C) and nobody has
//     taken. Capacity that accrues later holds the other clients' future
//     guarantees and is never lent. The level itself accrues (L × elapsed),
//     so borrowers under it share the pool in step with time, not by who
//     asks first or most often;
//   - once it has had what it has accrued of L (or its guarantee), it
//     borrows only what the pool has held for fairLag of a window unused:
//     capacity that nobody under the level wanted. This is what makes the
//     policy work-conserving when the demand it was sized from has gone
//     (a stale level). That late pool is shared max-min, not by who asks
//     most often: the window budget keeps a late level, the most any
//     client has had past its entitlement (per weight unit); a client
//     below it takes first, and one at it raises it only while the late
//     pool keeps units for the others (see borrowGate.room).
//
// L is the level of a max-min (water-filling) split of C over the previous
// window's demands: Σ min(dᵢ, L) = C. Water-filling rather than the seed's
// split by deficit, because the level does not move when a client already
// above it asks for more: retries and inflated attempts buy no priority,
// while a split by deficit pays every extra attempt.
//
// Its shares (Decision.Limit) are the capacity, not a partition: the
// window budget keeps the capacity promise, and the gate the guarantee.
type Fair struct{}

// Name implements Policy.
func (Fair) Name() string { return "fair" }

// fairLevel is params[1]: the water level, or the capacity itself when the
// demands fit. fairCapacity is params[2]. fairAbove is params[3]: how many
// clients wanted more than the level (per weight unit). fairExpected is
// params[4]: what the plan's clients are owed of their guarantees when it
// was computed (see "Guarantees owed").
const (
	fairLevel    = 1
	fairCapacity = 2
	fairAbove    = 3
	fairExpected = 4
)

// expectedGuarantee is what a client of weight w, having asked for d in
// the window before (its cap bounds d), is expected to take of its
// guarantee (def per weight unit) in the next: what it asked for, up to its
// guarantee. It is the borrow gate's expects (gateFor).
func expectedGuarantee(def, w, d float64) float64 {
	return min(math.Floor(def*w), math.Ceil(min(sanitize(d), MaxCapacity)))
}

// guaranteeReach is the most of its guarantee (def per weight unit) a
// client of weight w and cap most may take: the gate's reach.
func guaranteeReach(def, w, most float64) int64 {
	return int64(min(math.Floor(def*w), math.Floor(most)))
}

// owedGuarantee is what a client is owed of its guarantee once it has had
// had units in the window: what it is expected to take (expects, or twice
// had, for a client back from an idle window), up to reach, less had.
func owedGuarantee(expects, reach, had int64) int64 {
	return max(0, min(reach, max(expects, 2*had))-had)
}

// planOwes is what a plan owes a client of weight w and cap most, that
// asked for d in the window before and has had had units in this one: its
// gate's owes under the plan (def per weight unit), summed over the clients
// by the plan. With ahead, the client may take more before the plan is in
// force, uncounted by it (a plan read in slices): the most it may come to
// be owed from had on. (What is owed falls as a client takes, but for one
// expected to take less than half its reach: twice what it has had rises
// faster, up to half its reach.)
func planOwes(def, w, d, most float64, had int64, ahead bool) int64 {
	expects, reach := int64(expectedGuarantee(def, w, min(d, most))), guaranteeReach(def, w, most)
	owed := owedGuarantee(expects, reach, had)
	if h := reach / 2; ahead && h > had {
		owed = max(owed, owedGuarantee(expects, reach, h))
	}
	return owed
}

// fairLag is how long, as a fraction of the window, pool capacity must sit
// unused before a client past what it has accrued of the water level may
// borrow it: clients under their level have it first.
const fairLag = 1.0 / 32

// lateKeep is how many units of the late pool a client at the late level
// leaves when it raises the level: units that the clients below the level,
// which take first, may be about to ask for. With one, the client asking
// most often still took most of them, at its next raise (design, "The late
// level, and newcomers after the roll").
const lateKeep = 2

// params computes D, the water level L and how many clients wanted more
// than L over every client's demand.
func (Fair) params(capacity int64, demands, weights, mosts []float64) policyParams {
	c := float64(capacity)
	level := weightedLevel(c, demands, weights)
	def := c / totalWeight(weights, len(demands))
	var above, expected float64
	for i, d := range demands {
		if sanitize(d)/weightAt(weights, i) > level {
			above++
		}
		most := math.Inf(1)
		if mosts != nil {
			most = mosts[i]
		}
		expected += float64(planOwes(def, weightAt(weights, i), d, most, 0, false))
	}
	return policyParams{def, level, c, above, expected}
}

// capOf is the most a client may hold in the window: the capacity.
func (Fair) capOf(pp *policyParams, _, _ float64) float64 { return pp[fairCapacity] }

// tiers are a client's guarantee and its priority limit (the water level,
// at least the guarantee), in units.
func (Fair) tiers(pp *policyParams) (guarantee, level float64) {
	return pp[0], max(pp[0], pp[fairLevel])
}

// keep is what a raise of the late level leaves in the late pool: lateKeep,
// or nothing when at most one client wanted more than the level, since the
// late pool then has no other taker to keep units for (and a lone borrower
// would otherwise leave them unused at the window's end).
func (Fair) keep(pp *policyParams) int64 {
	if pp[fairAbove] > 1 {
		return lateKeep
	}
	return 0
}

// expected is what the plan's clients are owed of their guarantees when
// it was computed (see "Guarantees owed").
func (Fair) expected(pp *policyParams) int64 {
	return int64(min(max(pp[fairExpected], 0), MaxCapacity))
}

// owePending adds to what pp's clients are owed n, owed to clients the
// plan counts without having read them.
func (Fair) owePending(pp *policyParams, n int64) { pp[fairExpected] += float64(n) }

// Allocate implements Policy with the split the fair policy settles to
// when demand is steady: max-min over the demands, what is left over
// (Σ d < C) spread equally, rounded by largest remainder so the shares sum
// to exactly capacity. The engine does not use it: a fair client's limit
// is capOf, and what it gets depends on when it asks.
func (Fair) Allocate(dst []int64, capacity int64, demands []float64) []int64 {
	n := len(demands)
	dst = resize(dst, n)
	if n == 0 || capacity <= 0 {
		return dst
	}
	level := weightedLevel(float64(capacity), demands, nil)
	caps := scratchFloats(n)
	var used float64
	for i, d := range demands {
		caps[i] = min(sanitize(d), level)
		used += caps[i]
	}
	spare := max(0, float64(capacity)-used) / float64(n)
	for i := range caps {
		caps[i] += spare
	}
	return largestRemainder(dst, capacity, caps)
}

// lender is a policy whose caps sum to more than the capacity: a client
// beyond its guarantee borrows, and only from the pool (see borrowGate).
type lender interface {
	tiers(pp *policyParams) (guarantee, level float64)
	keep(pp *policyParams) int64
	expected(pp *policyParams) int64
	owePending(pp *policyParams, n int64)
}

// borrowGate limits what one lease may take from the window budget, in
// the fair policy's three tiers: the client's own units (up to its
// guarantee) from anywhere in the budget; up to what it is entitled to by
// now (its guarantee, or the water level as it accrues), only capacity
// accrued by now and not granted; past that, only capacity accrued
// fairLag ago and still not granted, under the window's late level. Zero
// value: no gate.
type borrowGate struct {
	on      bool
	own     int64   // units the lease may take within the client's guarantee
	level   int64   // units the lease may take within its entitlement so far
	had     int64   // units the client has had in the window
	lv      float64 // its water level, in units, for the whole window
	guar    int64   // its whole guarantee, in units
	reach   int64   // what of it the client may take: its guarantee, or its cap if less (owes)
	expects int64   // what of its guarantee it asked for in the window before (owes)
	burst   float64 // paced: the guarantee accrues from burst × guar; else 1
	past    bool    // the client has had its entitlement: it borrows from the late pool
	excess  float64 // with past: the units it has had past its entitlement
	weight  float64 // its weight: the late level is per weight unit
	keep    int64   // late units a raise of the late level leaves (see Fair.keep)
	elapsed float64 // fraction of the window elapsed, in [0, 1]
}

// room is how many units a take may move from a budget that has granted
// granted of capacity, given what the budget alone allows (allowed), and
// the window's late level after the take (given lateLevel before it).
//
// The late level shares the late pool max-min rather than by who asks
// most often: a client past its entitlement takes late units while what
// it has had past it, per weight unit, stays at or below the level; one
// already at the level takes more only when the late pool holds more than
// keep units, and raises the level to what it then has. A client below
// the level (it asks less often, or came later) thus finds the units a
// frequent asker would otherwise have taken first.
func (b borrowGate) room(allowed, granted, capacity int64, lateLevel float64) (int64, float64) {
	if !b.on {
		return allowed, lateLevel
	}
	pool := accrued(capacity, b.elapsed) - granted
	n := max(b.own, min(b.level, pool))
	if !b.past {
		return max(0, min(allowed, n)), lateLevel // under its entitlement, a client borrows in step with time only
	}
	// The late pool trails the pool by fairLag and catches up at the
	// window's end, so that everything unused is lendable by then.
	late := accrued(capacity, (b.elapsed-fairLag)/(1-fairLag)) - granted
	// (The hair keeps float noise in level × weight from losing a unit.)
	below := int64(math.Floor(lateLevel*b.weight - b.excess + 1e-9))
	n = max(n, min(late, below))
	if n < allowed && late-b.keep > n {
		n = late - b.keep // a raise
	}
	if n = max(0, min(allowed, n)); n > 0 {
		lateLevel = max(lateLevel, (b.excess+float64(n))/b.weight)
	}
	return n, lateLevel
}

// nextAt is the earliest fraction of the window at which the gate lets a
// unit through that it does not let through now, the budget having
// granted granted of capacity, if nobody takes one first; 1 or more: not in
// this window. A client gets a unit when its guarantee, paced, accrues
// past what it has had; or when both its entitlement (ceil(lv × f)) has
// and the pool (ceil(capacity × f)) has passed what the budget granted;
// or, past its entitlement, when the late pool, which trails the pool by
// fairLag, holds more than it keeps for the others.
func (b borrowGate) nextAt(granted, capacity int64) float64 {
	if capacity <= 0 {
		return 1
	}
	f := 1.0
	if b.burst < 1 && b.had < b.guar {
		f = (float64(b.had)/float64(b.guar) - b.burst) / (1 - b.burst)
	}
	ent := 1.0
	if b.lv > 0 {
		ent = float64(b.had) / b.lv
	}
	f = min(f, max(float64(granted)/float64(capacity), ent))
	if b.past {
		f = min(f, fairLag+(1-fairLag)*float64(granted+b.keep)/float64(capacity))
	}
	return max(f, b.elapsed)
}

// accrued is how much of capacity has accrued at fraction f of a window,
// rounded up: a unit is lendable from the moment it starts accruing, so
// the last one is not stranded until the window's very end.
func accrued(capacity int64, f float64) int64 {
	return int64(math.Ceil(max(0, f) * float64(capacity)))
}

// gateFor is the gate of a lease for the client with hash hash that has
// been granted granted units, under plan p at time t (Unix ns), having
// asked for prev units in the window before. Its tiers are the per-unit
// ones times its weight.
func gateFor(pol compactPolicy, p *plan, cfg *Config, hash uint64, granted int64, prev float64, t int64) borrowGate {
	l, ok := pol.(lender)
	if !ok {
		return borrowGate{}
	}
	g, lv := l.tiers(&p.params)
	w := cfg.weightOf(hash)
	most := cfg.mostOf(hash)
	expects := int64(expectedGuarantee(g, w, min(prev, most)))
	reach := guaranteeReach(g, w, most)
	g, lv = g*w, lv*w
	f := windowElapsed(p, cfg, t)
	// The level accrues over the window like the pool, so that borrowers
	// under it share the pool in step with time rather than by who asks
	// first (or most often).
	guar := int64(math.Floor(g))
	own, burst := guar, 1.0
	if cfg.Pace {
		own, burst = pacedAmount(own, cfg.Burst, f), cfg.Burst // the guarantee accrues too
	}
	// Its guarantee (paced: as it accrues), or its level accrued so far.
	// Paced, the whole guarantee would let a client asking ahead of its
	// pace borrow it from the pool, which the level's pace needs.
	entitled := max(own, int64(math.Ceil(lv*f)))
	return borrowGate{
		on:      true,
		own:     max(0, own-granted),
		level:   max(0, entitled-granted),
		had:     granted,
		lv:      lv,
		guar:    guar,
		reach:   reach,
		expects: expects,
		burst:   burst,
		past:    granted >= entitled,
		excess:  float64(granted - entitled),
		weight:  w,
		keep:    l.keep(&p.params),
		elapsed: f,
	}
}

// windowElapsed is the fraction of p's window elapsed at t, in [0, 1].
func windowElapsed(p *plan, cfg *Config, t int64) float64 {
	start, end := planWindow(p, cfg)
	f := float64(t-start) / float64(end-start)
	return max(0, min(1, f))
}

// nextAccrual is when a client whose last lease fell short may find
// more (Unix ns; 0: not before the window's end): when the window's budget
// may grant again (moreAt, when the budget cut the lease: cut), and no
// earlier than pacing's next unit (paceAt, 0 when pacing did not hold it).
// A lease that neither cut found its share spent: 0.
func nextAccrual(paceAt, moreAt int64, cut bool) int64 {
	switch {
	case cut && moreAt == 0:
		return 0 // the budget grants nothing more in this window
	case cut:
		return max(paceAt, moreAt)
	}
	return paceAt
}

// budgetMoreAt is the earliest time (Unix ns; 0: not before the window
// [start, end) ends) a take cut short at t by the budget it saw (and by
// gate, when clipped) could get a unit, if nobody else takes one first:
//
//   - a budget with nothing left grants nothing more in the window; in
//     fleet mode, when what the process holds is what bounded it, the
//     next lease may come with the next sync;
//   - the borrow gate lets one more unit through when the client's
//     entitlement grows past what it has had, or the pool past what the
//     budget granted (borrowGate.nextAt).
func budgetMoreAt(seen budgetSeen, gate borrowGate, clipped bool, cfg *Config, t, start, end int64) int64 {
	// (Units owed to the clients' guarantees are not the pool's: those
	// clients are expected to come for them; see "Guarantees owed".)
	spoken := seen.granted
	if clipped {
		spoken += seen.owed
	}
	if spoken >= seen.left {
		if seen.held && cfg.Fleet != nil {
			return t + int64(cfg.Fleet.SyncInterval+cfg.Fleet.Timeout)
		}
		return 0
	}
	if !clipped {
		return 0
	}
	return gateAt(gate.nextAt(spoken, seen.left), t, start, end)
}

// gateAt is the moment fraction f of the window [start, end) comes, no
// earlier than t (and a nanosecond past it, past its rounding); 0 when f
// is not in the window.
func gateAt(f float64, t, start, end int64) int64 {
	if f >= 1 {
		return 0
	}
	return max(t, start+int64(math.Ceil(f*float64(end-start)))) + 1
}

// Bookings of the window budget. Under a lending policy (unpaced), a
// client the borrow gate refuses is told when its next unit accrues
// (budgetMoreAt), "if nobody else takes one first": the pool it would
// borrow from is everyone's, and the others take from it meanwhile. So the
// unit it asked for is booked for it then: from its time on, until it
// comes for it or bookingHold has passed, the others' takes see it as
// granted (due), and it takes it past the gate. Before its time it is not
// set aside: the pool lends it as usual until it would have accrued to the
// client. A client that asks again before its time does not wait for it:
// its booking is cancelled, and it is not booked again before then. One
// that does not come within bookingHold loses its booking (the unit stays
// in the budget). One booking per client, at most maxBookings per window.
//
// The limit's pacer books nothing (see "Turns of the limit's pacer").

// maxBookings bounds the bookings of a window, so that the budget record,
// read and written by every take, stays small.
const maxBookings = 8

// bookingHold is how long a booking waits for its client past its time: a
// client that obeys Retry-After in whole seconds, rounded up, comes back
// up to a second late, plus its round trip.
const bookingHold = 2 * int64(time.Second)

// booking is n units of the window budget set aside for one client from
// at (its Retry-After); n 0: cancelled (it asked before at).
type booking struct {
	client uint32 // the client's hash, truncated
	n      int64
	at     int64
}

// bookAsk is a take's client, for the budget's bookings: its hash
// (truncated), the units its request needs, and the take's time and window.
type bookAsk struct {
	client        uint32
	need          int64
	t, start, end int64
	again         bool // this request booked already (its update is being retried): its booking is not an early ask
	nobody        bool // a take for no client (a fleet give-back): it only sees what is due
}

// settled is what settleBookings found for a take: the units of the
// others' bookings due at its time, and of its client's own booking either
// claimed (its time has come: it takes them now, and the booking is
// dropped), or kept for it (at: this very request made it, its update
// being retried), or cancelled (it asked before its time).
type settled struct {
	due, claimed, at int64
	ahead            int64 // units of the others' bookings not due yet
	mine, changed    bool  // mine: its client has a booking (or a cancelled one)
}

// settleBookings drops v's bookings whose clients did not come within hold
// of their time and settles ask's (see settled).
func settleBookings(v *budget, ask *bookAsk, hold int64) (r settled) {
	kept := v.booked[:0]
	for _, b := range v.booked {
		switch {
		case ask.t > b.at+hold:
			r.changed = true // forfeited, or cancelled and over
			continue
		case !ask.nobody && b.client == ask.client && ask.t >= b.at:
			r.claimed, r.changed = b.n, true
			continue
		case !ask.nobody && b.client == ask.client:
			r.mine = true
			if b.n > 0 && ask.again {
				r.at = b.at
				break
			}
			// Asked before its time: not a client that waits for its units.
			// They are not set aside, and none are booked again before then.
			if b.n > 0 {
				b.n, r.changed = 0, true
			}
		case ask.t >= b.at:
			r.due += b.n
		default:
			r.ahead += b.n
		}
		kept = append(kept, b)
	}
	v.booked = kept
	return r
}

// Guarantees owed. A client under its guarantee passes no gate, so a unit
// booked for a borrower (bookUnits), or a refused client's Retry-After
// (budgetMoreAt), must come after what the clients are still expected to
// take of their guarantees: that client would take the unit first, and the
// booked one, told its time, would find nothing there.
//
// What a client is owed is what it is expected to take of its guarantee
// (as much as it asked for in the window before, or twice what it has had
// in this one; up to its guarantee and its cap) and has not had
// (owedGuarantee). Each take moves it, and a plan that changes the
// guarantees moves it for every client at once, so it is kept in two
// places:
//
//   - the plan: the sum over its clients of what each is owed under it
//     (planOwes: what it is expected to take, for a client yet to take when
//     the scan read it; what its gate would owe it for what it had, for
//     one that took), and the guarantees of the clients it counts without
//     having read them (view.owePending);
//   - the window budget: what every take moved since, as the taker's own
//     gate saw it. owed is what the takers are owed: a first take adds
//     what its client is owed after it, later takes move that (owedAfter).
//     A give-back of n units adds n: giving back never raises what a
//     client is owed by more (it is exact when a client gives back all it
//     had, the one give-back a client under its guarantee makes in
//     practice: a refund), and it needs no gate, of a plan in force or
//     not. seen is what the takers were expected to take, added at their
//     first takes (seenAfter). owedPlan is the plan they are counted under,
//     and base the balance owed − seen when it came into force (view.
//     switchOwed, right after it is published), less the units moved
//     since its scan began (view.racing): a take through the gate of an
//     older plan is stale.
//
// owedOf is the plan's sum plus how much owed − seen moved since base. It
// may exceed what is owed, never fall short of it: clients that arrive
// together are refused before some of the others' first takes (counting
// only the clients that took booked one unit for two of them), and a take
// or a give-back between the scan's read of a client's bucket and the
// plan's coming into force moves what it is owed by at most its units,
// which racing owes on top. A plan read in slices reads a bucket long
// before it is in force: it owes each client the most it may come to be
// owed from what it had (planOwes, ahead), and racing counts only the
// give-backs. A provisional plan carries the window before's parameters:
// owedOf counts only owed under it. A one-shot id is expected to take what its one
// request asked for (the route's cost), the same whether or not it comes
// back.
//
// The guarantee a client is not expected to take (it asked for less in the
// window before) is not owed: the pool lends it as the window accrues, and
// so may a booking. Owing every client the rest of its guarantee would hold
// back what a light client does not take until the window's end.

// owedAfter is what the budget owes the clients that took in the window
// after a take of moved units through gate, given owed before it; seenAfter
// is seen after it (see "Guarantees owed").
func owedAfter(owed int64, gate borrowGate, moved int64) int64 {
	switch {
	case !gate.on || moved == 0:
		return owed
	case gate.had == 0:
		return owed + gate.owes(moved) // (not counted before its first take)
	}
	return max(0, owed-gate.owes(gate.had)+gate.owes(gate.had+moved))
}

func seenAfter(seen int64, gate borrowGate, moved int64) int64 {
	if !gate.on || gate.had > 0 || moved == 0 {
		return seen
	}
	return seen + gate.expects
}

// owes is what the gate's client is owed once it has had h units in the
// window: what it is expected to take of its guarantee (what it asked for
// in the window before, or twice h, for a client back from an idle
// window; never past its cap), less h. (0 without a gate.)
func (b borrowGate) owes(h int64) int64 {
	if !b.on {
		return 0
	}
	return owedGuarantee(b.expects, b.reach, h)
}

// bookUnits books ask's unit in v for when gate next lets one through, if
// it does in this window and the budget has it beyond granted and the
// units booked for others ahead; it returns when (0: not booked). Only a request of one unit is booked: the gate's next moment is
// exact for one unit, and a booking of many, claimed past the gate, would
// take the late pool in bulk from the clients the gate ranks first. (A
// client that holds a booking, or a cancelled one, is not booked again:
// the caller learns so from settleBookings first.)
func bookUnits(v *budget, ask *bookAsk, gate borrowGate, granted, ahead, left int64) int64 {
	if ask.need != 1 || granted+ahead >= left || len(v.booked) >= maxBookings {
		return 0
	}
	at := gateAt(gate.nextAt(granted, left), ask.t, ask.start, ask.end)
	if at > 0 {
		v.booked = append(v.booked, booking{client: ask.client, n: ask.need, at: at})
	}
	return at
}

// Pacing (Config.Pace) spreads a limit's capacity over the
// window instead of letting it all go at the window's start. Two rules,
// both pure functions of explicit times:
//
//   - per client: by fraction f of the window, a client may have been
//     granted at most share × (burst + (1 − burst) × f) (pacedAmount);
//   - per limit: a generic cell rate algorithm over the whole capacity,
//     one unit every cycle/capacity with a tolerance of burst × cycle
//     (paceFit), kept in one shared key. It forfeits what is not used, so
//     any interval of one cycle's length admits at most about
//     (1 + burst) × capacity units (PacedMost), where fixed windows alone
//     let up to 2 × capacity through across a boundary.
//
// A paced lease takes only the units asked for, so units are granted when
// they are admitted and the bound holds for admissions, not just grants.

// pacedAmount is how much of share a client may have been granted by
// fraction f of the window: burst × share at once, the rest linearly.
// Rounded up, so a unit is available as soon as it starts to accrue.
func pacedAmount(share int64, burst, f float64) int64 {
	f = max(0, min(1, f))
	// (less a rounding hair, so that 100 × 0.6 is 60, not 61)
	return int64(math.Ceil(float64(share)*(burst+(1-burst)*f) - 1e-9))
}

// paceFit is the pacing cell rate algorithm: given the theoretical
// arrival time tat (Unix ns, 0 for a new limit) and a request for n units
// at now, it returns how many fit (m ≤ n) and the new tat. A unit fits
// when the units before it are no more than tolerance ahead of now;
// each unit moves tat by interval. A unit nobody took stays there for
// grace after it accrued, then is forfeited.
func paceFit(tat, now, n int64, pp paceParam) (m, next int64) {
	interval, tolerance := pp.interval, pp.tolerance
	base := max(tat, now-pp.grace)
	ahead := base - now
	if n <= 0 || ahead > tolerance {
		return 0, tat
	}
	m = min(n, (tolerance-ahead)/interval+1)
	return m, base + m*interval
}

// paceWait is how long after now n units (at least one) fit under tat
// at once (see paceFit).
func paceWait(tat, now, n int64, pp paceParam) int64 {
	return max(0, tat-now-pp.tolerance+(max(n, 1)-1)*pp.interval)
}

// PacedAtOnce is the most units pacing lets through at once, to a pacer
// idle for a while: a request costing more could never be admitted.
func PacedAtOnce(cfg *Config) int64 {
	pp := paceParams(cfg)
	return (pp.tolerance+pp.grace)/pp.interval + 1
}

// Turns of the limit's pacer. A client refused under pacing is told when
// it may come back. Clients refused together would be told one moment,
// come back together, and find one unit between them. So each is given a
// turn: the earliest moment, no sooner than it could succeed alone, at
// which one more unit fits the pacer after the turns already given, each
// of their clients taking one unit at its turn (turnAt). A turn changes
// what a client is told, never what is admitted: paceFit does not read
// the turns, and a client's own requests go to the store from when it
// could succeed alone, as before. Whoever comes takes a unit, so a client
// that does not come back costs the others nothing but a later turn for
// those told after it (at most its own turn plus a unit), until
// bookingHold past its time. (A unit set aside for a client that does not
// come would be lost to all: the pacer forfeits what is not taken in
// time.) A client's turn is dropped when it takes a unit, when it is
// refused again (it gets a new one), and bookingHold after its time. One
// turn per client, at most maxTurns; only requests of one unit get one.
const maxTurns = 8

// turnSlack is how late the clients may come after their turns, all
// alike, and still find the units turnAt counted on: Retry-After counts
// whole seconds, and the client's round trip comes on top. (Clients late
// by different amounts may still upset one another.)
const turnSlack = 100 * int64(time.Millisecond)

// turnHorizon is how far ahead of the refusal a turn is kept, and the
// longest Retry-After a turn may name: the window's end, the next window,
// and a second for each turn before it.
func turnHorizon(cfg *Config) int64 {
	return 2*int64(cfg.Cycle) + maxTurns*int64(time.Second)
}

// turn is when the pacer told a refused client to come back.
type turn struct {
	client uint32 // the client's hash, truncated
	at     int64
}

// settleTurns drops from turns (sorted by time) client's own, those whose
// clients did not come within bookingHold of their time, at t, and those
// further ahead than horizon, which a clock that read far ahead gave.
func settleTurns(turns []turn, client uint32, t, horizon int64) []turn {
	kept := turns[:0]
	for _, u := range turns {
		if u.client != client && t <= u.at+bookingHold && u.at-t <= horizon {
			kept = append(kept, u)
		}
	}
	return kept
}

// turnFits is paceFit for one unit taken by a client that comes at at:
// whether it fits, and the theoretical arrival time it leaves.
func turnFits(tat, at int64, pp paceParam) (bool, int64) {
	base := max(tat, at-pp.grace)
	if base-at > pp.tolerance {
		return false, tat
	}
	return true, base + pp.interval
}

// turnAt is the turn of a client that could succeed alone from x, at now,
// with the pacer at tat and turns (sorted by time) given. A client comes
// back a whole number of seconds after it was refused (Retry-After counts
// whole seconds, rounded up), plus its round trip, and the pacer forfeits
// a unit not taken in time, so its turn, at, is such a moment: the
// earliest, no sooner than x, at which its unit fits when every client
// with a turn comes at its own (or now, when that is past) and takes one,
// and at which it takes no unit that a turn that fits without it needs.
// Both must hold whether the clients with turns come on time or all
// turnSlack late, and whether this one comes on time or turnSlack late,
// each taking its unit in the order they come.
// told is the moment to tell it: the earliest at which its unit fits in
// that order, however late the others come, no sooner than x and within
// the second before at, so that a client rounding up to whole seconds
// comes at at (and one held in the filter, at told).
func turnAt(tat, now, x int64, turns []turn, pp paceParam) (told, at int64) {
	n := min(len(turns), maxTurns)
	lates := [2]int64{0, min(turnSlack, pp.grace+pp.tolerance)}
	var fits [2][maxTurns]bool // which turns fit without the new one, on time and late
	for l, late := range lates {
		for i, tt := 0, tat; i < n; i++ {
			fits[l][i], tt = turnFits(tt, max(turns[i].at, now)+late, pp)
		}
	}
	sec := int64(time.Second)
	at = now + (max(x, now)-now+sec-1)/sec*sec
	// Each pass moves at a second or more later, past a turn or to when
	// its unit fits: a few passes settle it.
	for range 2*maxTurns + 2 {
		later, from := int64(0), int64(0)
		for l, late := range lates {
			for _, own := range lates {
				placed, tt := false, tat
				for i := 0; i <= n; i++ {
					if !placed && (i == n || max(turns[i].at, now)+late > at+own) {
						placed = true
						ok, next := turnFits(tt, at+own, pp)
						if !ok {
							later = max(later, tt-pp.tolerance-own) // when its unit fits
							break
						}
						if own == 0 {
							from = max(from, tt-pp.tolerance)
						}
						tt = next
					}
					if i == n {
						break
					}
					ok, next := turnFits(tt, max(turns[i].at, now)+late, pp)
					switch {
					case ok:
						tt = next
					case fits[l][i]:
						later = max(later, turns[i].at+1) // it would take this turn's unit
					}
				}
			}
		}
		if later == 0 {
			return max(x, from, at-sec+1, now), at
		}
		at = now + (max(later, at+1)-now+sec-1)/sec*sec
	}
	return at, at
}

// addTurn gives client its turn from x in turns (sorted by time, its own
// settled already) and returns when to tell it (turnAt), with the turns.
// A turn further than horizon from now is no turn (told 0: the client is
// told what it would be without turns); with maxTurns kept, the client is
// told its turn without it being kept.
func addTurn(turns []turn, client uint32, tat, now, x, horizon int64, pp paceParam) (int64, []turn) {
	told, at := turnAt(tat, now, x, turns, pp)
	if at-now > horizon {
		return 0, turns
	}
	if len(turns) >= maxTurns {
		return told, turns
	}
	i := len(turns)
	for i > 0 && turns[i-1].at > at {
		i--
	}
	turns = append(turns, turn{})
	copy(turns[i+1:], turns[i:])
	turns[i] = turn{client: client, at: at}
	return told, turns
}

// paceParam is the cell rate algorithm's arithmetic for one config.
type paceParam struct {
	interval, tolerance, grace int64
}

// paceParams are the cell rate algorithm's interval, tolerance and grace
// for a config: one unit every cycle/capacity, rounded up (rounded down, a
// cycle would hold a few more than capacity units); burst × cycle less one
// interval (so that a burst is burst × capacity units, not one more); and
// a grace that keeps a unit nobody took for up to one interval, so that
// the limit can be used whole by clients that retry on whole seconds.
//
// Retry-After counts whole seconds, so clients refused together come back
// together, at one sub-second phase, a whole number of seconds later. A
// pacer that forfeits a unit the moment it is not taken (no grace), with a
// tolerance under one interval, then admits one unit per second whatever
// the jitter: 5 of 6 per 5 s for capacity 6 per 5 s and burst 0.2. A unit
// that waits until the next whole second is taken then; that needs a grace
// of one second less the tolerance, at most one interval (a unit more in
// the worst interval of one cycle's length, and in a burst after idle).
func paceParams(cfg *Config) paceParam {
	c := max(1, cfg.Capacity)
	interval := max(1, (int64(cfg.Cycle)+c-1)/c)
	tolerance := max(0, int64(float64(cfg.Cycle)*cfg.Burst)-interval)
	grace := min(interval, max(0, int64(time.Second)-tolerance))
	return paceParam{interval: interval, tolerance: tolerance, grace: grace}
}

// PacedMost is the most a paced limit admits in any interval of one
// cycle's length (with Config.Pace; fixed windows alone allow up to twice
// the capacity across a boundary): (1 + burst) × capacity, or capacity + 1
// when burst × capacity is under one unit; and one more for the unit the
// grace keeps.
func PacedMost(cfg *Config) int64 {
	most := max(int64((1+cfg.Burst)*float64(cfg.Capacity)), cfg.Capacity+1)
	if paceParams(cfg).grace > 0 {
		most++
	}
	return most
}

// pacedAt is when a share's paced amount reaches units, in p's window.
// pacedAmount rounds up, so the units-th unit is there as soon as the
// exact amount passes units − 1: a microsecond after that moment (past
// pacedAmount's rounding hair), not when the amount reaches units.
func pacedAt(p *plan, cfg *Config, share, units int64) int64 {
	start, end := planWindow(p, cfg)
	b := cfg.Burst
	if b >= 1 || share <= 0 {
		return start
	}
	f := (float64(units-1)/float64(share) - b) / (1 - b)
	return start + int64(math.Ceil(max(0, min(1, f))*float64(end-start))) + int64(time.Microsecond)
}

// Lease sizing (see leaseSize): 1/16 of what is left of a share, and 1/4
// of the units the worker saw the client ask for this window, or a chunk
// of leaseChunk units for a client far below its share (roomy).
const (
	leaseDivisor     = 16
	leaseRateDivisor = 4
	leaseChunk       = 8
)

// leaseSize is how many units a worker takes in one lease, at least need:
// at most 1/leaseDivisor of what is left of the share, so leases shrink as
// it drains, and at most batch, what the worker's view of the client
// justifies (leaseWant). Both bound the capacity that can sit unused in a
// worker. 0 when need does not fit.
func leaseSize(avail, need, batch int64) int64 {
	if avail < need || need <= 0 {
		return 0
	}
	return min(avail, max(need, min(avail/leaseDivisor, batch)))
}

// roomy reports whether the client of entry e is far below its share, for
// a limit whose leases are batches (a partition, unpaced, outside fleet
// mode: see leaseWant): it asked for at most half of it in the last window
// and so far in this one, and what is left of it is at least leaseDivisor
// chunks. A worker leases such a client a whole chunk however little it
// saw of it, and keeps an unused lease of at most a chunk across ticks
// (clientState.keeps): with many clients each asking a few units a
// window, a request then costs no lease of its own, and a chunk no return.
// A client that used its share in the last window is not roomy; one that
// was quiet and then uses its share at once across workers may find up to
// a chunk less per worker it left, until the window ends. (In fleet mode
// units kept in workers would be units the process holds and never gives
// back to Gubernator: leases there stay as they were.)
func roomy(pol compactPolicy, cfg *Config, e *entry) bool {
	if _, lends := pol.(lender); lends || cfg.Pace || cfg.Fleet != nil {
		return false
	}
	return e.share-e.granted >= leaseDivisor*leaseChunk && 2*max(e.prev, float64(e.demand)) <= float64(e.share)
}

// leaseWant sizes a lease for entry e (see leaseSize). Paced, or under the
// fair policy, a lease is exactly need. A fair client's batch would draw
// units from the window budget before they are used, even within its
// guarantee, and the borrow gate reads the budget as what has been used
// so far: batches make the pool look spent and strand capacity (design,
// "Leases"). Paced, a client of a partitioning policy may hold only its
// paced amount of its share; when that is short, paceAt says when it is
// not. (The fair policy paces its guarantee in its gate.)
func leaseWant(pol compactPolicy, cfg *Config, p *plan, e *entry, need, seen, t int64) (want, paceAt int64) {
	_, lends := pol.(lender)
	if !cfg.Pace && !lends {
		batch := seen / leaseRateDivisor
		if roomy(pol, cfg, e) {
			batch = max(batch, leaseChunk)
		}
		return leaseSize(e.share-e.granted, need, batch), 0
	}
	avail := e.share - e.granted
	if !lends {
		f := windowElapsed(p, cfg, t)
		avail = min(avail, pacedAmount(e.share, cfg.Burst, f)-e.granted)
		if avail < need && e.granted+need <= e.share {
			paceAt = pacedAt(p, cfg, e.share, e.granted+need)
		}
	}
	return leaseSize(avail, need, 0), paceAt
}

// slot returns the slot of window k, or nil.
func (s *fleetState) slot(k int64) *fleetSlot {
	for i := range s.slots {
		if s.slots[i].window == k {
			return &s.slots[i]
		}
	}
	return nil
}

// claim returns the slot of window k, reusing the oldest slot for it.
func (s *fleetState) claim(k int64) *fleetSlot {
	if sl := s.slot(k); sl != nil {
		return sl
	}
	old := &s.slots[0]
	for i := range s.slots {
		if s.slots[i].window < old.window {
			old = &s.slots[i]
		}
	}
	*old = fleetSlot{window: k, rem: -1, base: baseNone}
	return old
}

// allowance is what the process may admit in window k: what it holds,
// raised to the fallback while an episode is open and, after it closed,
// to the end of the window that closed it.
func (s *fleetState) allowance(k int64, f *Fleet) int64 {
	var held int64
	if sl := s.slot(k); sl != nil {
		held = sl.leased
	}
	if s.down || k <= s.fallbackUntil {
		held = max(held, f.Fallback)
	}
	return held
}

// leasePlan is one sync's sizing: units to lease for the current window and
// ahead for the next, and units of the current one to give back. probe and
// probeAhead ask what a key has left (hits 0) instead of leasing, when it
// had nothing left at the last answer: a hit on a key at 0 is what makes
// Gubernator's status stick (see consumed).
type leasePlan struct {
	lease, ahead, giveBack int64
	probe, probeAhead      bool
}

// sizeLeases sizes a sync at elapsed ns into window k (left ns remain) from
// the process's demand rate: units asked for in this window so far (in its
// first quarter, the previous window's rate if higher). The process aims to hold,
// beyond what it granted, twice what it would need until the sync after
// next; it leases when it holds less than half of that and gives back above
// one and a half times. Near the end of the window the horizon shrinks to
// what is left, so unused units go back before the window ends; then it
// also leases ahead for the start of the next window, so that no request
// waits for a callout at the roll. Until the window is half over, it holds
// no more than its demand's share of the fleet capacity (fairShare); after
// that, its share and what the others cannot use of theirs (surplus).
func sizeLeases(s *fleetState, f *Fleet, capacity, k, elapsed, left, cycle int64) leasePlan {
	var p leasePlan
	interval := int64(f.SyncInterval)
	horizon := 2*interval + int64(f.Timeout)
	floor := max(1, capacity/64) // a standing lease, so an idle process can start at once
	var rate float64             // units per ns
	cur := s.claim(k)
	if elapsed > 0 {
		rate = float64(cur.asked) / float64(max(elapsed, interval))
	}
	// The previous window speaks for the first quarter of this one, until
	// this one has seen enough: then an idle process stops leasing at once.
	if prev := s.slot(k - 1); prev != nil && 4*elapsed < cycle {
		rate = max(rate, float64(prev.asked)/float64(cycle))
	}
	// The epsilon keeps float noise from rounding an exact need up.
	need := func(span int64) int64 { return int64(math.Ceil(rate*float64(span) - 1e-6)) }
	headroom := max(0, cur.leased-cur.used)
	target := max(2*need(min(horizon, left)), floor)
	room := capacity - cur.leased
	fair := fairShare(s, k, f.Capacity, elapsed, cycle)
	early := 2*elapsed < cycle
	if early {
		room = min(room, fair-cur.leased)
	} else {
		room = min(room, max(0, fair-cur.leased)+surplus(cur, f.Capacity, fair, elapsed, left))
	}
	switch {
	case cur.count == lostCount:
		// Gubernator lost this window's count: what it grants now would
		// come on top of what the processes hold (applyReplies).
	case early && cur.leased > fair && headroom > 0:
		// Holding more than its share while others want theirs (the
		// split moved): the excess goes back now, not at the window's end.
		p.giveBack = min(headroom, cur.leased-fair)
	case headroom*2 < target:
		p.lease, p.probe = capLease(target-headroom, room, cur.rem, f.Capacity)
	case headroom*2 > target*3:
		p.giveBack = headroom - target
	}
	if left <= horizon {
		next := s.claim(k + 1)
		target := max(2*need(horizon), floor)
		room := min(capacity, fairShare(s, k, f.Capacity, elapsed, cycle)) - next.leased
		if next.leased*2 < target && next.count != lostCount {
			p.ahead, p.probeAhead = capLease(target-next.leased, room, next.rem, f.Capacity)
		}
	}
	return p
}

// fairShare is the part of the fleet capacity in proportion to the
// process's part of the fleet's demand (all of it while that is unknown).
// Early in a window the demand key holds only the first posters' demand,
// and alone it would hand the first process to sync the whole capacity; so
// the previous window's demand counts too, fading out over the first
// quarter of this one, after which the split follows this window's demand.
//
// The parts are what each side's demand grew by since the process's
// second answer in the window, not their totals: when it reads the key,
// the others have posted their demand up to their last sync, which may be
// almost a sync interval older than its own, and by as much at every read
// for a run, since every process syncs on the same period. Totals would
// give the process that reads right before the others post a share too
// large for good (and a lease is kept once taken); between two of its
// reads, though, every other process posted exactly as many intervals of
// demand as it did. Not from the first answer: the others' first post of
// the window may cover an interval that began before it, with less
// demand in it than a whole interval's. Rounded to the nearest unit, not
// up: rounding up favours the smaller shares, and the unit a rounding
// leaves goes to whoever needs it late in the window (surplus).
func fairShare(s *fleetState, k, fleetCap, elapsed, cycle int64) int64 {
	var mine, all float64
	prevWeight := max(0, 1-4*float64(elapsed)/float64(cycle))
	for _, w := range []struct {
		k      int64
		weight float64
	}{{k - 1, prevWeight}, {k, 1}} {
		sl := s.slot(w.k)
		if sl == nil || sl.base < 0 || w.weight <= 0 {
			continue
		}
		own := float64(max(0, sl.posted-sl.baseMine))
		others := float64(max(0, sl.total-sl.posted-sl.base))
		mine += w.weight * own
		all += w.weight * (own + others)
	}
	if all <= 0 || mine >= all {
		return fleetCap
	}
	return int64(math.Round(float64(fleetCap) * mine / all))
}

// surplus is what a process may lease beyond its fair share late in a
// window: what the key has left (rem) beyond the rest of this process's
// share and what the other processes can still use of theirs. Their part of the fleet's demand, at the
// rate they asked so far, sizes what they can use until the window ends;
// what they leased is the capacity less the key's remaining and this
// process's lease. So a share that its process does not need goes to
// whoever does, and one that its process is using is not raced for.
// Nothing while the key's remaining or the fleet's demand is unknown.
func surplus(cur *fleetSlot, fleetCap, fair, elapsed, left int64) int64 {
	if cur.rem < 0 || cur.total <= 0 || elapsed <= 0 {
		return 0
	}
	othersLeased := max(0, fleetCap-cur.rem-cur.leased)
	othersUnmet := max(0, fleetCap-fair-othersLeased)
	othersAsked := max(0, cur.total-min(cur.posted, cur.asked))
	othersNeed := int64(math.Ceil(float64(othersAsked) * float64(left) / float64(elapsed)))
	mine := max(0, fair-cur.leased) // the part of rem that is this process's own share
	return max(0, cur.rem-mine-min(othersUnmet, othersNeed))
}

// capLease bounds a lease by room (the process's own capacity left, and its
// fair share early in the window) and by half of what the key had left at
// its last answer (rem; before any answer, the whole fleet capacity): two
// processes that ask at once, each for at most half of what is left, both
// get what they asked, so the split follows demand, not which timer fires
// first. When the key had nothing left, it probes instead (probe true):
// others may have given units back since.
func capLease(want, room, rem, fleetCap int64) (n int64, probe bool) {
	n = max(min(want, room), 0)
	if rem < 0 {
		rem = fleetCap
	}
	if rem == 0 {
		return 0, n > 0
	}
	return min(n, max(1, rem/2)), false
}

// syncDue reports whether the syncer's callout is due at t, the previous
// one having been due at last, and when this one counts as sent. Callouts
// keep to a schedule of one per interval rather than one interval after
// the tick that sent the previous: ticks that come a hair early or late
// would otherwise stretch every other gap by a tick. A tick within an
// eighth of the interval before the due time sends, so two callouts are
// never closer than 7/8 of the interval; a syncer a whole interval behind
// its schedule (idle, or just elected) starts a new one at t.
func syncDue(last, t, interval int64) (due bool, sent int64) {
	next := last + interval
	switch {
	case t < next-interval/8:
		return false, last
	case t-next >= interval:
		return true, t
	}
	return true, next
}

// clientHash maps a client id to its 64-bit FNV-1a hash, never zero (zero
// marks a free place). Clients are identified in shared state by the hash
// of their id: fixed-size entries keep buckets compact whatever the ids
// look like. Ids are not secrets (any caller can send any id), so a keyed
// hash would buy nothing; 64 bits make accidental collisions negligible for
// the bounded client table (about 3e-10 for 100,000 clients).
func clientHash(id string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= prime
	}
	if h == 0 {
		return 1
	}
	return h
}
