package engine

import (
	"errors"
	"time"
)

// Observer hears about the rare events an operator wants counted or logged.
// None of them happens per admitted request in steady state. Calls come from
// the goroutine that calls the Limiter.
type Observer interface {
	// Rollover: this worker started cycle ev.Cycle.
	Rollover(ev RolloverEvent)
	// CASRetry: a compare-and-swap lost a race and was retried.
	CASRetry()
	// StoreFailure: the store failed, or CAS retries ran out, on op.
	StoreFailure(op string, err error)
	// ValueReset: an unreadable shared value was reset.
	ValueReset(key string, err error)
}

// RolloverEvent describes a rollover this worker performed.
type RolloverEvent struct {
	Cycle      uint64
	Early      bool // ended before its deadline, for newcomers
	Clients    int  // registered after the rollover
	Registered int  // newcomers registered by it
	Forgotten  int  // idle clients dropped by it
}

// NopObserver ignores every event.
type NopObserver struct{}

func (NopObserver) Rollover(RolloverEvent)     {}
func (NopObserver) CASRetry()                  {}
func (NopObserver) StoreFailure(string, error) {}
func (NopObserver) ValueReset(string, error)   {}

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock sets the clock Admit and Tick read (default: the wall clock).
func WithClock(c Clock) Option { return func(l *Limiter) { l.clock = c } }

// WithObserver sets who hears about rollovers, retries and failures.
func WithObserver(o Observer) Option { return func(l *Limiter) { l.obs = o } }

// ErrRetriesExhausted is reported to the Observer when an operation kept
// losing CAS races.
var ErrRetriesExhausted = errors.New("cas retries exhausted")

// Lease sizing (see leaseSize): 1/16 of what is left of a share, and 1/4
// of the attempts the worker saw for the client this cycle.
const (
	leaseDivisor     = 16
	leaseRateDivisor = 4
)

// flushDivisor: a worker writes its counted demand back once it has counted
// 1/flushDivisor of what it already wrote (at least 1 request), so demand is
// exact for light clients and within about 1/16 for heavy ones, with a
// logarithmic number of writes.
const flushDivisor = 16

// Limiter is one worker's view of a limit. Every Envoy worker VM has its
// own; they agree through the Store. A Limiter is not safe for concurrent
// use: each worker is single-threaded, and so is each goroutine that plays
// one in tests.
type Limiter struct {
	cfg   Config
	fp    uint64
	store Store
	clock Clock
	obs   Observer

	headerKey string
	slotKeys  []string // built on first use of each slot

	hdr      header
	spare    header // decode target, swapped with hdr on success
	hdrCAS   uint32 // CAS of hdr as read; meaningful only when hdrValid
	hdrValid bool
	// truncated: hdr is a cut view of a header written under a config
	// with a larger table; it must not be written back as it is.
	truncated bool
	index     map[uint64]int // hash -> slot; pending newcomers map to -1
	nActive   int            // registered clients in hdr
	local     []localSlot    // this worker's leases and counts, by slot
	scratch   rollScratch
	corrupt   []corruptSlot // unreadable slots found by the last readDemand
	buf       []byte
}

// localSlot is what this worker holds for one client in one cycle.
type localSlot struct {
	cycle     uint64
	hash      uint64
	lease     int64 // units this worker may still admit without the store
	unflushed int64 // attempts counted here but not yet written to the store
	flushed   int64 // attempts this worker wrote this cycle
	granted   int64 // the slot's granted count at the last sync
	exhausted bool  // the slot had nothing left at the last sync
	used      bool  // the lease was used since the last tick
}

// markUnusable makes the client exhausted for the cycle when its slot
// cannot be trusted. Its counted demand is dropped as if written, so that
// further rejections stay local instead of re-reading the slot each time.
func (ls *localSlot) markUnusable(share int64) {
	ls.granted, ls.exhausted = share, true
	ls.flushed += ls.unflushed
	ls.unflushed = 0
}

