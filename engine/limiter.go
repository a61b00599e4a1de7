package engine

import (
	"errors"
	"time"
)

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock sets the clock a Limiter's owner reads (default: the wall
// clock). The Limiter itself decides at the times it is given.
func WithClock(c Clock) Option { return func(l *Limiter) { l.clock = c } }

// WithObserver sets who hears about plans, retries and failures.
func WithObserver(o Observer) Option { return func(l *Limiter) { l.obs = o } }

// Limiter decides one worker's requests for one limit. Every Envoy worker
// VM has its own; they agree through the Store. A Limiter is not safe for
// concurrent use: each worker is single-threaded, and so is each goroutine
// that plays one in tests.
type Limiter struct {
	cfg   Config
	clock Clock
	obs   Observer
	view  *view
	// failOpen counts the units this worker admitted on store errors in
	// one window (see failure).
	failOpen struct{ window, used int64 }
	latest   int64 // the latest clock reading (see read)

	// With MaxIDsPerPeer: the peer records, and what this worker learnt of
	// each peer's ids in the window (see peerAllows).
	peers     *peerTable
	peerMarks map[uint64]peerMark
}

// peerMark is a peer's ids in a window as this worker last read them: an
// id among them is the peer's for the rest of the window, and once there
// are MaxIDsPerPeer of them no other id can join.
type peerMark struct {
	window int64
	ids    []uint64
}

// New returns a worker for cfg over store.
func New(cfg Config, store Store, opts ...Option) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, &FieldError{Field: "store", Reason: "must not be nil"}
	}
	l := &Limiter{cfg: cfg, clock: SystemClock{}, obs: NopObserver{}}
	l.cfg.hashedWeights, l.cfg.hashedCaps = byHash(l.cfg.Weights), byHash(l.cfg.Caps)
	for _, o := range opts {
		o(l)
	}
	l.view = newView(&l.cfg, store, l.obs)
	if cfg.MaxIDsPerPeer > 0 {
		l.peers = newPeerTable(&l.cfg, l.view.own)
		l.peerMarks = make(map[uint64]peerMark)
	}
	if w := newFleetWorker(&l.cfg); w != nil {
		l.view.fleet, l.view.holding = w, w
	}
	return l, nil
}

// Config returns the limiter's configuration.
func (l *Limiter) Config() Config { return l.cfg }

// AdmitAt decides on one request of cost 1 from client at now.
func (l *Limiter) AdmitAt(now time.Time, client string) Decision { return l.AdmitNAt(now, client, 1) }

// AdmitFromAt is AdmitNAt for a request that came from peer (a source
// address, an mTLS principal: what the caller cannot choose), under
// Config.MaxIDsPerPeer: a peer that already used that many other client
// ids in the window is refused with ReasonTooManyIDs until the window
// ends, before its request reaches the client table. An empty peer, or no
// bound, is AdmitNAt.
func (l *Limiter) AdmitFromAt(now time.Time, peer, client string, cost int64) Decision {
	if peer == "" || client == "" || l.peers == nil {
		return l.AdmitNAt(now, client, cost)
	}
	real := l.read(now)
	if err := l.view.current(real); err != nil {
		return l.failure(real+l.view.plan.shift, max(cost, 1), err)
	}
	t := real + l.view.plan.shift
	switch ok, err := l.peerAllows(t, clientHash(peer), clientHash(client)); {
	case err != nil:
		return l.failure(t, max(cost, 1), err)
	case !ok:
		return l.tooManyIDs(t)
	}
	return l.AdmitNAt(now, client, cost)
}

// peerAllows reports whether peer may use client id h in the view's
// window: from this worker's mark when it settles it, else from the
// peer's record (allowID), which the mark then keeps.
func (l *Limiter) peerAllows(t int64, peer, h uint64) (bool, error) {
	k := l.view.plan.window
	if l.view.plan.id == 0 {
		k = windowIndex(t, &l.cfg)
	}
	m, ok := l.peerMarks[peer]
	if ok && m.window == k {
		for _, id := range m.ids {
			if id == h {
				return true, nil
			}
		}
		if len(m.ids) >= l.cfg.MaxIDsPerPeer {
			return false, nil
		}
	}
	verdict, ids, err := l.view.allowID(l.peers, k, peer, h, l.cfg.MaxIDsPerPeer)
	if err != nil {
		return false, err
	}
	if verdict == peerUntracked {
		return true, nil
	}
	if len(l.peerMarks) >= localCacheMax {
		clear(l.peerMarks)
	}
	l.peerMarks[peer] = peerMark{window: k, ids: ids}
	return verdict == peerAllowed, nil
}

