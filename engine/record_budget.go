package engine

// The window budget record (recordKey "w"): units granted in the newest
// window, all workers together. Written by adjust only (takes and give-
// backs), or replaced whole when unreadable (resetBudget).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// budgetVersion and budgetLen: the window budget's encoding, before its
// bookings (budgetBookingLen each).
const (
	budgetVersion    = 7
	budgetLen        = 1 + 11*8 + 1 + sealLen
	budgetBookingLen = 4 + 4 + 8 // client, n, at
)

// budget is the window budget: units granted to workers in one window, all
// clients together, and the capacity in force for it (the smallest that any
// config that drew from it had). granted may exceed capacity only after the
// capacity shrank mid-window; nothing more is granted then.
type budget struct {
	window   int64
	roll     uint64 // the plan id that opened the window: a budget of an older roll is over
	granted  int64
	capacity int64
	end      int64     // when the window ends (Unix ns, on the shifted clock of the plan that opened it)
	late     float64   // the fair policy's late level (see borrowGate.room); 0 under the others
	owed     int64     // the fair policy's: what the clients that took are still owed of their guarantees (owedAfter)
	seen     int64     // the fair policy's: what was expected of the clients that took (seenAfter)
	owedPlan uint64    // the fair policy's: the plan owed and seen are counted under (switchOwed)
	base     int64     // the fair policy's: owed − seen when owedPlan was put in force (less what racing found)
	returned int64     // units given back in the window, all workers together
	booked   []booking // units set aside, from their time, for clients the borrow gate refused (bookUnits)
}

// holding bounds a window budget besides its capacity: in fleet mode, what
// the process holds for the window from the fleet (fleetWorker). adjust
// reads it after the budget, in each attempt.
type holding interface {
	heldIn(store Store, k int64) int64
}

func appendBudget(dst []byte, v budget) []byte {
	le := binary.LittleEndian
	dst = append(dst[:0], budgetVersion)
	dst = le.AppendUint64(dst, uint64(v.window))
	dst = le.AppendUint64(dst, v.roll)
	dst = le.AppendUint64(dst, uint64(v.granted))
	dst = le.AppendUint64(dst, uint64(v.capacity))
	dst = le.AppendUint64(dst, uint64(v.end))
	dst = le.AppendUint64(dst, math.Float64bits(v.late))
	dst = le.AppendUint64(dst, uint64(v.owed))
	dst = le.AppendUint64(dst, uint64(v.seen))
	dst = le.AppendUint64(dst, v.owedPlan)
	dst = le.AppendUint64(dst, uint64(v.base))
	dst = le.AppendUint64(dst, uint64(v.returned))
	dst = append(dst, byte(len(v.booked)))
	for _, b := range v.booked {
		dst = le.AppendUint32(dst, b.client)
		dst = le.AppendUint32(dst, uint32(b.n))
		dst = le.AppendUint64(dst, uint64(b.at))
	}
	return seal(dst)
}

