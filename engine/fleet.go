package engine

import (
	"errors"
	"math"
	"strconv"
	"time"
)

// Fleet mode: several processes (Envoys) share one capacity per window by
// leasing their window budget from Gubernator, one key per limit and window.
// docs/design.md ("Fleet mode") gives the argument; this file holds the
// protocol:
//
//   - The fleet record (key <prefix>/f) is the process's lease state: what it
//     holds from Gubernator for the previous, current and next window, the
//     demand its workers saw (units asked for, rejected ones included), the
//     fleet's demand as Gubernator last counted it, the fallback in force,
//     and which worker syncs. Only the elected syncer changes the leases;
//     any worker adds its demand and may take over an expired election.
//   - Each sync also adds the process's new demand to a second Gubernator
//     key of the window (<key>/demand) whose answer is the fleet's demand:
//     until the window is half over, a process leases at most its share of
//     the fleet capacity in proportion to its share of the fleet's demand;
//     after that, what is left goes to whoever still needs it.
//   - The window budget (view.adjust) grants at most what the process holds
//     for the window (fleetCap): Gubernator granted it first.
//   - Units are given back by taking them out of the budget first (so no
//     worker can still grant them), then lowering the lease, then sending
//     negative hits: at every step the budget grants at most what is held.
//   - When Gubernator cannot be reached, slow or garbled, the process admits
//     at most max(held, Fallback) in that window and the next, and leases
//     nothing more for them: Gubernator's count of those windows may be
//     gone (a restarted peer forgets), so they are not counted twice.

// Fleet configures fleet mode for one limit. Config.Capacity stays what this
// process may admit per window at most (and what plans split); Fleet.Capacity
// is what the whole fleet admits per window.
type Fleet struct {
	// Capacity is the fleet's capacity per window: the Gubernator limit.
	Capacity int64
	// Fallback is what this process may admit per window while Gubernator
	// cannot be reached, answers too slowly or answers garbage.
	Fallback int64
	// SyncInterval is the time between two callouts of the process.
	SyncInterval time.Duration
	// Timeout bounds one callout; a reply later than that is a failure.
	Timeout time.Duration
}

// Bounds of the fleet configuration.
const (
	MinSyncInterval = 50 * time.Millisecond
	// fleetSlots is how many windows the fleet record tracks: the previous
	// (its demand sizes the next leases), the current and the next (leased
	// ahead of need).
	fleetSlots = 3
	// FleetName is the Gubernator rate-limit name of every fleet key.
	FleetName = "borrowcycle"
)

// validateFleet checks the fleet block against the limit's own fields.
func (c *Config) validateFleet() error {
	f := c.Fleet
	if f == nil {
		return nil
	}
	switch {
	case f.Capacity < c.Capacity || f.Capacity > MaxCapacity:
		return fieldErr("fleet.capacity", "must be an integer in [capacity=%d, %d], got %d", c.Capacity, int64(MaxCapacity), f.Capacity)
	case f.Fallback < 0 || f.Fallback > c.Capacity:
		return fieldErr("fleet.fallback_capacity", "must be an integer in [0, capacity=%d], got %d", c.Capacity, f.Fallback)
	case f.SyncInterval < MinSyncInterval || f.SyncInterval > c.Cycle/4:
		return fieldErr("fleet.sync_interval", "must be in [%s, cycle/4=%s], got %s", MinSyncInterval, c.Cycle/4, f.SyncInterval)
	case f.Timeout <= 0 || f.Timeout > f.SyncInterval:
		return fieldErr("fleet.timeout", "must be in (0, sync_interval=%s], got %s", f.SyncInterval, f.Timeout)
	}
	return nil
}

// LeaseHit is one request of a callout: hits units of Gubernator key Key
// (negative: a give-back), against Limit per Duration. A Demand hit adds
// to the window's demand counter instead of leasing.
type LeaseHit struct {
	Window   int64
	Demand   bool
	Key      string
	Hits     int64
	Limit    int64
	Duration time.Duration
}