// New returns a worker for cfg over store.
func New(cfg Config, store Store, opts ...Option) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, &FieldError{Field: "store", Reason: "must not be nil"}
	}
	l := &Limiter{
		cfg:       cfg,
		fp:        cfg.fingerprint(),
		store:     store,
		clock:     SystemClock{},
		obs:       NopObserver{},
		headerKey: cfg.KeyPrefix + "/h",
		slotKeys:  make([]string, cfg.MaxClients),
		index:     make(map[uint64]int, cfg.MaxClients),
		local:     make([]localSlot, cfg.MaxClients),
	}
	for _, o := range opts {
		o(l)
	}
	return l, nil
}

// Config returns the limiter's configuration.
func (l *Limiter) Config() Config { return l.cfg }

// Admit decides on one request from client at the clock's time.
func (l *Limiter) Admit(client string) Decision { return l.AdmitAt(l.clock.Now(), client) }

// AdmitAt decides on one request from client at now. An empty client is
// anonymous. Every attempt counts as demand for the next cycle's shares,
// rejected ones included.
func (l *Limiter) AdmitAt(now time.Time, client string) Decision {
	if client == "" {
		return l.reject(ReasonAnonymous, 0, 0)
	}
	t := now.UnixNano()
	if err := l.ensureCurrent(t); err != nil {
		return l.failure(t)
	}
	h := clientHash(client)
	slot, known := l.index[h]
	if !known || slot < 0 {
		return l.admitNewcomer(t, h)
	}
	return l.admitKnown(t, slot)
}

// Tick does the housekeeping that keeps shared state accurate between
// requests: it rolls an expired cycle over on time, registers newcomers
// whose early rollover is due, writes counted demand back, and returns
// leases this worker did not use since the previous tick.
func (l *Limiter) Tick() { l.TickAt(l.clock.Now()) }

// TickAt is Tick at an explicit time.
func (l *Limiter) TickAt(now time.Time) {
	t := now.UnixNano()
	if err := l.refreshHeader(); err != nil {
		return
	}
	if l.rolloverWanted(t, nil) {
		if err := l.rollover(t, nil); err != nil {
			return
		}
	}
	for slot := range l.hdr.clients {
		ls := &l.local[slot]
		if ls.cycle != l.hdr.cycle || ls.hash != l.hdr.clients[slot].hash {
			continue
		}
		if ls.unflushed > 0 || (ls.lease > 0 && !ls.used) {
			l.sync(slot, false, !ls.used)
		}
		ls.used = false
	}
}

// RegisterAt declares clients at now, as if each had sent a request but
// without counting demand: the simulator and tests use it to start a
// scenario with every client known, as the product description's first
// cycle does. Newcomers are registered at once when an early rollover is
// allowed and become pending otherwise.
func (l *Limiter) RegisterAt(now time.Time, clients ...string) error {
	t := now.UnixNano()
	hashes := make([]uint64, 0, len(clients))
	for _, c := range clients {
		if c != "" {
			hashes = append(hashes, clientHash(c))
		}
	}
	if err := l.refreshHeader(); err != nil {
		return err
	}
	if earlyAllowed(&l.hdr, &l.cfg, t) || isDue(&l.hdr, &l.cfg, t) {
		return l.rollover(t, hashes)
	}
	for _, h := range hashes {
		if _, err := l.addPending(h); err != nil {
			return err
		}
	}
	return nil
}

// Snapshot is the cycle state as this worker last read it.
type Snapshot struct {
	Cycle    uint64
	Start    time.Time
	Deadline time.Time
	Early    bool
	Clients  map[uint64]int64 // client hash (see HashID) -> share
	Pending  int
}

// HashID is how clients are identified in shared state and Snapshot.
func HashID(client string) uint64 { return clientHash(client) }

// Snapshot returns the cycle state this worker last read from the store.
func (l *Limiter) Snapshot() Snapshot {
	s := Snapshot{
		Cycle:    l.hdr.cycle,
		Start:    time.Unix(0, l.hdr.start),
		Deadline: time.Unix(0, l.hdr.deadline),
		Early:    l.hdr.early,
		Clients:  make(map[uint64]int64, len(l.hdr.clients)),
		Pending:  len(l.hdr.pending),
	}
	for _, c := range l.hdr.clients {
		if c.hash != 0 {
			s.Clients[c.hash] = c.share
		}
	}
	return s
}