// AdmitNAt decides on one request from client at now that costs cost units
// (a cost below 1 counts as 1): it takes cost units of the client's share
// and of the window's budget, or is rejected if fewer than cost remain. An
// empty client is anonymous. Every attempt counts its cost as demand for
// the next window's shares, rejected ones included.
func (l *Limiter) AdmitNAt(now time.Time, client string, cost int64) Decision {
	if client == "" {
		return Decision{Allowed: l.cfg.Passthrough, WouldReject: true, Reason: ReasonAnonymous, Plan: l.view.plan.id, Window: l.view.plan.window}
	}
	cost = max(cost, 1)
	real := l.read(now)
	if err := l.view.current(real); err != nil {
		return l.failure(real+l.view.plan.shift, cost, err)
	}
	t := real + l.view.plan.shift // the shifted clock (see transition)
	l.view.fleet.noteAsked(cost, l.view.plan.window)
	h := clientHash(client)
	if cs := l.view.client(h); cs != nil {
		return l.admitKnown(t, cs, cost, staleRetries)
	}
	return l.admitUnknown(t, h, cost)
}

// Refund gives back the cost units of a request this Limiter admitted
// (Reason OK) that must not pass after all: another limit it had to pass
// refused it, and a refused request takes nothing. Call it in the same
// callback as the admission. The units go back to this worker's lease for
// the client, for its next request in the window, and are handed back to
// the window's budget with the rest of the lease if unused (a roomy
// client's, of at most a chunk, stays with the worker for the window: see
// roomy); the attempt still counts as demand. Nothing happens when the
// client's state is of another window.
func (l *Limiter) Refund(client string, cost int64) {
	if cs := l.view.client(clientHash(client)); cs != nil && cs.window == l.view.plan.window {
		cs.lease += max(cost, 1)
		cs.exhausted = false
	}
}

// FleetCallAt is the fleet step of a tick, to run on every worker in fleet
// mode (fleet.go; docs/design.md, "Fleet mode"): it writes this worker's
// unserved demand, keeps or takes over the syncer election, and, on the
// syncer when a sync is due, returns the callout to send now (ok false:
// nothing to send). The host sends it and reports the outcome with
// FleetDoneAt. (Fleet mode never shifts the clock: its windows are the
// fleet's.)
func (l *Limiter) FleetCallAt(now time.Time) (call LeaseCall, ok bool) {
	if l.view.fleet == nil {
		return LeaseCall{}, false
	}
	return l.view.fleet.call(l.view, now.UnixNano())
}

// FleetDoneAt applies the outcome of call: replies (one per hit, in order)
// or err when the callout failed, timed out or its answer was garbage.
func (l *Limiter) FleetDoneAt(now time.Time, call LeaseCall, replies []LeaseReply, err error) FleetEvent {
	if l.view.fleet == nil {
		return FleetEvent{}
	}
	return l.view.fleet.done(l.view, windowIndex(now.UnixNano(), &l.cfg), call, replies, err)
}

// TickAt does the housekeeping that keeps shared state accurate between
// requests: it writes counted demand back, returns leases this worker did
// not use since the previous tick, notices plans other workers published,
// and plans the next window on time (or re-plans for waiting newcomers).
func (l *Limiter) TickAt(now time.Time) {
	l.view.tick(l.read(now))
}

// PlanAt does the next part of the work a plan needs, while this worker
// has some (Planning), and reports whether it still has: until then the
// host should call it every PlanTick. That is a slice of a plan over a
// large table (a request never reads the table: over a large one, it
// publishes a provisional plan, which the plan read in slices replaces),
// and, in a window's last eighth, the demand its clients far below their
// share did not write on their requests. (TickAt does a part too, so a
// host that only ticks completes both, later.)
func (l *Limiter) PlanAt(now time.Time) bool {
	if !l.Planning() {
		return false // (no store operation: a tick takes over a stopped worker's plan)
	}
	real := l.read(now)
	if err := l.view.refresh(real); err != nil {
		return l.Planning()
	}
	reading := l.view.slice(real)
	return l.view.writeDeferred(real+l.view.plan.shift) || reading
}