// LeaseCall is one callout to Gubernator: its requests, in one
// GetRateLimits call.
type LeaseCall struct {
	ID   uint64 // tells a late reply of an earlier call apart
	Hits []LeaseHit
}

// LeaseReply is Gubernator's answer to one LeaseHit.
type LeaseReply struct {
	Over      bool  // OVER_LIMIT: nothing was consumed
	Remaining int64 // what the key has left
}

// FleetEvent is what a callout's outcome changed, for the host's metrics
// and its log (one line per episode, not per failure).
type FleetEvent struct {
	Failed    bool // the callout failed
	FellBack  bool // it opened a fallback episode
	Rejoined  bool // it closed one
	Cause     string
	Leased    int64 // units leased by this callout
	GivenBack int64 // units this callout gave back
}

// fleetSlot is the process's lease of one window.
type fleetSlot struct {
	window int64
	leased int64 // units Gubernator granted for the window, net of give-backs
	asked  int64 // units the process's requests asked for in the window
	posted int64 // of which added to the demand key
	total  int64 // the fleet's demand at the last sync; 0: unknown
	used   int64 // the budget's granted at the last sync of the window
	rem    int64 // what the key had left at its last answer; -1: no answer yet
}

// fleetState is the fleet record.
type fleetState struct {
	nextID        uint64 // worker ids handed out
	syncer        uint64 // the elected syncer's id
	syncerUntil   int64  // its election ends (Unix ns) unless renewed
	lastCall      int64  // when the last callout was sent (Unix ns)
	fallbackUntil int64  // last window with the fallback in force
	down          bool   // a fallback episode is open
	slots         [fleetSlots]fleetSlot
}

const noWindow = math.MinInt64

func newFleetState() fleetState {
	s := fleetState{fallbackUntil: noWindow}
	for i := range s.slots {
		s.slots[i] = fleetSlot{window: noWindow, rem: -1}
	}
	return s
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
	*old = fleetSlot{window: k, rem: -1}
	return old
}

// allowance is what the process may admit in window k: what it holds,
// raised to the fallback while that is in force.
func (s *fleetState) allowance(k int64, f *Fleet) int64 {
	var held int64
	if sl := s.slot(k); sl != nil {
		held = sl.leased
	}
	if k <= s.fallbackUntil {
		held = max(held, f.Fallback)
	}
	return held
}

// fleetWorker is one worker's part of fleet mode.
type fleetWorker struct {
	cfg      *Config
	key      string
	id       uint64 // this worker's id; 0 until it has one
	asked    int64  // demand not yet written to the record, of askedWin
	askedWin int64
	inflight uint64 // id of the callout awaiting its reply; 0: none
	sentAt   int64
	calls    uint64 // callouts this worker sent
	buf      []byte
}

func newFleetWorker(cfg *Config) *fleetWorker {
	if cfg.Fleet == nil {
		return nil
	}
	return &fleetWorker{cfg: cfg, key: cfg.KeyPrefix + "/f"}
}

// fleetCap is the most the window budget may have granted in window k: its
// capacity, and in fleet mode no more than the process holds for k. An
// unreadable fleet record holds nothing.
func (g *view) fleetCap(capacity, k int64) int64 {
	if g.fleet == nil {
		return capacity
	}
	s, _, err := g.fleet.read(g.store)
	if err != nil {
		return 0
	}
	return min(capacity, s.allowance(k, g.cfg.Fleet))
}

// noteAsked counts units a request asked for in window: the demand leases
// are sized on. It is nil-safe, so the limiter calls it in any mode.
func (w *fleetWorker) noteAsked(n, window int64) {
	if w == nil {
		return
	}
	if window != w.askedWin {
		w.asked, w.askedWin = 0, window
	}
	w.asked += n
}

