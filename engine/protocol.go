package engine

import (
	"errors"
	"strconv"
	"time"
)

// This file is the shared-state protocol: how a worker reads and changes the
// header and the client slots through CAS. docs/design.md explains why the
// cap holds; the invariant each function keeps is stated where it is kept.

// resetCycleJump is how far a header reset moves the cycle id.
const resetCycleJump = 1 << 20

type syncResult uint8

const (
	syncOK      syncResult = iota
	syncStale              // the slot belongs to a newer cycle than our header
	syncFailed             // the store failed or retries ran out
	syncCorrupt            // the slot holds an unreadable value
)

// refreshHeader reads the header, creating it on first use and resetting it
// when it cannot be decoded. It decodes only when the CAS moved.
func (l *Limiter) refreshHeader() error {
	for attempt := 0; attempt < 2; attempt++ {
		raw, cas, err := l.store.Get(l.headerKey)
		if errors.Is(err, ErrNotFound) {
			if err := l.writeHeader(&header{fingerprint: l.fp}, casCreate); err != nil && !errors.Is(err, ErrCASMismatch) {
				return err
			}
			continue // read back what was created, by us or by a racing worker
		}
		if err != nil {
			l.obs.StoreFailure("get header", err)
			return err
		}
		if l.hdrValid && cas == l.hdrCAS {
			return nil
		}
		// Decode into the spare header and swap only on success, so a bad
		// value never leaves a half-written cache behind.
		if err := decodeHeader(raw, &l.spare); err != nil {
			l.hdrValid = false
			l.obs.ValueReset(l.headerKey, err)
			if err := l.resetHeader(cas); err != nil {
				return err
			}
			continue
		}
		l.truncated = len(l.spare.clients) > l.cfg.MaxClients
		if l.truncated {
			// Written under another config with a larger table (old and new
			// configs overlap during a reconfiguration). This worker sees
			// only the part that fits its own table until it rolls the
			// cycle over under its own config, and never writes the cut
			// view back mid-cycle (see addPending).
			l.spare.clients = l.spare.clients[:l.cfg.MaxClients]
		}
		l.hdr, l.spare = l.spare, l.hdr
		l.hdrCAS, l.hdrValid = cas, true
		l.reindex()
		return nil
	}
	l.obs.StoreFailure("get header", ErrRetriesExhausted)
	return ErrRetriesExhausted
}

// writeHeader sets the header under cas, reporting failures other than a
// lost race to the Observer.
func (l *Limiter) writeHeader(h *header, cas uint32) error {
	l.buf = appendHeader(l.buf, h)
	err := l.store.Set(l.headerKey, l.buf, cas)
	switch {
	case errors.Is(err, ErrCASMismatch):
		l.obs.CASRetry()
	case err != nil:
		l.obs.StoreFailure("set header", err)
	}
	return err
}

// adopt makes h, which this worker just wrote, the cached header. Its CAS is
// unknown (Set does not return one), so the next refresh decodes again and
// no Set is ever made with a CAS that was not read.
func (l *Limiter) adopt(h header) {
	l.hdr = h
	l.hdrValid = false
	l.reindex()
}

// resetHeader replaces an unreadable header, CAS-guarded, with an empty one.
// Its cycle id jumps by resetCycleJump above every id this worker or any
// slot has seen: a cycle id must never be reused with other shares, and
// other workers may have cached a later header than anything visible here.
// A worker's cached header lags the stored one only by rollovers it has not
// seen yet; 2^20 of them, each at least MinCycle apart, without a single
// slot write that would reveal them, is far outside any real deployment.
func (l *Limiter) resetHeader(cas uint32) error {
	top := l.hdr.cycle
	for slot := 0; slot < l.cfg.MaxClients; slot++ {
		raw, _, err := l.store.Get(l.slotKey(slot))
		if err != nil {
			continue
		}
		if v, err := decodeSlot(raw); err == nil && v.cycle > top { // decodeSlot bounds the cycle id
			top = v.cycle
		}
	}
	err := l.writeHeader(&header{fingerprint: l.fp, cycle: top + resetCycleJump}, cas)
	if errors.Is(err, ErrCASMismatch) {
		return nil // someone else changed it; the caller reads again
	}
	return err
}