// Planning reports whether this worker has work for PlanAt: a plan it
// reads a slice at a time, or demand it writes in the last eighth of a
// window (deferredDemand), which the next plan reads.
func (l *Limiter) Planning() bool { return l.view.sliced.roll != 0 || l.view.deferred.writing }

// RegisterAt declares clients at now, as if each had sent a request but
// without counting demand: the simulator and tests use it to start a
// scenario with every client known. They are counted at once when a plan is
// allowed (always for the first clients) and wait for the next plan
// otherwise.
func (l *Limiter) RegisterAt(now time.Time, clients ...string) error {
	real := l.read(now)
	if err := l.view.refresh(real); err != nil {
		return err
	}
	t := real + l.view.plan.shift
	for i, c := range clients {
		if c == "" {
			continue
		}
		h := clientHash(c)
		if _, e, found, err := l.view.find(h); err != nil {
			return err
		} else if found && (!registered(&e, &l.view.plan) || !expired(&e, &l.view.plan, &l.cfg)) {
			continue
		}
		// Arrivals a nanosecond apart keep the declared order: it breaks
		// rounding ties, like registration order does.
		if err := l.view.insert(h, t+int64(i), 0); err != nil && !errors.Is(err, errFull) && !errors.Is(err, errFullForNow) {
			return err // a client that finds the table full learns it at its next request
		}
	}
	who := callerCounted // declared clients count as proven: a re-plan is wanted
	if l.view.plan.id == 0 {
		who = callerWaiting // the first plan
	}
	_, err := l.view.replan(real, who, 0)
	return err
}

// Snapshot is the plan this worker last read.
type Snapshot struct {
	Plan     uint64    // plan id
	Window   int64     // aligned window index
	Start    time.Time // window start
	Deadline time.Time // window end
	Early    bool      // the plan is a re-plan of its window
	Clients  map[uint64]int64
	Pending  int
}

// HashID is how clients are identified in shared state and Snapshot.
func HashID(client string) uint64 { return clientHash(client) }

// Snapshot returns the plan this worker last read, with every counted
// client's share under it (client hash, see HashID, to share). It reads
// every bucket: it is for tests, the simulator and diagnostics, not for the
// request path.
func (l *Limiter) Snapshot() Snapshot {
	p := &l.view.plan
	start, end := planWindow(p, &l.cfg)
	s := Snapshot{
		Plan:     p.id,
		Window:   p.window,
		Start:    time.Unix(0, start),
		Deadline: time.Unix(0, end),
		Early:    p.replan,
		Clients:  map[uint64]int64{},
		Pending:  int(p.pending),
	}
	if p.id == 0 {
		return s
	}
	for b := 0; b < l.view.nb; b++ {
		raw, _, err := l.view.store.Get(l.view.key(b))
		if err != nil {
			continue
		}
		var bv bucketVal
		if decodeBucket(raw, &bv) != nil {
			continue
		}
		for _, e := range bv.entries {
			if !counted(&e, p, &l.cfg) || e.plan > p.id {
				continue
			}
			if e.plan < p.id {
				rebase(&e, p, l.view.pol, &l.cfg)
			}
			s.Clients[e.hash] = e.share
		}
	}
	return s
}

// ActiveClients is the number of clients counted in the plan this worker
// last read.
func (l *Limiter) ActiveClients() int { return int(l.view.plan.n) }

// read turns a time the caller read into this worker's clock reading. A
// worker's readings never go back by less than a step: a reading taken
// before a pause and used after it (a GC pause, a slow host call) is read
// as the latest reading, so the worker never decides in a window it has
// already left. A reading further back than maxLag is a clock step, and is
// taken as it is (transition counts it in the newest window, and jumps if
// it stays behind).
func (l *Limiter) read(now time.Time) int64 {
	t := now.UnixNano()
	if l.view.born == 0 {
		l.view.born = t
	}
	if t < l.latest && l.latest-t <= maxLag(&l.cfg) {
		return l.latest
	}
	l.latest = t
	return t
}

