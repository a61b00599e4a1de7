package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Fleet mode: several processes (Envoys) share one capacity per window by
// leasing their window budget from Gubernator, one key per limit and window.
// docs/design.md ("Fleet mode") gives the argument; this file holds the
// protocol:
//
//   - The fleet record (recordKey "f") is the process's lease state: what it
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
//     for the window (heldIn): Gubernator granted it first.
//   - Units are given back by taking them out of the budget first (so no
//     worker can still grant them), then lowering the lease, then sending
//     negative hits: at every step the budget grants at most what is held.
//   - When Gubernator cannot be reached, slow or garbled, the process admits
//     at most max(held, Fallback) per window until a callout is answered
//     again, and in the window of that answer. Leasing goes on meanwhile:
//     what Gubernator grants it counts, so each window admits at most the
//     fleet capacity plus the fallbacks in force in it.
//   - A callout that got no answer is sent once more at once (LeaseCall.Retry),
//     so that Envoy's load balancer can take it to another peer: one peer
//     down is not an outage.

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

// Retry is the callout to send once more, at once, when call got no
// answer (Envoy's load balancer may take it to another peer): its leases
// and demand without its give-backs. An unanswered call may still have
// reached Gubernator. A lease sent twice then leaves units counted and
// unused, which is safe; a give-back sent twice would hand units back
// twice, so it is dropped, and its units stay counted.
func (c LeaseCall) Retry() LeaseCall {
	r := LeaseCall{ID: c.ID, Hits: make([]LeaseHit, 0, len(c.Hits))}
	for _, h := range c.Hits {
		if h.Hits >= 0 {
			r.Hits = append(r.Hits, h)
		}
	}
	return r
}

// LeaseReply is Gubernator's answer to one LeaseHit.
type LeaseReply struct {
	Over      bool  // OVER_LIMIT: nothing was consumed
	Remaining int64 // what the key has left
	// Reset is the key's reset_time (Unix ms; 0: not given). It is fixed
	// when Gubernator creates the key's count, so a different one means
	// the count was created again: its owner restarted or changed.
	Reset int64
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
	LostCount bool  // Gubernator lost a window's count (see applyReplies)
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
	// The demand split is read from what the fleet's demand grew by since
	// the window's second answer (see fairShare): the others' demand then
	// (total − posted; baseNone, baseNext before it), and this process's
	// posted.
	base, baseMine int64
	// count is the reset_time of the key's count this process leased from
	// (0: none yet; lostCount: a later answer came from another count, and
	// the window leases nothing more).
	count int64
}

// lostCount marks a window whose key's count Gubernator lost while the
// process held units of it (see applyReplies).
const lostCount = -1

// fleetSlot.base before the window's second answer of the demand key: none
// yet, and one (the next sets the base).
const (
	baseNone = -1
	baseNext = -2
)

// fleetState is the fleet record.
type fleetState struct {
	nextID        uint64 // worker ids handed out
	syncer        uint64 // the elected syncer's id
	syncerUntil   int64  // its election ends (Unix ns) unless renewed
	lastCall      int64  // when the last callout was sent (Unix ns)
	fallbackUntil int64  // last window of a closed fallback episode
	down          bool   // a fallback episode is open: every window is under it
	slots         [fleetSlots]fleetSlot
}

const noWindow = math.MinInt64

func newFleetState() fleetState {
	s := fleetState{fallbackUntil: noWindow}
	for i := range s.slots {
		s.slots[i] = fleetSlot{window: noWindow, rem: -1, base: baseNone}
	}
	return s
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
	return &fleetWorker{cfg: cfg, key: recordKey(cfg, "f")}
}