// reindex rebuilds the hash -> slot index of the cached header.
func (l *Limiter) reindex() {
	clear(l.index)
	l.nActive = 0
	for slot, c := range l.hdr.clients {
		if c.hash != 0 {
			l.index[c.hash] = slot
			l.nActive++
		}
	}
	for _, p := range l.hdr.pending {
		if _, ok := l.index[p]; !ok {
			l.index[p] = -1
		}
	}
}

func (l *Limiter) full() bool { return l.nActive+len(l.hdr.pending) >= l.cfg.MaxClients }

// rollover starts the next cycle: it reads every registered client's demand
// for the running cycle, computes the shares, and publishes the new header
// with one CAS. That CAS is the rollover: of all workers that compute one,
// exactly one succeeds, and the others adopt its result.
func (l *Limiter) rollover(t int64, joiners []uint64) error {
	for attempt := 0; attempt < l.cfg.CASRetries; attempt++ {
		if err := l.refreshHeader(); err != nil {
			return err
		}
		if !l.rolloverWanted(t, joiners) {
			return nil // already done by another worker
		}
		demand, err := l.readDemand()
		if err != nil {
			return err
		}
		before := l.nActive
		next := nextCycle(&l.hdr, demand, joiners, t, &l.cfg, l.fp, &l.scratch)
		err = l.writeHeader(&next, l.hdrCAS)
		if errors.Is(err, ErrCASMismatch) {
			continue
		}
		if err != nil {
			return err
		}
		registered := countNew(&l.hdr, &next)
		l.adopt(next)
		l.resetCorrupt()
		l.obs.Rollover(RolloverEvent{
			Cycle:      next.cycle,
			Early:      next.early,
			Clients:    l.nActive,
			Registered: registered,
			Forgotten:  before + registered - l.nActive,
		})
		return nil
	}
	l.obs.StoreFailure("rollover", ErrRetriesExhausted)
	return ErrRetriesExhausted
}

// rolloverWanted re-checks, on a fresh header, that a rollover is still
// needed: the cycle is due with clients to roll, or newcomers wait and an
// early rollover is allowed.
func (l *Limiter) rolloverWanted(t int64, joiners []uint64) bool {
	waiting := len(l.hdr.pending) > 0
	for _, h := range joiners {
		if slot, ok := l.index[h]; !ok || slot < 0 {
			waiting = true
		}
	}
	if isDue(&l.hdr, &l.cfg, t) {
		return waiting || len(l.hdr.clients) > 0
	}
	return waiting && earlyAllowed(&l.hdr, &l.cfg, t)
}

func countNew(prev, next *header) int {
	n := 0
	for _, c := range next.clients {
		if c.hash != 0 && prev.slotOf(c.hash) < 0 {
			n++
		}
	}
	return n
}

// readDemand returns the running cycle's demand per slot: what workers wrote
// to the slots, plus what this worker counted and has not written yet.
// Other workers' unwritten counts are the bounded part a rollover misses.
func (l *Limiter) readDemand() ([]int64, error) {
	l.corrupt = l.corrupt[:0]
	demand := make([]int64, len(l.hdr.clients))
	for slot, c := range l.hdr.clients {
		if c.hash == 0 {
			continue
		}
		if ls := &l.local[slot]; ls.cycle == l.hdr.cycle && ls.hash == c.hash {
			demand[slot] = ls.unflushed
		}
		raw, cas, err := l.store.Get(l.slotKey(slot))
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			l.obs.StoreFailure("get slot", err)
			return nil, err
		}
		v, err := decodeSlot(raw)
		if err != nil || v.cycle > l.hdr.cycle {
			// Unreadable, or stamped with a cycle that does not exist yet:
			// either way only a roller can reset it safely.
			l.corrupt = append(l.corrupt, corruptSlot{slot, cas})
			continue
		}
		if v.cycle == l.hdr.cycle && v.hash == c.hash {
			demand[slot] += v.demand
		}
	}
	return demand, nil
}