// maxLag is how far back a reading may lag behind the worker's latest and
// still be read as a late one rather than a clock step.
func maxLag(cfg *Config) int64 { return int64(max(cfg.Cycle, time.Second)) }

// staleRetries bounds admitKnown's passes after the view was found stale.
const staleRetries = 4

// admitKnown admits a counted client from this worker's lease, leasing
// more when it runs short. retries is how many more passes it may make
// after the view was found stale, each after reading the plan: re-plans may
// be published one after another while it takes.
func (l *Limiter) admitKnown(t int64, cs *clientState, cost int64, retries int) Decision {
	p := &l.view.plan
	if cs.window != p.window {
		cs.reset(p.window)
	}
	current := cs.plan == p.id
	// A lease is units the window's budget and the client's entry already
	// granted, so spending it under a later plan of the same window keeps
	// both invariants. A client far below its share does: re-syncing every
	// such client after each re-plan (a plan over a large table read in
	// slices is two) would cost a store write each.
	spendable := current || cs.roomy && cs.plan != 0
	cs.unflushed += cost
	l.view.markDirty(cs)
	if cs.unusable == p.id && !cs.flushDue() {
		return l.overLimit(t, cs)
	}
	if spendable && cs.lease >= cost {
		cs.lease -= cost
		cs.used = true
		if cs.flushDue() && !l.view.deferDemand(cs, t) {
			l.view.sync(cs, 0, false, t)
		}
		return l.admit(t, cs)
	}
	if current && cs.exhausted && !cs.flushDue() && cs.waitsForPool(t) {
		if cs.booked {
			l.view.unbook(cs, t)
		}
		return l.overLimit(t, cs)
	}
	switch l.view.sync(cs, cost-max(cs.lease, 0), false, t) {
	case syncOK:
		if cs.lease >= cost {
			cs.lease -= cost
			cs.used = true
			return l.admit(t, cs)
		}
		return l.overLimit(t, cs)
	case syncStale, syncPending:
		before := p.id
		if err := l.view.refresh(l.view.unshifted(t)); err != nil {
			return l.failure(t, cost, err)
		}
		cs.unflushed -= cost // counted again by the retry
		if l.view.client(cs.hash) != cs {
			// The new plan dropped what the worker held (another table):
			// the client is found again.
			cs.lease, cs.unflushed = 0, 0
			return l.admitUnknown(t, cs.hash, cost)
		}
		if retries > 0 && l.view.plan.id != before {
			return l.admitKnown(t, cs, cost, retries-1)
		}
		if st := l.view.sync(cs, 0, false, t); st == syncPending {
			// Its entry waits for a plan that counts it: say a newcomer
			// counted (promoted) by a plan that a re-plan on another worker
			// replaced, counting another newcomer, before this entry was
			// written. This worker holds nothing for it any more: its next
			// request is a newcomer's asking again, which proves it
			// (arrive), here as on any other worker.
			l.view.drop(cs.hash)
			return l.pending(t)
		}
		// The entry names a plan that does not exist: unusable until the
		// next plan resets it.
		cs.unusable = p.id
		cs.flushed += cs.unflushed
		cs.unflushed = 0
		return l.overLimit(t, cs)
	case syncGone:
		cs.unflushed -= cost
		l.view.drop(cs.hash)
		cs.lease, cs.unflushed = 0, 0
		return l.admitUnknown(t, cs.hash, cost)
	case syncBusy:
		return l.failure(t, cost, ErrRetriesExhausted)
	case syncCorrupt:
		// The bucket may hide grants: the client gets nothing more until a
		// roller resets it. Its demand is dropped as if written, so further
		// rejections stay local instead of re-reading the bucket each time.
		cs.unusable = p.id
		cs.flushed += cs.unflushed
		cs.unflushed = 0
		return l.overLimit(t, cs)
	}
	return l.failure(t, cost, errStore)
}

// admitUnknown decides on a request of a client this worker holds no
// state for (see arrive): admitted from its share once it is counted,
// pending while it waits for a plan that counts it, table_full when the
// table has no room for it.
func (l *Limiter) admitUnknown(t int64, h uint64, cost int64) Decision {
	defer l.view.forgetRead() // find's read serves this request only
	a, err := l.view.arrive(t, h, cost)
	switch {
	case err != nil:
		return l.failure(t, cost, err)
	case a.kind == arrivedCounted:
		return l.admitKnown(t, l.view.track(h, a.bucket, a.created), cost, staleRetries)
	case a.kind == arrivedRefused:
		l.view.refuse(h)
		return l.tableFull(t)
	}
	if a.mark {
		l.view.wait(h, a.proven)
	}
	return l.pending(t)
}