func decodeBudget(b []byte) (budget, error) {
	const count = budgetLen - sealLen - 1 // the bookings' count
	if len(b) < budgetLen || b[0] != budgetVersion || int(b[count]) > maxBookings || len(b) != budgetLen+int(b[count])*budgetBookingLen {
		return budget{}, fmt.Errorf("%w: budget of %d bytes", errCorrupt, len(b))
	}
	b, err := unseal(b)
	if err != nil {
		return budget{}, err
	}
	le := binary.LittleEndian
	v := budget{
		end:      int64(le.Uint64(b[33:])),
		window:   int64(le.Uint64(b[1:])),
		roll:     le.Uint64(b[9:]),
		granted:  int64(le.Uint64(b[17:])),
		capacity: int64(le.Uint64(b[25:])),
		late:     math.Float64frombits(le.Uint64(b[41:])),
		owed:     int64(le.Uint64(b[49:])),
		seen:     int64(le.Uint64(b[57:])),
		owedPlan: le.Uint64(b[65:]),
		base:     int64(le.Uint64(b[73:])),
		returned: int64(le.Uint64(b[81:])),
	}
	for i := 0; i < int(b[count]); i++ {
		e := b[count+1+i*budgetBookingLen:]
		bk := booking{client: le.Uint32(e), n: int64(le.Uint32(e[4:])), at: int64(le.Uint64(e[8:]))}
		if bk.n > 1 { // (bookUnits books one unit)
			return budget{}, fmt.Errorf("%w: impossible budget", errCorrupt)
		}
		v.booked = append(v.booked, bk)
	}
	if v.roll == 0 || v.roll >= maxPlanID || v.capacity < 1 || v.capacity > MaxCapacity ||
		v.granted < 0 || v.granted > MaxCapacity || !(v.late >= 0) || math.IsInf(v.late, 1) ||
		v.owed < 0 || v.owed > MaxCapacity || v.seen < 0 || v.seen > MaxCapacity || v.owedPlan >= maxPlanID || v.base < -MaxCapacity || v.base > MaxCapacity || v.returned < 0 || v.returned > maxReturned {
		return budget{}, fmt.Errorf("%w: impossible budget", errCorrupt)
	}
	return v, nil
}

// readBudget reads the window budget. A missing one reads as the zero
// budget (which ends before every window); corrupt reports an unreadable
// one, with its CAS for resetCorrupt.
func (r *view) readBudget() (v budget, cas uint32, corrupt bool, err error) {
	raw, cas, err := r.store.Get(r.budgetKey)
	if errors.Is(err, ErrNotFound) {
		return budget{end: math.MinInt64}, 0, false, nil
	}
	if err != nil {
		r.obs.StoreFailure("get budget", err)
		return budget{}, 0, false, err
	}
	if v, err = decodeBudget(raw); err != nil {
		r.obs.ValueReset(r.budgetKey, err)
		return budget{end: math.MinInt64}, cas, true, nil
	}
	return v, cas, false, nil
}

// budgetLeft is the capacity the next plan splits and what is left of the
// window's budget v. A plan for a window the budget's does not overlap
// starts from the whole capacity. A plan for a window it overlaps (a
// re-plan, a plan reset, or a new alignment after the cycle or offset
// changed) splits the capacity in force (the smallest any config set) and
// has only what the budget has not granted: what the overlapping window
// granted is counted in this one. An unreadable budget may hide grants: it
// leaves nothing, except to a roll into a new window.
func (r *view) budgetLeft(next *plan, v budget, corrupt, freshRoll bool) (capacity, left int64) {
	capacity = r.cfg.Capacity
	start, _ := planWindow(next, r.cfg)
	switch {
	case corrupt && freshRoll:
		return capacity, capacity
	case corrupt:
		return capacity, 0
	case v.end > start:
		capacity = min(capacity, v.capacity)
		return capacity, max(0, capacity-v.granted)
	}
	return capacity, capacity
}

// give returns n units to the window budget (a lease returned, or units
// taken for a lease that was not written). A give that fails loses the
// units for the window: on the safe side.
// took: the units were a client's takes, through its gate under a lender
// policy (what it is owed may rise by as much: see "Guarantees owed").
func (r *view) give(n int64, took bool) {
	if n > 0 {
		_, lends := r.pol.(lender)
		_, _, _, _ = r.adjust(-n, borrowGate{on: took && lends}, nil)
	}
}

// maxReturned bounds the budget's returned: a window's give-backs.
const maxReturned = 1 << 62

// The pool: units a worker took from the window budget ahead of its roomy
// clients' chunks, so that a chunk costs no budget operation. A worker asks
// for a pool chunk beside a roomy client's lease, and only while its last
// take saw poolRoom units left: W workers then hold at most W·poolChunk
// units that nobody uses, out of at least poolRoom. A pool not drawn from
// since the last tick goes back to the budget; a pool of a window that is
// over is forgotten, never given to the next window's budget. Every pooled
// unit was granted by the budget under its CAS, so the window invariant
// holds as for any lease.
type budgetPool struct {
	roll  uint64 // the roll of the window whose budget granted the units
	units int64
	used  bool // drawn from since the last tick
}