type corruptSlot struct {
	slot int
	cas  uint32
}

// resetCorrupt rewrites the unreadable slots the rollover found, as fresh
// slots of the new cycle. Only the roller may: it read them before the new
// cycle existed, so they cannot hide a grant of the new cycle, and the CAS
// of the unreadable value makes the write lose to any write since.
func (l *Limiter) resetCorrupt() {
	for _, c := range l.corrupt {
		if c.slot >= len(l.hdr.clients) || l.hdr.clients[c.slot].hash == 0 {
			continue
		}
		l.buf = appendSlot(l.buf, slotValue{cycle: l.hdr.cycle, hash: l.hdr.clients[c.slot].hash})
		if err := l.store.Set(l.slotKey(c.slot), l.buf, c.cas); err != nil && !errors.Is(err, ErrCASMismatch) {
			l.obs.StoreFailure("reset slot", err)
		}
	}
	l.corrupt = l.corrupt[:0]
}

// addPending records a newcomer that must wait for an early rollover. It
// reports false when the table has no room.
func (l *Limiter) addPending(h uint64) (bool, error) {
	for attempt := 0; attempt < l.cfg.CASRetries; attempt++ {
		if err := l.refreshHeader(); err != nil {
			return false, err
		}
		if _, ok := l.index[h]; ok {
			return true, nil
		}
		if l.full() || l.truncated {
			return false, nil
		}
		next := l.hdr
		next.pending = append(append(make([]uint64, 0, len(l.hdr.pending)+1), l.hdr.pending...), h)
		err := l.writeHeader(&next, l.hdrCAS)
		if errors.Is(err, ErrCASMismatch) {
			continue
		}
		if err != nil {
			return false, err
		}
		l.adopt(next)
		return true, nil
	}
	l.obs.StoreFailure("add pending", ErrRetriesExhausted)
	return false, ErrRetriesExhausted
}

// localFor returns this worker's state for slot in the cached cycle,
// starting it afresh when the cycle or the slot's client changed. Whatever
// the old state held (an unused lease, unwritten demand) belonged to a cycle
// that is over.
func (l *Limiter) localFor(slot int) *localSlot {
	ls := &l.local[slot]
	if c := l.hdr.clients[slot]; ls.cycle != l.hdr.cycle || ls.hash != c.hash {
		*ls = localSlot{cycle: l.hdr.cycle, hash: c.hash}
	}
	return ls
}

func (l *Limiter) flushDue(ls *localSlot) bool {
	return ls.unflushed > 0 && ls.unflushed >= max(1, ls.flushed/flushDivisor)
}

// sync is the one read-modify-write of a client slot: it writes this
// worker's unwritten demand, optionally returns its unused lease, and
// optionally leases more. Invariant: the slot's granted never exceeds the
// client's share for the slot's cycle, because a lease takes at most what is
// left (share - granted) under the CAS that makes it visible.
func (l *Limiter) sync(slot int, wantLease, returnLease bool) syncResult {
	ls := &l.local[slot]
	c := l.hdr.clients[slot]
	key := l.slotKey(slot)
	fresh := slotValue{cycle: ls.cycle, hash: c.hash}
	for attempt := 0; attempt < l.cfg.CASRetries; attempt++ {
		v, cas, res := l.readSlot(key, fresh)
		if res == syncCorrupt {
			ls.markUnusable(c.share)
			return syncOK
		}
		if res != syncOK {
			return res
		}
		next := v
		next.demand += ls.unflushed
		if returnLease {
			next.granted = max(0, next.granted-ls.lease)
		}
		take := int64(0)
		if avail := c.share - next.granted; wantLease && avail > 0 {
			take = leaseSize(avail, ls.flushed+ls.unflushed)
		}
		next.granted += take
		if next != v || cas == casCreate {
			l.buf = appendSlot(l.buf, next)
			err := l.store.Set(key, l.buf, cas)
			if errors.Is(err, ErrCASMismatch) {
				l.obs.CASRetry()
				continue
			}
			if err != nil {
				l.obs.StoreFailure("set slot", err)
				return syncFailed
			}
		}
		ls.flushed += ls.unflushed
		ls.unflushed = 0
		if returnLease {
			ls.lease = 0
		}
		ls.lease += take
		ls.granted = next.granted
		ls.exhausted = next.granted >= c.share
		return syncOK
	}
	l.obs.StoreFailure("sync slot", ErrRetriesExhausted)
	return syncFailed
}