// FleetCallAt is the fleet step of a tick, to run on every worker: it
// writes this worker's unserved demand, keeps or takes over the syncer
// election, and, on the syncer when a sync is due, returns the callout to
// send now (ok false: nothing to send). The host sends it and reports the
// outcome with FleetDoneAt. Give-backs are taken out of the budget before
// the call is returned, so they are in force whatever becomes of it.
func (l *Limiter) FleetCallAt(now time.Time) (call LeaseCall, ok bool) {
	w := l.view.fleet
	if w == nil {
		return LeaseCall{}, false
	}
	t := now.UnixNano()
	f := l.cfg.Fleet
	if w.inflight != 0 && t-w.sentAt < int64(f.Timeout+f.SyncInterval) {
		return LeaseCall{}, false // a reply (or the host's timeout) is still due
	}
	w.inflight = 0
	k, _, _ := WindowAt(now, l.cfg.Cycle, l.cfg.WindowOffset)
	var syncer, due bool
	var id uint64 // this worker's id, kept only once the record holding it is written
	err := w.update(l.view.store, l.cfg.CASRetries, func(s *fleetState) bool {
		changed := false
		id = w.id
		if id == 0 || id > s.nextID {
			// New, or the record was started afresh since this worker took
			// its id: take one the record hands out, so no two workers share it.
			s.nextID++
			id = s.nextID
			changed = true
		}
		if w.asked > 0 && w.askedWin >= k-1 {
			sl := s.claim(w.askedWin)
			sl.asked = min(sl.asked+w.asked, MaxCapacity)
			changed = true
		}
		syncer = s.syncer == id || s.syncerUntil <= t
		if syncer {
			s.syncer, s.syncerUntil = id, t+3*int64(f.SyncInterval)
			due = t-s.lastCall >= int64(f.SyncInterval)
			if due {
				s.lastCall = t
			}
			changed = true
		}
		return changed
	})
	if err != nil {
		l.obs.StoreFailure("fleet record", err)
		return LeaseCall{}, false
	}
	w.id, w.asked = id, 0
	if !syncer || !due {
		return LeaseCall{}, false
	}
	call = l.planCall(t, k)
	if len(call.Hits) == 0 {
		return LeaseCall{}, false
	}
	w.calls++
	call.ID = w.calls
	w.inflight, w.sentAt = call.ID, t
	return call, true
}

// planCall sizes the syncer's callout at t in window k from the demand the
// budget and the fleet record show, and takes give-backs out of the budget.
func (l *Limiter) planCall(t, k int64) LeaseCall {
	w, f := l.view.fleet, l.cfg.Fleet
	used := l.budgetUsed(k)
	var s fleetState
	var plan leasePlan
	err := w.update(l.view.store, l.cfg.CASRetries, func(st *fleetState) bool {
		cur := st.claim(k)
		cur.used = used
		s = *st
		return true
	})
	if err != nil {
		l.obs.StoreFailure("fleet record", err)
		return LeaseCall{}
	}
	_, start, end := WindowAt(time.Unix(0, t), l.cfg.Cycle, l.cfg.WindowOffset)
	plan = sizeLeases(&s, f, l.cfg.Capacity, k, t-start.UnixNano(), end.UnixNano()-t, int64(l.cfg.Cycle))
	var call LeaseCall
	if cur := s.slot(k); cur != nil {
		d := l.hit(k, cur.asked-cur.posted)
		d.Demand, d.Key, d.Limit = true, d.Key+"/demand", MaxCapacity
		call.Hits = append(call.Hits, d)
	}
	if plan.giveBack > 0 {
		if got := l.reclaim(t, k, plan.giveBack); got > 0 {
			call.Hits = append(call.Hits, l.hit(k, -got))
		}
	}
	if plan.lease > 0 || plan.probe {
		call.Hits = append(call.Hits, l.hit(k, plan.lease))
	}
	if plan.ahead > 0 || plan.probeAhead {
		call.Hits = append(call.Hits, l.hit(k+1, plan.ahead))
	}
	return call
}