// Decisions.

func (l *Limiter) untilWindowEnd(t int64) time.Duration {
	return untilWindowEnd(&l.view.plan, &l.cfg, t)
}

func (l *Limiter) admit(t int64, cs *clientState) Decision {
	return Decision{
		Allowed:   true,
		Reason:    ReasonOK,
		Limit:     cs.share,
		Remaining: max(0, cs.share-cs.granted) + cs.lease,
		Reset:     l.untilWindowEnd(t),
		Plan:      cs.plan,
		Window:    l.view.plan.window,
	}
}

// overLimit: the client used its share, or the window's budget is spent.
// A client registered in this window with nothing to take (the budget was
// spent when it arrived) waits for the next window instead.
func (l *Limiter) overLimit(t int64, cs *clientState) Decision {
	reason := ReasonOverLimit
	if cs.fresh && cs.share == 0 {
		reason = ReasonPending
	}
	d := l.reject(t, reason, retryAt{accrues: cs.accrues, turn: cs.turnAt, spent: true})
	d.Limit = cs.share
	d.Plan = cs.plan
	d.Turn = cs.turnAt > t
	return d
}

func (l *Limiter) pending(t int64) Decision {
	return l.reject(t, ReasonPending, retryAt{spent: l.view.spent()})
}

// tooManyIDs: the peer's ids for the window are taken; the next window
// starts them afresh.
func (l *Limiter) tooManyIDs(t int64) Decision {
	return l.reject(t, ReasonTooManyIDs, retryAt{})
}

// tableFull: no room for a newcomer. When the table has room and only the
// places of its home bucket were taken, its retry proves it and the next
// re-plan counts it (see view.arrive).
func (l *Limiter) tableFull(t int64) Decision {
	p := &l.view.plan
	return l.reject(t, ReasonTableFull, retryAt{room: int(p.n)+int(p.pending) < l.cfg.MaxClients})
}

func (l *Limiter) reject(t int64, reason Reason, at retryAt) Decision {
	return Decision{
		Allowed:     l.cfg.Passthrough,
		WouldReject: true,
		Reason:      reason,
		Reset:       l.untilWindowEnd(t),
		RetryAfter:  retryAfter(reason, &l.view.plan, &l.cfg, t, at),
		Plan:        l.view.plan.id,
		Window:      l.view.plan.window,
	}
}

// failOpenDivisor sets the fail-open allowance: on store errors, a worker
// admits at most Capacity/failOpenDivisor units (at least 1) per window
// outside the budget, and refuses past it.
const failOpenDivisor = 16

// failure is the decision when shared state could not be used for a
// request of cost units at t. Contention (CAS retries that ran out) is not
// a failure of the store: nothing was granted, so nothing is admitted, and
// the client is asked to retry shortly (ReasonContended). A store error
// admits unless FailureModeDeny (fail open, as Envoy's rate-limit filters
// do), within the worker's allowance for the window, and rejects past it:
// the budget cannot count these units, so the allowance bounds them.
func (l *Limiter) failure(t, cost int64, err error) Decision {
	if errors.Is(err, ErrRetriesExhausted) {
		return l.reject(t, ReasonContended, retryAt{})
	}
	d := Decision{
		Reason:     ReasonStoreFailure,
		Reset:      l.untilWindowEnd(t),
		RetryAfter: retryAfter(ReasonStoreFailure, &l.view.plan, &l.cfg, t, retryAt{}),
		Plan:       l.view.plan.id,
		Window:     l.view.plan.window,
	}
	open := !l.cfg.FailureModeDeny
	if open {
		k := windowIndex(t, &l.cfg)
		if l.failOpen.window != k {
			l.failOpen.window, l.failOpen.used = k, 0
		}
		if l.failOpen.used+cost <= max(1, l.cfg.Capacity/failOpenDivisor) {
			l.failOpen.used += cost
		} else {
			open = false
		}
	}
	d.WouldReject = !open
	d.Allowed = open || l.cfg.Passthrough
	return d
}