// readSlot reads a slot for the cached cycle. A missing, older or reassigned
// value reads as fresh; a newer one means our header is stale; an unreadable
// one is reported as corrupt.
func (l *Limiter) readSlot(key string, fresh slotValue) (slotValue, uint32, syncResult) {
	raw, cas, err := l.store.Get(key)
	if errors.Is(err, ErrNotFound) {
		return fresh, casCreate, syncOK
	}
	if err != nil {
		l.obs.StoreFailure("get slot", err)
		return fresh, 0, syncFailed
	}
	v, err := decodeSlot(raw)
	switch {
	case err != nil:
		// The lost value may have held grants this worker cannot see, so the
		// client counts as exhausted and nothing is written: only the next
		// rollover can reset the slot safely (see resetCorrupt).
		l.obs.ValueReset(key, err)
		return fresh, cas, syncCorrupt
	case v.cycle > fresh.cycle:
		return v, cas, syncStale
	case v.cycle < fresh.cycle || v.hash != fresh.hash:
		return fresh, cas, syncOK
	}
	return v, cas, syncOK
}

// leaseSize is how many units a worker takes in one lease: at most
// 1/leaseDivisor of what is left of the share, so leases shrink as it
// drains, and at most 1/leaseRateDivisor of the attempts this worker saw for
// the client this cycle, so a worker that sees little of a client holds
// little of its share. Both bound the capacity that can sit unused in a
// worker when the client's traffic moves elsewhere.
func leaseSize(avail, seen int64) int64 {
	return max(1, min(avail/leaseDivisor, seen/leaseRateDivisor))
}

func (l *Limiter) slotKey(slot int) string {
	if l.slotKeys[slot] == "" {
		l.slotKeys[slot] = l.cfg.KeyPrefix + "/s/" + strconv.Itoa(slot)
	}
	return l.slotKeys[slot]
}

// Decisions.

func (l *Limiter) untilDeadline(t int64) time.Duration { return clampDuration(l.hdr.deadline - t) }

func (l *Limiter) admit(t int64, slot int) Decision {
	ls := &l.local[slot]
	share := l.hdr.clients[slot].share
	return Decision{
		Allowed:   true,
		Reason:    ReasonOK,
		Limit:     share,
		Remaining: max(0, share-ls.granted) + ls.lease,
		Reset:     l.untilDeadline(t),
		Cycle:     l.hdr.cycle,
	}
}

func (l *Limiter) overLimit(t int64, slot int) Decision {
	reset := l.untilDeadline(t)
	d := l.reject(ReasonOverLimit, reset, reset)
	d.Limit = l.hdr.clients[slot].share
	return d
}

func (l *Limiter) pending(t int64) Decision {
	return l.reject(ReasonPending, l.untilDeadline(t), untilEarly(&l.hdr, &l.cfg, t))
}

func (l *Limiter) reject(reason Reason, reset, retryAfter time.Duration) Decision {
	return Decision{
		Allowed:     l.cfg.Passthrough,
		WouldReject: true,
		Reason:      reason,
		Reset:       reset,
		RetryAfter:  retryAfter,
		Cycle:       l.hdr.cycle,
	}
}

// failure is the decision when shared state is unavailable: admit unless
// FailureModeDeny, and in that case ask the client to retry in a second.
func (l *Limiter) failure(t int64) Decision {
	deny := l.cfg.FailureModeDeny
	return Decision{
		Allowed:     !deny || l.cfg.Passthrough,
		WouldReject: deny,
		Reason:      ReasonStoreFailure,
		Reset:       l.untilDeadline(t),
		RetryAfter:  time.Second,
		Cycle:       l.hdr.cycle,
	}
}