const (
	poolChunk = 32 * leaseChunk // units a worker asks for its pool at once: the leases ahead of two or three buckets
	poolRoom  = 64 * poolChunk  // budget left that a pool needs to be filled
)

// draw takes up to n units from the pool.
func (r *view) draw(n int64) int64 {
	q := &r.pool
	if q.roll != r.plan.roll {
		*q = budgetPool{}
		return 0
	}
	m := min(n, q.units)
	q.units -= m
	q.used = q.used || m > 0
	return m
}

// poolAsk is how many units to take from the budget for the pool beside a
// roomy client's lease.
func (r *view) poolAsk() int64 {
	if r.seen.window != r.plan.window || r.seen.left-r.seen.granted < poolRoom || r.pool.roll == r.plan.roll && r.pool.units > 0 {
		return 0
	}
	return poolChunk
}

// stash keeps in the pool n units taken from the view's window budget.
func (r *view) stash(n int64) {
	if r.pool.roll != r.plan.roll {
		r.pool = budgetPool{roll: r.plan.roll}
	}
	r.pool.units += n
}

// returnPool, on a tick, gives the pool back when it was not drawn from
// since the last tick.
func (r *view) returnPool() {
	q := &r.pool
	switch {
	case q.roll != r.plan.roll:
		*q = budgetPool{}
	case q.units > 0 && !q.used:
		r.give(q.units, false)
		q.units = 0
	}
	q.used = false
}

// owedOf is what budget v owes the clients' guarantees under the plan in
// force (see "Guarantees owed"): what the plan found owed, moved by the
// takes since it came into force (none yet, when it has not). Only for
// takes that book (unpaced: see take); only what the takers are owed
// while the plan is provisional (its parameters are the window before's),
// or computed under other settings (a reload under way).
func (r *view) owedOf(v *budget) int64 {
	p := &r.plan
	l, ok := r.pol.(lender)
	if !ok || r.cfg.Pace {
		return 0
	}
	if p.provisional || p.print != r.sharePrint {
		return v.owed
	}
	moved := int64(0) // (by the takes since the plan was put in force)
	if v.owedPlan == p.id {
		moved = v.owed - v.seen - v.base
	}
	return max(0, l.expected(&p.params)+moved)
}

// owePending adds to what next owes the clients' guarantees (see
// "Guarantees owed") what it owes the clients it counts without its scan
// having read them (pending after a plan read in slices: proven while the
// read went on): their guarantees, at the heaviest weight.
func (r *view) owePending(next *plan) {
	if l, ok := r.pol.(lender); ok && next.pending > 0 {
		def, _ := l.tiers(&next.params)
		l.owePending(&next.params, int64(next.pending)*guaranteeReach(def, r.cfg.heaviest(), math.Inf(1)))
	}
}

// scanStart is where a plan's scan began, for the units that may move what
// the clients are owed before the plan is in force (racing): the budget's
// units taken and given back then, granted + 2 × returned (only returned,
// for a plan read in slices, which owes each client the most its takes may
// bring it to).
type scanStart struct {
	plan   uint64 // the plan it is for
	sliced bool
	at     int64
}

// racing is what may have moved what the clients are owed between the scan
// of the plan in force and now, by budget v: the units taken and given
// back since the scan began, when this worker made the plan (0 when
// another did: the first of its takes puts it in force, right after).
func (r *view) racing(v *budget) int64 {
	m := &r.began
	switch {
	case m.plan != r.plan.id:
		return 0
	case m.sliced:
		return max(0, v.returned-m.at)
	}
	return max(0, v.granted+2*v.returned-m.at) // (taken, granted + returned, and returned)
}