// heldIn is what the process holds for window k (fleetState.allowance):
// the most its window budget may have granted in k (see holding). An
// unreadable fleet record holds nothing.
func (w *fleetWorker) heldIn(store Store, k int64) int64 {
	s, _, err := w.read(store)
	if err != nil {
		return 0
	}
	return s.allowance(k, w.cfg.Fleet)
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

// call is the fleet step of a tick at t (see Limiter.FleetCallAt): it
// writes this worker's unserved demand, keeps or takes over the syncer
// election, and, on the syncer when a sync is due, returns the callout to
// send now (ok false: nothing to send), sized from the demand the budget
// and the fleet record show. Give-backs are taken out of the budget of v
// before the call is returned, so they are in force whatever becomes of
// it.
func (w *fleetWorker) call(v *view, t int64) (call LeaseCall, ok bool) {
	f := w.cfg.Fleet
	if w.inflight != 0 && t-w.sentAt < int64(f.Timeout+f.SyncInterval) {
		return LeaseCall{}, false // a reply (or the host's timeout) is still due
	}
	w.inflight = 0
	k := windowIndex(t, w.cfg)
	var syncer, due bool
	var id uint64 // this worker's id, kept only once the record holding it is written
	err := w.updateFleet(v.store, func(s *fleetState) bool {
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
			due, s.lastCall = syncDue(s.lastCall, t, int64(f.SyncInterval))
			changed = true
		}
		return changed
	})
	if err != nil {
		v.obs.StoreFailure("fleet record", err)
		return LeaseCall{}, false
	}
	w.id, w.asked = id, 0
	if !syncer || !due {
		return LeaseCall{}, false
	}
	call = w.plan(v, t, k)
	if len(call.Hits) == 0 {
		return LeaseCall{}, false
	}
	w.calls++
	call.ID = w.calls
	w.inflight, w.sentAt = call.ID, t
	return call, true
}

// plan sizes the syncer's callout at t in window k (sizeLeases) and takes
// give-backs out of v's budget, once v holds window k (a give-back needs
// the view at the window it gives back from).
func (w *fleetWorker) plan(v *view, t, k int64) LeaseCall {
	used := v.grantedIn(k)
	var s fleetState
	err := w.updateFleet(v.store, func(st *fleetState) bool {
		st.claim(k).used = used
		s = *st
		return true
	})
	if err != nil {
		v.obs.StoreFailure("fleet record", err)
		return LeaseCall{}
	}
	start, end := windowStart(k, w.cfg), windowEnd(k, w.cfg)
	sized := sizeLeases(&s, w.cfg.Fleet, w.cfg.Capacity, k, t-start, end-t, int64(w.cfg.Cycle))
	var call LeaseCall
	if cur := s.slot(k); cur != nil {
		d := w.hit(k, cur.asked-cur.posted)
		d.Demand, d.Key, d.Limit = true, d.Key+"/demand", MaxCapacity
		call.Hits = append(call.Hits, d)
	}
	if sized.giveBack > 0 && v.current(t) == nil && v.plan.window == k {
		if got := w.reclaim(v, k, sized.giveBack, t); got > 0 {
			call.Hits = append(call.Hits, w.hit(k, -got))
		}
	}
	if sized.lease > 0 || sized.probe {
		call.Hits = append(call.Hits, w.hit(k, sized.lease))
	}
	if sized.ahead > 0 || sized.probeAhead {
		call.Hits = append(call.Hits, w.hit(k+1, sized.ahead))
	}
	return call
}

