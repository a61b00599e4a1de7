package engine

import (
	"math"
)

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
//   - once it has had L, it borrows only what the pool has held for
//     fairLag of a window unused: capacity that nobody under the level
//     wanted; and so may a client at what it has accrued of L, when that
//     late pool holds more than lateReserve of the capacity. This is what
//     makes the policy work-conserving when the demand it was sized from
//     has gone (a stale level), without racing for rounding's odd units.
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
// demands fit. fairCapacity is params[2].
const (
	fairLevel    = 1
	fairCapacity = 2
)

// fairLag is how long, as a fraction of the window, pool capacity must sit
// unused before a client beyond the water level may borrow it: clients
// under the level have it first.
const fairLag = 1.0 / 32

// lateReserve is how much of the capacity the late pool must hold before
// a client still under its level (held back by its accrual) may take from
// it: enough to tell a real surplus (demand that went away) from rounding.
const lateReserve = 1.0 / 16

// params computes D and the water level L over every client's demand.
func (Fair) params(capacity int64, demands, weights []float64) policyParams {
	c := float64(capacity)
	return policyParams{c / totalWeight(weights, len(demands)), weightedLevel(c, demands, weights), c}
}

// capOf is the most a client may hold in the window: the capacity.
func (Fair) capOf(pp *policyParams, _ float64) float64 { return pp[fairCapacity] }

// tiers are a client's guarantee and its priority limit (the water level,
// at least the guarantee), in units.
func (Fair) tiers(pp *policyParams) (guarantee, level float64) {
	return pp[0], math.Max(pp[0], pp[fairLevel])
}

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
		caps[i] = math.Min(sanitize(d), level)
		used += caps[i]
	}
	spare := math.Max(0, float64(capacity)-used) / float64(n)
	for i := range caps {
		caps[i] += spare
	}
	return largestRemainder(dst, capacity, caps)
}

// lender is a policy whose caps sum to more than the capacity: a client
// beyond its guarantee borrows, and only from the pool (see borrowGate).
type lender interface {
	tiers(pp *policyParams) (guarantee, level float64)
}

// borrowGate limits what one lease may take from the window budget, in
// the fair policy's three tiers: the client's own units (up to its
// guarantee) from anywhere in the budget; up to the water level, only
// capacity accrued by now and not granted; beyond it, only capacity
// accrued fairLag ago and still not granted. Zero value: no gate.
type borrowGate struct {
	on       bool
	own      int64   // units the lease may take within the client's guarantee
	level    int64   // units the lease may take within the water level accrued so far
	beyond   bool    // the client has had its whole water level: it may use the late pool
	entitled bool    // the client has had what it has accrued of its level: the late pool's surplus
	elapsed  float64 // fraction of the window elapsed, in [0, 1]
}

// room is how many units a take may move from a budget that has granted
// granted of capacity, given what the budget alone allows (allowed).
func (b borrowGate) room(allowed, granted, capacity int64) int64 {
	if !b.on {
		return allowed
	}
	pool := accrued(capacity, b.elapsed) - granted
	// The late pool trails the pool by fairLag and catches up at the
	// window's end, so that everything unused is lendable by then.
	late := accrued(capacity, (b.elapsed-fairLag)/(1-fairLag)) - granted
	switch {
	case b.beyond:
	case b.entitled:
		// Under its level but at what it has accrued of it: only a real
		// surplus (more than lateReserve of the capacity) is worth a race,
		// not the odd unit that rounding leaves.
		late -= int64(lateReserve * float64(capacity))
	default:
		late = 0 // under its level, a client borrows in step with time only
	}
	return max(0, min(allowed, max(b.own, min(b.level, pool), late)))
}

// accrued is how much of capacity has accrued at fraction f of a window,
// rounded up: a unit is lendable from the moment it starts accruing, so
// the last one is not stranded until the window's very end.
func accrued(capacity int64, f float64) int64 {
	return int64(math.Ceil(math.Max(0, f) * float64(capacity)))
}

// gateFor is the gate of a lease for the client with hash hash that has
// been granted granted units, under plan p at time t (Unix ns). Its tiers
// are the per-unit ones times its weight.
func gateFor(pol compactPolicy, p *plan, cfg *Config, hash uint64, granted, t int64) borrowGate {
	l, ok := pol.(lender)
	if !ok {
		return borrowGate{}
	}
	g, lv := l.tiers(&p.params)
	w := cfg.weightOf(hash)
	g, lv = g*w, lv*w
	f := windowElapsed(p, cfg, t)
	// The level accrues over the window like the pool, so that borrowers
	// under it share the pool in step with time rather than by who asks
	// first (or most often).
	own := int64(math.Floor(g))
	if cfg.Pace {
		own = pacedAmount(own, cfg.Burst, f) // the guarantee accrues too
	}
	entitled := int64(math.Max(math.Floor(g), math.Ceil(lv*f))) // its guarantee, or its level accrued so far
	return borrowGate{
		on:       true,
		own:      max(0, own-granted),
		level:    max(0, entitled-granted),
		beyond:   granted >= int64(math.Floor(lv)),
		entitled: granted >= entitled,
		elapsed:  f,
	}
}

// windowElapsed is the fraction of p's window elapsed at t, in [0, 1].
func windowElapsed(p *plan, cfg *Config, t int64) float64 {
	start, end := planWindow(p, cfg)
	f := float64(t-start) / float64(end-start)
	return math.Max(0, math.Min(1, f))
}

// nextAccrual is when a client held back by pacing (until paceAt) or by
// the borrow gate (gated) may find more: for the gate, one unit's accrual
// time after t. 0 when neither held it back (only the window's end brings
// more).
func nextAccrual(cfg *Config, t, paceAt int64, gated bool) int64 {
	if paceAt > 0 {
		return paceAt
	}
	if !gated {
		return 0
	}
	return t + max(1, int64(cfg.Cycle)/max(1, cfg.Capacity))
}

// waitsForPool reports whether a client exhausted by the borrow gate must
// still wait at t: before its next accrual, asking the store again cannot
// help.
func (cs *clientState) waitsForPool(t int64) bool { return cs.accrues == 0 || t < cs.accrues }
