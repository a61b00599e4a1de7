package engine

import "errors"

// Leases: the view grants units only here (sync, with the budget's adjust
// and pacing's paced). They keep the two invariants of the engine:
//
//   - per client: an entry's granted never exceeds its share under the
//     entry's plan, because a lease takes at most share − granted under the
//     CAS that makes it visible, and a rebase sets share = granted +
//     allowance;
//   - per window: the budget's granted never exceeds the capacity in force
//     for the window, because every lease first takes its units from the
//     budget, under the budget's CAS, and gives back what it does not use.
//
// A worker admits only from units it leased, each unit once, so what a
// window admits is at most what its budget granted.

// held says what held a lease back, for the client's Retry-After: the
// borrow gate or pacing cut the take (clipped), and pacing's next unit fits
// at paceAt (Unix ns, 0: pacing did not hold it).
type held struct {
	clipped bool
	paceAt  int64
}

// clientState is what this worker holds for one counted client.
type clientState struct {
	hash      uint64
	bucket    int
	created   uint64 // the entry's created: tells a re-registered client's entry apart
	plan      uint64 // plan the share is under (the share period)
	window    int64  // window the lease and counts belong to
	share     int64
	granted   int64  // the entry's granted at the last sync
	lease     int64  // units this worker may still admit without the store
	unflushed int64  // units asked for here, not yet written to the entry
	flushed   int64  // units this worker wrote in window
	fresh     bool   // registered in this window (counts as a newcomer)
	exhausted bool   // nothing left (share or window budget) at the last sync
	accrues   int64  // when exhausted by the borrow gate: when the pool next grows (Unix ns), else 0
	unusable  uint64 // plan id under which the entry was found unreadable
	used      bool   // the lease was used since the last tick
	dirty     bool   // in the tick list
}

// reset starts the client's state afresh for window k: leases and counts of
// another window are over.
func (cs *clientState) reset(k int64) {
	cs.window, cs.lease, cs.unflushed, cs.flushed = k, 0, 0, 0
	cs.used, cs.exhausted, cs.unusable, cs.accrues = false, false, 0, 0
}

type syncResult uint8

const (
	syncOK      syncResult = iota
	syncStale              // the entry or the budget is under a newer plan than the view
	syncGone               // the client has no counted entry any more
	syncPending            // the entry is not counted in the view yet
	syncCorrupt            // the bucket holds an unreadable value
	syncFailed             // the store failed
	syncBusy               // CAS retries ran out
)

// Lease sizing (see leaseSize): 1/16 of what is left of a share, and 1/4
// of the units the worker saw the client ask for this window.
const (
	leaseDivisor     = 16
	leaseRateDivisor = 4
)

// leaseSize is how many units a worker takes in one lease, at least need:
// at most 1/leaseDivisor of what is left of the share, so leases shrink as
// it drains, and at most 1/leaseRateDivisor of what this worker saw, so a
// worker that sees little of a client holds little of its share. Both bound
// the capacity that can sit unused in a worker. 0 when need does not fit.
func leaseSize(avail, need, seen int64) int64 {
	if avail < need || need <= 0 {
		return 0
	}
	return min(avail, max(need, min(avail/leaseDivisor, seen/leaseRateDivisor)))
}