// reclaim gives n units of window k, v's, back at t: it takes them out of
// the budget (so no worker can grant them any more), lowers the lease by
// what it got, and returns the budget units, which the lower lease no
// longer covers. It returns the units to send back to Gubernator. Units
// booked for a client and due at t are not given back.
func (w *fleetWorker) reclaim(v *view, k, n, t int64) int64 {
	got, _, _, err := v.adjust(n, borrowGate{}, &bookAsk{nobody: true, t: t})
	if err != nil || got <= 0 {
		return 0
	}
	err = w.updateFleet(v.store, func(s *fleetState) bool {
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
		v.obs.StoreFailure("fleet record", err)
		return 0
	}
	v.give(got, false)
	return got
}

func (w *fleetWorker) hit(k, n int64) LeaseHit {
	f := w.cfg.Fleet
	return LeaseHit{
		Window: k,
		Key:    w.cfg.KeyPrefix + "/" + strconv.FormatInt(k, 10),
		Hits:   n,
		Limit:  f.Capacity,
		// The key must outlive its window wherever it is first hit: up to
		// a lease-ahead horizon before the window starts.
		Duration: 2*w.cfg.Cycle + 4*f.SyncInterval,
	}
}

// done applies the outcome of call in window k (see Limiter.FleetDoneAt).
func (w *fleetWorker) done(v *view, k int64, call LeaseCall, replies []LeaseReply, err error) FleetEvent {
	if call.ID != w.inflight {
		return FleetEvent{} // a late reply to a call already given up on
	}
	w.inflight = 0
	if err == nil && len(replies) != len(call.Hits) {
		err = errors.New("gubernator answered " + strconv.Itoa(len(replies)) + " responses to " + strconv.Itoa(len(call.Hits)) + " requests")
	}
	var ev FleetEvent
	uerr := w.updateFleet(v.store, func(s *fleetState) bool {
		ev = applyReplies(s, call, replies, err, k)
		return true
	})
	if uerr != nil {
		v.obs.StoreFailure("fleet record", uerr)
	}
	return ev
}

// The fleet record (recordKey "f", in fleet mode): worker ids, the elected
// syncer, and what each window holds and asked. Written by
// fleetWorker.updateFleet only.

// The fleet record's encoding: a version byte, five integers, the down flag,
// and fleetSlots slots of ten integers, little-endian.
const (
	fleetVersion = 3
	slotLen      = 10 * 8
	fleetLen     = 1 + 5*8 + 1 + fleetSlots*slotLen + sealLen
)

func appendFleet(dst []byte, s *fleetState) []byte {
	le := binary.LittleEndian
	dst = append(dst[:0], fleetVersion)
	dst = le.AppendUint64(dst, s.nextID)
	dst = le.AppendUint64(dst, s.syncer)
	dst = le.AppendUint64(dst, uint64(s.syncerUntil))
	dst = le.AppendUint64(dst, uint64(s.lastCall))
	dst = le.AppendUint64(dst, uint64(s.fallbackUntil))
	var down byte
	if s.down {
		down = 1
	}
	dst = append(dst, down)
	for _, sl := range s.slots {
		dst = le.AppendUint64(dst, uint64(sl.window))
		dst = le.AppendUint64(dst, uint64(sl.leased))
		dst = le.AppendUint64(dst, uint64(sl.asked))
		dst = le.AppendUint64(dst, uint64(sl.posted))
		dst = le.AppendUint64(dst, uint64(sl.total))
		dst = le.AppendUint64(dst, uint64(sl.used))
		dst = le.AppendUint64(dst, uint64(sl.rem))
		dst = le.AppendUint64(dst, uint64(sl.base))
		dst = le.AppendUint64(dst, uint64(sl.baseMine))
		dst = le.AppendUint64(dst, uint64(sl.count))
	}
	return seal(dst)
}

// decodeFleet reads a fleet record, refusing values no writer produces: a
// record that holds more than a capacity could must not be trusted.
func decodeFleet(b []byte) (fleetState, error) {
	if len(b) != fleetLen || b[0] != fleetVersion || b[41] > 1 {
		return fleetState{}, fmt.Errorf("%w: fleet record of %d bytes", errCorrupt, len(b))
	}
	if _, err := unseal(b); err != nil {
		return fleetState{}, err
	}
	le := binary.LittleEndian
	u := func(i int) int64 { return int64(le.Uint64(b[i:])) }
	s := fleetState{
		nextID:        le.Uint64(b[1:]),
		syncer:        le.Uint64(b[9:]),
		syncerUntil:   u(17),
		lastCall:      u(25),
		fallbackUntil: u(33),
		down:          b[41] == 1,
	}
	for i := range s.slots {
		o := 42 + i*slotLen
		sl := fleetSlot{window: u(o), leased: u(o + 8), asked: u(o + 16), posted: u(o + 24), total: u(o + 32), used: u(o + 40), rem: u(o + 48),
			base: u(o + 56), baseMine: u(o + 64), count: u(o + 72)}
		if !inRange(sl.leased) || !inRange(sl.asked) || !inRange(sl.posted) || !inRange(sl.total) || !inRange(sl.used) ||
			sl.rem < -1 || sl.rem > MaxCapacity || sl.base < baseNext || sl.base > MaxCapacity || !inRange(sl.baseMine) || sl.count < lostCount {
			return fleetState{}, fmt.Errorf("%w: impossible fleet slot", errCorrupt)
		}
		s.slots[i] = sl
	}
	return s, nil
}

func inRange(n int64) bool { return n >= 0 && n <= MaxCapacity }

func (w *fleetWorker) read(store Store) (fleetState, uint32, error) {
	raw, cas, err := store.Get(w.key)
	if errors.Is(err, ErrNotFound) {
		return newFleetState(), casCreate, nil
	}
	if err != nil {
		return fleetState{}, 0, err
	}
	s, err := decodeFleet(raw)
	return s, cas, err
}

// updateFleet is the one read-modify-write of the fleet record: change edits the
// state and reports whether to write it. A record that cannot be read is
// started afresh (it holds nothing, so the budget grants nothing meanwhile).
func (w *fleetWorker) updateFleet(store Store, change func(s *fleetState) bool) error {
	return casUpdate(store, NopObserver{}, w.cfg.CASRetries, w.key, "fleet", nil, func(st stored) ([]byte, error) {
		raw, missing := st.raw, st.missing
		s := newFleetState()
		if !missing {
			v, err := decodeFleet(raw)
			if err == nil {
				s = v
			}
		}
		if !change(&s) {
			return nil, nil
		}
		w.buf = appendFleet(w.buf[:0], &s)
		return w.buf, nil
	})
}

// applyReplies is the pure part of fleetWorker.done: it records what Gubernator
// granted, or opens (or extends) a fallback episode.
func applyReplies(s *fleetState, call LeaseCall, replies []LeaseReply, err error, k int64) FleetEvent {
	var ev FleetEvent
	if err != nil {
		ev.Failed, ev.Cause = true, err.Error()
		if !s.down {
			s.down, ev.FellBack = true, true
		}
		return ev
	}
	if s.down {
		// The fallback ends here, but it stays the floor of this window:
		// what the process admitted under it is admitted.
		s.down, ev.Rejoined = false, true
		s.fallbackUntil = max(s.fallbackUntil, k)
	}
	for i, h := range call.Hits {
		r := replies[i]
		if h.Demand {
			if sl := s.slot(h.Window); sl != nil && !r.Over {
				sl.posted += h.Hits
				sl.total = max(h.Limit-r.Remaining, sl.asked)
				switch sl.base {
				case baseNone:
					sl.base = baseNext
				case baseNext:
					sl.base, sl.baseMine = max(0, sl.total-sl.posted), sl.posted
				}
			}
			continue
		}
		if h.Hits < 0 {
			ev.GivenBack -= h.Hits // lowered before the call
			continue
		}
		if h.Window < k-1 {
			continue // a window that is over
		}
		sl := s.claim(h.Window)
		if sl.count == lostCount {
			continue
		}
		if r.Reset != 0 && sl.count != 0 && r.Reset != sl.count && sl.leased > 0 {
			// The key's count was created again (its owner restarted, or a
			// peer left and another took the key over) while this process
			// held units of the old one: the new count does not know them,
			// so what it grants would come on top. The window keeps what it
			// holds and leases nothing more; what this answer granted stays
			// counted, unused.
			sl.count = lostCount
			ev.LostCount = true
			continue
		}
		if r.Reset != 0 {
			sl.count = r.Reset
		}
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
// is answered OVER_LIMIT and leaves remaining < hits. But Gubernator's
// token bucket (v2.4.0, and v2.13.0 still) keeps the status of the last
// hit that found the key at 0: from then on it answers OVER_LIMIT to every
// hit on the key, consumed or not. So a hit that leaves remaining ≥ hits was consumed whatever the
// status says; an OVER_LIMIT below that is taken as refused, which at worst
// leaves units counted and unused (never granted twice). Asking at most
// half of what the key had left (capLease) keeps that case rare.
func consumed(hits int64, r LeaseReply) bool { return !r.Over || r.Remaining >= hits }