func (l *Limiter) hit(k, n int64) LeaseHit {
	f := l.cfg.Fleet
	return LeaseHit{
		Window: k,
		Key:    l.cfg.KeyPrefix + "/" + strconv.FormatInt(k, 10),
		Hits:   n,
		Limit:  f.Capacity,
		// The key must outlive its window wherever it is first hit: up to
		// a lease-ahead horizon before the window starts.
		Duration: 2*l.cfg.Cycle + 4*f.SyncInterval,
	}
}

// budgetUsed is what the window budget has granted in window k.
func (l *Limiter) budgetUsed(k int64) int64 {
	raw, _, err := l.view.store.Get(l.view.budgetKey)
	if err != nil {
		return 0
	}
	v, err := decodeBudget(raw)
	if err != nil || v.window != k {
		return 0
	}
	return v.granted
}

// reclaim gives n units of window k back: it takes them out of the budget
// (so no worker can grant them any more), lowers the lease by what it got,
// and returns the budget units, which the lower lease no longer covers. It
// returns the units to send back to Gubernator.
func (l *Limiter) reclaim(t, k, n int64) int64 {
	if err := l.current(t); err != nil || l.view.plan.window != k {
		return 0
	}
	got, _, err := l.view.adjust(n, borrowGate{})
	if err != nil || got <= 0 {
		return 0
	}
	w := l.view.fleet
	err = w.update(l.view.store, l.cfg.CASRetries, func(s *fleetState) bool {
		sl := s.slot(k)
		if sl == nil {
			got = 0
			return false
		}
		got = min(got, sl.leased)
		sl.leased -= got
		return true
	})
	if err != nil {
		// The units stay taken: stranded for the window, never granted twice.
		l.obs.StoreFailure("fleet record", err)
		return 0
	}
	l.view.give(got)
	return got
}

// FleetDoneAt applies the outcome of call: replies (one per hit, in order)
// or err when the callout failed, timed out or its answer was garbage.
func (l *Limiter) FleetDoneAt(now time.Time, call LeaseCall, replies []LeaseReply, err error) FleetEvent {
	w := l.view.fleet
	if w == nil {
		return FleetEvent{}
	}
	if call.ID != w.inflight {
		return FleetEvent{} // a late reply to a call already given up on
	}
	w.inflight = 0
	if err == nil && len(replies) != len(call.Hits) {
		err = errors.New("gubernator answered " + strconv.Itoa(len(replies)) + " responses to " + strconv.Itoa(len(call.Hits)) + " requests")
	}
	k, _, _ := WindowAt(now, l.cfg.Cycle, l.cfg.WindowOffset)
	var ev FleetEvent
	uerr := w.update(l.view.store, l.cfg.CASRetries, func(s *fleetState) bool {
		ev = applyReplies(s, call, replies, err, k)
		return true
	})
	if uerr != nil {
		l.obs.StoreFailure("fleet record", uerr)
	}
	return ev
}

// applyReplies is the pure part of FleetDoneAt: it records what Gubernator
// granted, or opens (or extends) a fallback episode.
func applyReplies(s *fleetState, call LeaseCall, replies []LeaseReply, err error, k int64) FleetEvent {
	var ev FleetEvent
	if err != nil {
		ev.Failed, ev.Cause = true, err.Error()
		s.fallbackUntil = max(s.fallbackUntil, k+1)
		if !s.down {
			s.down, ev.FellBack = true, true
		}
		return ev
	}
	if s.down {
		s.down, ev.Rejoined = false, true
	}
	for i, h := range call.Hits {
		r := replies[i]
		if h.Demand {
			if sl := s.slot(h.Window); sl != nil && !r.Over {
				sl.posted += h.Hits
				sl.total = max(h.Limit-r.Remaining, sl.asked)
			}
			continue
		}
		if h.Hits < 0 {
			ev.GivenBack -= h.Hits // lowered before the call
			continue
		}
		if h.Window <= s.fallbackUntil || h.Window < k-1 {
			continue // a window whose count is not trusted, or over
		}
		sl := s.claim(h.Window)
		if h.Hits == 0 || !consumed(h.Hits, r) {
			sl.rem = max(r.Remaining, 0) // a probe, or a refused lease
			continue
		}
		sl.leased += h.Hits
		sl.rem = max(r.Remaining, 0)
		ev.Leased += h.Hits
	}
	return ev
}

