package engine

import (
	"math"
	"sort"
)

// This file derives shares: how a plan is computed from every client's
// entry (once per plan, O(clients)), and how one client's share follows from
// the plan and its own entry alone (once per client and plan, O(1)). Both
// are pure, and the second uses exactly the arithmetic of the first, so
// every worker that derives a share gets the roller's number.

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

// counted is registered and not expired.
func counted(e *entry, p *plan, cfg *Config) bool { return registered(e, p) && !expired(e, p, cfg) }

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
	return roundCap(weightedCap(pol, &p.params, d, w), e.since, e.hash, p)
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
	return math.Min(shown, def)
}

func roundCap(c float64, since int64, hash uint64, p *plan) int64 {
	c = math.Max(0, sanitize(c))
	f := math.Floor(c)
	if roundsUp(c-f, since, hash, p) {
		f++
	}
	return int64(math.Min(f, float64(p.capacity)))
}

// roundsUp reports whether a client's cap rounds up under p's largest
// remainder threshold. Clients are ordered "larger fraction first, then
// earlier arrival (registration order), then lower hash", and the first
// capacity − Σfloor of them round up: the threshold is the last of those.
func roundsUp(frac float64, since int64, hash uint64, p *plan) bool {
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
	granted []int64
	fracs   []float64
	order   []int
}

func (s *planScratch) reset() {
	s.truncate(0)
}

func (s *planScratch) truncate(n int) {
	s.hashes, s.since, s.demands, s.isNew, s.shown, s.granted = s.hashes[:n], s.since[:n], s.demands[:n], s.isNew[:n], s.shown[:n], s.granted[:n]
	s.weights = s.weights[:n]
}

// add records one client counted in the plan being computed.
func (s *planScratch) add(e *entry, next *plan, cfg *Config) {
	s.hashes = append(s.hashes, e.hash)
	s.since = append(s.since, e.since)
	s.demands = append(s.demands, demandOf(e, next, cfg))
	s.isNew = append(s.isNew, isNew(e, next))
	s.shown = append(s.shown, shown(e))
	s.weights = append(s.weights, cfg.weightOf(e.hash))
	g := int64(0)
	if e.window == next.window {
		g = e.granted
	}
	s.granted = append(s.granted, g)
}

// computePlan fills next's parameters from the clients in s. capacity is
// what the shares split; left is what remains of the window's budget (the
// whole capacity for a new window).
func computePlan(next *plan, s *planScratch, pol compactPolicy, capacity, left int64) {
	n := len(s.hashes)
	next.capacity, next.n = capacity, uint32(n)
	next.thrFrac, next.thrSince, next.thrHash, next.scale = 2, 0, 0, 1
	if n == 0 {
		next.params = pol.params(capacity, nil, nil)
		return
	}
	def := float64(capacity) / totalWeight(s.weights, n) // per weight unit
	for i := range s.demands {
		if s.isNew[i] {
			s.demands[i] = newDemand(s.weights[i]*def, s.shown[i])
		}
	}
	next.params = pol.params(capacity, s.demands, s.weights)
	s.fracs = resizeFloats(s.fracs, n)
	var floors int64
	for i, d := range s.demands {
		c := math.Max(0, sanitize(weightedCap(pol, &next.params, d, s.weights[i])))
		f := math.Floor(c)
		s.fracs[i] = c - f
		s.demands[i] = f // the demand is not needed any more: keep the floor
		floors += int64(math.Min(f, float64(capacity)))
	}
	switch up := capacity - floors; {
	case up <= 0:
		// nobody rounds up (thrFrac 2 is above every fraction)
	case up >= int64(n):
		next.thrFrac, next.thrSince, next.thrHash = -1, math.MaxInt64, math.MaxUint64
	default:
		i := s.selectNth(int(up) - 1)
		next.thrFrac, next.thrSince, next.thrHash = s.fracs[i], s.since[i], s.hashes[i]
	}
	var want int64
	for i, d := range s.demands {
		// d now holds the cap's floor (see above); roundCap's arithmetic on
		// the same cap gives the same integer.
		f := d
		if roundsUp(s.fracs[i], s.since[i], s.hashes[i], next) {
			f++
		}
		full := int64(math.Min(f, float64(capacity)))
		want += max(0, full-s.granted[i])
	}
	if _, lends := pol.(lender); lends {
		return // limits, not a partition: the budget and the borrow gate bound the window
	}
	if left = max(left, 0); want > left {
		next.scale = float64(left) / float64(want)
	}
}

// selectNth returns the index of the k-th (0-based) client in the
// rounding order (see before): the threshold of largest remainder. Quickselect, O(n) expected; it falls back to sorting the
// range left when partitions go badly.
func (s *planScratch) selectNth(k int) int {
	n := len(s.fracs)
	s.order = s.order[:0]
	for i := 0; i < n; i++ {
		s.order = append(s.order, i)
	}
	o := s.order
	before := func(a, b int) bool {
		return before(s.fracs[a], s.since[a], s.hashes[a], s.fracs[b], s.since[b], s.hashes[b])
	}
	lo, hi := 0, n-1
	budget := 2 * (bitsLen(n) + 1)
	for lo < hi {
		if budget == 0 {
			sub := o[lo : hi+1]
			sort.Slice(sub, func(i, j int) bool { return before(sub[i], sub[j]) })
			return o[k]
		}
		budget--
		// median of three as the pivot
		mid := lo + (hi-lo)/2
		if before(o[mid], o[lo]) {
			o[mid], o[lo] = o[lo], o[mid]
		}
		if before(o[hi], o[lo]) {
			o[hi], o[lo] = o[lo], o[hi]
		}
		if before(o[hi], o[mid]) {
			o[hi], o[mid] = o[mid], o[hi]
		}
		pivot := o[mid]
		o[mid], o[hi] = o[hi], o[mid]
		store := lo
		for i := lo; i < hi; i++ {
			if before(o[i], pivot) {
				o[i], o[store] = o[store], o[i]
				store++
			}
		}
		o[store], o[hi] = o[hi], o[store]
		switch {
		case k == store:
			return o[k]
		case k < store:
			hi = store - 1
		default:
			lo = store + 1
		}
	}
	return o[k]
}

func bitsLen(n int) int {
	b := 0
	for ; n > 0; n >>= 1 {
		b++
	}
	return b
}

func resizeFloats(f []float64, n int) []float64 {
	if cap(f) < n {
		return make([]float64, n)
	}
	return f[:n]
}