// sync is the one read-modify-write of a client's entry: it rebases the
// entry to the view's plan if needed, writes this worker's unwritten
// demand, optionally returns its unused lease, and optionally leases at
// least need more units (taking them from the window budget first). t is
// the shifted time of the call, for the borrow gate and pacing.
func (g *view) sync(cs *clientState, need int64, returnLease bool, t int64) syncResult {
	r := g
	p := &r.plan
	var inHand int64 // budget units taken and not yet in the entry
	var h held
	defer func() {
		if inHand > 0 {
			g.give(inHand)
		}
	}()
	var e entry
	var take, ret int64
	budgetShort := false // the share has room but the window does not
	res := syncOK
	err := r.updateBucket(cs.bucket, nil, func(bkt *bucketVal, missing bool) (bool, error) {
		if missing {
			res = syncGone
			return false, nil
		}
		i := -1
		for j := range bkt.entries {
			if bkt.entries[j].hash == cs.hash {
				i = j
				break
			}
		}
		if i < 0 {
			res = syncGone
			return false, nil
		}
		e = bkt.entries[i]
		switch {
		case e.plan > p.id:
			res = syncStale
		case !registered(&e, p):
			res = syncPending
		case expired(&e, p, g.cfg):
			res = syncGone
		case e.plan < p.id:
			rebase(&e, p, r.pol, g.cfg)
		}
		if res != syncOK {
			return false, nil
		}
		if cs.window != e.window || cs.created != e.created {
			// Counts and leases of another window, or of an earlier entry
			// of this client (its bucket was reset), are over here.
			cs.reset(e.window)
			cs.created = e.created
		}
		e.demand += cs.unflushed
		if e.demand > 0 {
			e.active = max(e.active, e.window)
		}
		if e.tries == 1 && askedAgain(&e, g.cfg) {
			e.tries = 2
		}
		ret, take, budgetShort = 0, 0, false
		if returnLease {
			ret = min(cs.lease, e.granted)
			e.granted -= ret
		}
		if need > 0 {
			want, paceAt := g.leaseWant(&e, need, cs.flushed+cs.unflushed, t)
			h.paceAt = max(h.paceAt, paceAt)
			if want > inHand {
				gate := gateFor(r.pol, p, g.cfg, e.hash, e.granted+inHand, t)
				got, took, err := g.take(want-inHand, t, gate)
				h.clipped = h.clipped || took.clipped
				h.paceAt = max(h.paceAt, took.paceAt)
				switch {
				case errors.Is(err, errStale):
					res = syncStale
					return false, nil
				case err != nil:
					return false, err
				}
				inHand += got
			}
			if inHand >= need {
				take = min(want, inHand)
			} else {
				budgetShort = want > 0
			}
			e.granted += take
		}
		bkt.entries[i] = e
		return true, nil
	})
	switch {
	case errors.Is(err, errCorrupt):
		return syncCorrupt
	case errors.Is(err, ErrRetriesExhausted):
		return syncBusy
	case err != nil:
		return syncFailed
	case res != syncOK:
		return res
	}
	inHand -= take
	if ret > 0 {
		g.give(ret)
	}
	cs.flushed += cs.unflushed
	cs.unflushed = 0
	cs.lease += take - ret
	cs.plan, cs.share, cs.granted = e.plan, e.share, e.granted
	cs.fresh = isNew(&e, p)
	// A request costing more than is left is refused without making the
	// client exhausted: a cheaper one may still fit.
	cs.exhausted = e.granted >= e.share || budgetShort || h.paceAt > 0
	cs.accrues = nextAccrual(g.cfg, t, h.paceAt, budgetShort && h.clipped)
	return syncOK
}

// leaseWant sizes a lease for entry e (see leaseSize). Paced, or under the
// fair policy, a lease is exactly need. A fair client's batch would draw
// units from the window budget before they are used, even within its
// guarantee, and the borrow gate reads the budget as what has been used
// so far: batches make the pool look spent and strand capacity (design,
// "Leases"). Paced, a client of a partitioning policy may hold only its
// paced amount of its share; when that is short, paceAt says when it is
// not. (The fair policy paces its guarantee in its gate.)
func (g *view) leaseWant(e *entry, need, seen, t int64) (want, paceAt int64) {
	_, lends := g.pol.(lender)
	if !g.cfg.Pace && !lends {
		return leaseSize(e.share-e.granted, need, seen), 0
	}
	avail := e.share - e.granted
	if !lends {
		p := &g.plan
		f := windowElapsed(p, g.cfg, t)
		avail = min(avail, pacedAmount(e.share, g.cfg.Burst, f)-e.granted)
		if avail < need && e.granted+need <= e.share {
			paceAt = pacedAt(p, g.cfg, e.share, e.granted+need)
		}
	}
	return leaseSize(avail, need, 0), paceAt
}