// consumed reports whether Gubernator took a lease's hits. A refused hit
// is answered OVER_LIMIT and leaves remaining < hits. But Gubernator
// v2.4.0's token bucket keeps the status of the last hit that found the key
// at 0: from then on it answers OVER_LIMIT to every hit on the key, consumed
// or not. So a hit that leaves remaining ≥ hits was consumed whatever the
// status says; an OVER_LIMIT below that is taken as refused, which at worst
// leaves units counted and unused (never granted twice). Asking at most
// half of what the key had left (capLease) keeps that case rare.
func consumed(hits int64, r LeaseReply) bool { return !r.Over || r.Remaining >= hits }

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
// no more than its demand's share of the fleet capacity (fairShare).
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
	if k > s.fallbackUntil {
		headroom := max(0, cur.leased-cur.used)
		target := max(2*need(min(horizon, left)), floor)
		room := capacity - cur.leased
		fair := fairShare(s, k, f.Capacity, elapsed, cycle)
		early := 2*elapsed < cycle
		if early {
			room = min(room, fair-cur.leased)
		}
		switch {
		case early && cur.leased > fair && headroom > 0:
			// Holding more than its share while others want theirs (the
			// split moved): the excess goes back now, not at the window's end.
			p.giveBack = min(headroom, cur.leased-fair)
		case headroom*2 < target:
			p.lease, p.probe = capLease(target-headroom, room, cur.rem)
		case headroom*2 > target*3:
			p.giveBack = headroom - target
		}
	}
	if left <= horizon && k+1 > s.fallbackUntil {
		next := s.claim(k + 1)
		target := max(2*need(horizon), floor)
		room := min(capacity, fairShare(s, k, f.Capacity, elapsed, cycle)) - next.leased
		if next.leased*2 < target {
			p.ahead, p.probeAhead = capLease(target-next.leased, room, next.rem)
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
func fairShare(s *fleetState, k, fleetCap, elapsed, cycle int64) int64 {
	var mine, all float64
	prevWeight := max(0, 1-4*float64(elapsed)/float64(cycle))
	for _, w := range []struct {
		k      int64
		weight float64
	}{{k - 1, prevWeight}, {k, 1}} {
		if sl := s.slot(w.k); sl != nil && sl.total > 0 && w.weight > 0 {
			// The fleet's demand as last counted, plus this process's
			// demand not yet posted to it.
			mine += w.weight * float64(sl.asked)
			all += w.weight * float64(sl.total+max(0, sl.asked-sl.posted))
		}
	}
	if all <= 0 || mine >= all {
		return fleetCap
	}
	return int64(math.Ceil(float64(fleetCap) * mine / all))
}

// capLease bounds a lease by room (the process's own capacity left, and its
// fair share early in the window) and by half of what the key had left at
// its last answer (rem, -1 before any): a hit of at most half of what is
// left leaves at least as much as it took, so its answer is unambiguous
// even when Gubernator's status sticks (see consumed). When the key had nothing left, it probes instead (probe true):
// others may have given units back since.
func capLease(want, room, rem int64) (n int64, probe bool) {
	n = max(min(want, room), 0)
	switch {
	case rem == 0:
		return 0, n > 0
	case rem > 0:
		n = min(n, max(1, rem/2))
	}
	return n, false
}