// ActiveClients is the number of registered clients in the cycle this worker
// last read.
func (l *Limiter) ActiveClients() int { return l.nActive }

// ensureCurrent makes sure the cached header is the running cycle at t,
// rolling it over when it is due.
func (l *Limiter) ensureCurrent(t int64) error {
	if l.hdrValid && !isDue(&l.hdr, &l.cfg, t) {
		return nil
	}
	if err := l.refreshHeader(); err != nil {
		return err
	}
	if !isDue(&l.hdr, &l.cfg, t) || (len(l.hdr.clients) == 0 && len(l.hdr.pending) == 0) {
		// Not due, or nothing to roll: the first client's request registers
		// it through the newcomer path, which starts the first cycle.
		return nil
	}
	return l.rollover(t, nil)
}

// admitKnown admits a registered client from this worker's lease, leasing
// more from the store when it runs out.
func (l *Limiter) admitKnown(t int64, slot int) Decision {
	ls := l.localFor(slot)
	ls.unflushed++
	if ls.lease > 0 {
		ls.lease--
		ls.used = true
		if l.flushDue(ls) {
			l.sync(slot, false, false)
		}
		return l.admit(t, slot)
	}
	if ls.exhausted && !l.flushDue(ls) {
		return l.overLimit(t, slot)
	}
	switch l.sync(slot, true, false) {
	case syncOK:
		if ls.lease > 0 {
			ls.lease--
			ls.used = true
			return l.admit(t, slot)
		}
		return l.overLimit(t, slot)
	case syncStale:
		// Another worker started a newer cycle: adopt it and decide there.
		// The header's cycle only grows, so this recurses at most once.
		staleCycle := ls.cycle
		if err := l.refreshHeader(); err != nil {
			return l.failure(t)
		}
		if l.hdr.cycle == staleCycle {
			if slot >= len(l.hdr.clients) || l.hdr.clients[slot].hash != ls.hash {
				return l.admitNewcomer(t, ls.hash)
			}
			// The header is not newer, so the slot's "future" cycle is
			// bogus: treat it as unreadable (the next roller resets it).
			ls.markUnusable(l.hdr.clients[slot].share)
			return l.overLimit(t, slot)
		}
		if s, ok := l.index[ls.hash]; ok && s >= 0 {
			return l.admitKnown(t, s)
		}
		return l.admitNewcomer(t, ls.hash)
	default:
		return l.failure(t)
	}
}

// admitNewcomer handles a client not registered in the cached cycle: it is
// registered by an early rollover when MinCycle allows one, and otherwise
// recorded as pending and told when to come back.
func (l *Limiter) admitNewcomer(t int64, h uint64) Decision {
	if slot, ok := l.index[h]; ok && slot < 0 && !earlyAllowed(&l.hdr, &l.cfg, t) {
		return l.pending(t) // known pending, still waiting: no store access
	}
	if _, ok := l.index[h]; !ok && l.full() && !isDue(&l.hdr, &l.cfg, t) {
		return l.reject(ReasonTableFull, l.untilDeadline(t), l.untilDeadline(t))
	}
	if err := l.refreshHeader(); err != nil {
		return l.failure(t)
	}
	if slot, ok := l.index[h]; ok && slot >= 0 {
		return l.admitKnown(t, slot)
	}
	if earlyAllowed(&l.hdr, &l.cfg, t) || isDue(&l.hdr, &l.cfg, t) {
		if err := l.rollover(t, []uint64{h}); err != nil {
			return l.failure(t)
		}
		if slot, ok := l.index[h]; ok && slot >= 0 {
			return l.admitKnown(t, slot)
		}
		// Another worker's rollover came first without registering h, so
		// the next early one is MinCycle away: h waits as pending.
	}
	added, err := l.addPending(h)
	if err != nil {
		return l.failure(t)
	}
	if !added {
		return l.reject(ReasonTableFull, l.untilDeadline(t), l.untilDeadline(t))
	}
	return l.pending(t)
}