// switchOwed makes the plan in force the one what is owed is counted
// under (see "Guarantees owed"), right after it is published: from then
// on, a take through a gate of an older plan is stale.
func (r *view) switchOwed() {
	if _, ok := r.pol.(lender); ok && !r.cfg.Pace && !r.plan.provisional {
		_, _, _, _ = r.adjust(0, borrowGate{on: true}, nil)
	}
}

// budgetSeen is the budget as the last take left it, for the Retry-After
// of a client it left short (view.take): granted of left (the capacity in
// force), what of the rest is owed, and whether what the fleet holds is
// what bounded left.
type budgetSeen struct {
	window        int64
	granted, left int64
	owed          int64 // the guarantees still owed to the clients (owedOf)
	held          bool
}

// spent reports whether the budget of the view's window has nothing left
// for a newcomer: the plan split nothing (a partition's re-plan that found
// the budget spent scales every newcomer's share to 0), or the last take
// this worker made found nothing left (and not because the fleet had yet
// to lease it).
func (r *view) spent() bool {
	if p := &r.plan; p.n > 0 && p.scale == 0 {
		return true
	}
	s := r.seen
	return s.window == r.plan.window && s.left > 0 && s.granted >= s.left && !s.held
}

// adjust moves the budget's granted by delta (positive: a take, limited to
// what is left of the capacity in force, and by gate). It is the one
// read-modify-write of the budget key. In fleet mode the capacity in force
// is at most what the process holds for the window, read after the budget
// in each attempt: a give-back takes its units out of the budget before it
// lowers what is held, so an attempt that read the higher holding fails
// its CAS. clipped: the gate cut the take, not the budget. ask is the
// take's client, for the budget's bookings (settleBookings, bookUnits):
// bookedAt is when its units are booked for it, when they are. With delta
// 0, adjust only settles the bookings.
func (r *view) adjust(delta int64, gate borrowGate, ask *bookAsk) (moved int64, clipped bool, bookedAt int64, err error) {
	p := &r.plan
	err = r.update(r.budgetKey, "budget", nil, func(st stored) ([]byte, error) {
		raw, missing := st.raw, st.missing
		moved, clipped, bookedAt = 0, false, 0
		var v budget
		if !missing {
			var err error
			if v, err = decodeBudget(raw); err != nil {
				r.obs.ValueReset(r.budgetKey, err)
				return nil, nil
			}
		}
		changed := missing
		start, end := planWindow(p, r.cfg)
		switch {
		case v.roll > p.roll:
			return nil, errStale
		case v.roll < p.roll && v.end > start && !missing:
			// A window this one overlaps (the same window under a later roll,
			// after a plan reset, or the window of another alignment during a
			// reconfiguration): its grants still count.
			v.roll, v.window, v.end, changed = p.roll, p.window, max(v.end, end), true
		case v.roll < p.roll:
			if delta <= 0 {
				return nil, nil // a return to a window that is over, or nothing to settle
			}
			v, changed = budget{window: p.window, roll: p.roll, capacity: r.cfg.Capacity, end: end}, true
		}
		if r.cfg.Capacity < v.capacity {
			// A smaller capacity takes effect at once for the rest of the
			// window; a larger one only from the next window.
			v.capacity, changed = r.cfg.Capacity, true
		}
		var mine settled
		if ask != nil {
			mine = settleBookings(&v, ask, bookingHold)
			changed = changed || mine.changed
		}
		due, claimed := mine.due, mine.claimed
		if gate.on && !r.cfg.Pace {
			// A take moves what is owed as its gate sees it: a gate of a
			// plan older than the one it is counted under is stale (that
			// plan owes its clients under its own guarantees).
			switch {
			case p.id > v.owedPlan:
				v.owedPlan, v.base, changed = p.id, max(-MaxCapacity, v.owed-v.seen-r.racing(&v)), true
			case p.id < v.owedPlan && delta > 0:
				return nil, errStale
			}
		}
		if delta > 0 {
			left := v.capacity // the capacity in force
			if r.holding != nil {
				left = min(left, r.holding.heldIn(r.store, p.window))
			}
			// A take within the client's guarantee may use units booked for
			// others: the guarantee holds at any time in the window, a
			// booking is a borrower's turn (a client that was not expected
			// to take its guarantee is owed it all the same).
			free := max(0, left-v.granted-due)
			if gate.on {
				free += min(gate.own, due, max(0, left-v.granted-free))
			}
			allowed := min(delta, free)
			var late float64
			moved, late = gate.room(allowed, v.granted+due, left, v.late)
			if claimed > moved { // its booking: past the gate
				moved = min(allowed, claimed)
				if gate.past {
					late = max(late, (gate.excess+float64(moved))/gate.weight)
				}
			}
			if late != v.late {
				v.late, changed = late, true
			}
			clipped = moved < allowed
			if ask != nil && moved >= ask.need {
				// (A take short of the request's need goes back to the
				// budget whole (sync): it is no take of the client's.)
				owed, seen := min(owedAfter(v.owed, gate, moved), MaxCapacity), min(seenAfter(v.seen, gate, moved), MaxCapacity)
				if owed != v.owed || seen != v.seen {
					v.owed, v.seen, changed = owed, seen, true
				}
			}
			// (Never more than the budget has left: a client counted twice
			// is owed no unit the budget does not hold.)
			owed := min(r.owedOf(&v), max(0, left-v.granted-moved))
			switch {
			case moved > 0 || !clipped || ask == nil:
			case mine.at > 0:
				bookedAt = mine.at // booked by this request, in an attempt before
			case !mine.mine:
				if bookedAt = bookUnits(&v, ask, gate, v.granted+due+owed, mine.ahead, left); bookedAt > 0 {
					changed = true
				}
			}
			// (What is seen granted counts the units booked for others
			// ahead: a refused client is not told of a unit that is theirs.)
			r.seen = budgetSeen{window: v.window, granted: v.granted + due + moved + mine.ahead, owed: owed, left: left, held: left < v.capacity}
		} else if delta < 0 {
			moved = -min(-delta, v.granted)
			v.returned = min(v.returned-moved, maxReturned)
			if gate.on && !r.cfg.Pace {
				v.owed = min(v.owed-moved, MaxCapacity)
			}
		}
		if moved == 0 && !changed {
			return nil, nil
		}
		v.granted += moved
		r.buf = appendBudget(r.buf, v)
		return r.buf, nil
	})
	switch {
	case err == nil:
		return max(moved, 0), clipped, bookedAt, nil
	case errors.Is(err, errStale), errors.Is(err, ErrRetriesExhausted):
		return 0, false, 0, err
	}
	return 0, false, 0, nil // a store error grants nothing
}

// grantedIn is what the window budget has granted in window k (0 when it
// holds another window, or cannot be read).
func (r *view) grantedIn(k int64) int64 {
	raw, _, err := r.store.Get(r.budgetKey)
	if err != nil {
		return 0
	}
	v, err := decodeBudget(raw)
	if err != nil || v.window != k {
		return 0
	}
	return v.granted
}

// resetBudget replaces an unreadable budget, read with CAS cas, by the
// budget of the view's window: empty for a window just opened (freshRoll),
// spent otherwise, since the lost value may have held grants of this
// window. (See view.resetCorrupt.)
func (r *view) resetBudget(cas uint32, freshRoll bool) {
	_, end := planWindow(&r.plan, r.cfg)
	v := budget{window: r.plan.window, roll: r.plan.roll, capacity: r.cfg.Capacity, end: end}
	if !freshRoll {
		v.granted = v.capacity
	}
	r.buf = appendBudget(r.buf, v)
	if err := r.store.Set(r.budgetKey, r.buf, cas); err != nil && !errors.Is(err, ErrCASMismatch) {
		r.obs.StoreFailure("reset budget", err)
	}
}
