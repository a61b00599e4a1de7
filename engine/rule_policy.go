package engine

import (
	"math"
	"sort"
)

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
	params(capacity int64, demands, weights []float64) policyParams
	capOf(p *policyParams, demand float64) float64
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
// weight unit, see rule_weights.go). With them, capOf gives any one client's
// real-valued cap from its own demand alone, which is what lets a worker
// derive one client's share without reading the others (see rule_shares.go).
func (p Seed) params(capacity int64, demands, weights []float64) policyParams {
	def := float64(capacity) / totalWeight(weights, len(demands))
	floor := def * clamp01(p.Reservation)
	var deficit, surplus float64
	for i, d := range demands {
		w := weightAt(weights, i)
		g := w * (def - math.Max(sanitize(d)/w, floor))
		if g < 0 {
			deficit -= g
		} else {
			surplus += g
		}
	}
	return policyParams{def, floor, deficit, surplus, math.Max(0, surplus-deficit)}
}

// capOf is one client's real-valued cap: D plus a loan in proportion to its
// deficit for a client that wanted more than D, and its reserved demand
// plus a part of what is left over for one that wanted less.
func (Seed) capOf(pp *policyParams, demand float64) float64 {
	def, floor, deficit, surplus, remaining := pp[0], pp[1], pp[2], pp[3], pp[4]
	r := math.Max(sanitize(demand), floor)
	g := def - r
	switch {
	case g <= 0 && deficit > 0:
		need := -g
		return def + math.Min(need, need/deficit*surplus)
	case g <= 0:
		return def
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

func (Static) params(capacity int64, demands, weights []float64) policyParams {
	return policyParams{float64(capacity) / totalWeight(weights, len(demands))}
}

func (Static) capOf(pp *policyParams, _ float64) float64 { return pp[0] }

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
	params := p.params(capacity, demands, nil)
	caps := scratchFloats(n)
	for i, d := range demands {
		caps[i] = p.capOf(&params, d)
	}
	return largestRemainder(dst, capacity, caps)
}

// Allocate applies the seed policy to integer demands (docs/contract.md,
// "How shares are computed"), for tests, the simulator and operators'
// what-if questions.
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
		c = math.Max(0, sanitize(c))
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
	return math.Min(x, 1)
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
