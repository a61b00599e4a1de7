package main

import (
	"math"
	"sort"
	"time"

	"github.com/borrowcycle/borrowcycle/internal/capcheck"
)

// Metrics judge one run: the capacity promise (per window and per share),
// then how fully and how fairly capacity went to the clients; README.md in
// this folder defines each. A value
// that does not apply to the run (no light client, no step) is NaN, printed
// as "n/a"; Convergence is −1 when allocations never settle.
type Metrics struct {
	// WindowViolations counts aligned wall-clock windows that admitted more
	// than C; ShareViolations (share period, client) pairs admitted beyond
	// the share announced for them. WorstWindow is the most any window
	// admitted, over C.
	WindowViolations int
	ShareViolations  int
	WorstWindow      float64
	// WorstSliding is the most admitted in any interval of one cycle's
	// length, wherever it starts, over C: up to 2 without pacing (the end
	// of one window and the start of the next).
	WorstSliding   float64
	Utilisation    float64
	Jain           float64
	LightRejection float64
	InflationGain  float64
	Stranded       float64
	Convergence    int
	// StepCycle is the cycle Convergence counts from (0: no step), and
	// StepDistance the L1 distance from max-min (over the target's total)
	// in the last cycle judged: how far off allocations settle.
	StepCycle    int
	StepDistance float64
	// Amplification is attempts per new request: what retries add.
	Amplification float64
	// RetryAfterOK is the share of retries made when a refusal's
	// Retry-After said that were admitted (NaN: no client honours it).
	RetryAfterOK float64
	// Plans made, of which Replans re-planned a window for newcomers.
	Plans   int
	Replans int
}

// convergenceTolerance is "within 5% of max-min".
const convergenceTolerance = 0.05

// Compute derives the metrics of res. inflated is the run with the
// scenario's inflate client's demand multiplied (nil to skip that metric).
func Compute(res, inflated *Result) Metrics {
	m := Metrics{
		WindowViolations: res.Cap.Count(capcheck.OverCapacity),
		ShareViolations:  res.Cap.Count(capcheck.OverShare) + res.Cap.Count(capcheck.MixedShares),
		WorstWindow:      worstWindow(res),
		WorstSliding:     ratio(float64(capcheck.SlidingMost(res.AdmittedAt, time.Duration(res.Scenario.Cycle))), float64(res.Scenario.Capacity)),
		Utilisation:      utilisation(res),
		Jain:             meanJain(res),
		LightRejection:   lightRejection(res),
		InflationGain:    math.NaN(),
		Stranded:         stranded(res),
		Convergence:      -1,
		StepCycle:        stepCycle(res.Scenario),
		Amplification:    ratio(sum2(res.Demand), sum2(res.Fresh)),
		RetryAfterOK:     ratio(float64(res.ToldOK), float64(res.Told)),
		Plans:            res.Plans,
		Replans:          res.Replans,
	}
	if inflated != nil {
		m.InflationGain = inflationGain(res, inflated, res.Scenario.Metrics.Inflate)
	}
	if m.StepCycle > 0 {
		end := stepWindowEnd(res.Scenario, m.StepCycle)
		m.Convergence = convergence(res, m.StepCycle, end)
		m.StepDistance = maxMinDistance(res, min(end, len(res.Demand)+1)-1)
	}
	return m
}

// worstWindow is the most any aligned window admitted, over C.
func worstWindow(res *Result) float64 {
	_, n := res.Cap.WorstWindow()
	return ratio(float64(n), float64(res.Scenario.Capacity))
}

// MaxMin is the max-min fair (water-filling) split of capacity over
// demands: nobody gets more than it asked for, and capacity left by small
// demands is shared equally by the rest.
func MaxMin(capacity int64, demands []int64) []float64 {
	return WeightedMaxMin(capacity, demands, nil)
}

// WeightedMaxMin is MaxMin where a client of weight w counts as w
// clients: capacity left by small demands is shared in proportion to
// weight. nil weights are all 1.
func WeightedMaxMin(capacity int64, demands []int64, weights []float64) []float64 {
	w := func(i int) float64 {
		if weights == nil {
			return 1
		}
		return weights[i]
	}
	out := make([]float64, len(demands))
	order := make([]int, 0, len(demands))
	var wLeft float64
	for i, d := range demands {
		if d > 0 {
			order = append(order, i)
			wLeft += w(i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		return float64(demands[order[a]])/w(order[a]) < float64(demands[order[b]])/w(order[b])
	})
	left := float64(capacity)
	for _, i := range order {
		fair := left / wLeft * w(i)
		out[i] = math.Min(float64(demands[i]), fair)
		left -= out[i]
		wLeft -= w(i)
	}
	return out
}

// Jain is Jain's fairness index (Σx)²/(n·Σx²) of xs: 1 when all are equal,
// 1/n when one takes everything. Empty or all-zero input gives NaN.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if len(xs) == 0 || s2 == 0 {
		return math.NaN()
	}
	return s * s / (float64(len(xs)) * s2)
}

// honestTarget is the max-min target of cycle row k among honest clients;
// adversaries get 0.
func honestTarget(res *Result, k int) []float64 {
	demand := make([]int64, len(res.Demand[k]))
	for i, d := range res.Demand[k] {
		if res.Members[i].honest {
			demand[i] = d
		}
	}
	return WeightedMaxMin(res.Scenario.Capacity, demand, memberWeightsOf(res))
}

// memberWeightsOf is each member's weight, in member order.
func memberWeightsOf(res *Result) []float64 {
	ws := make([]float64, len(res.Members))
	for i, m := range res.Members {
		ws[i] = m.weightOr1()
	}
	return ws
}

// meanJain averages, over cycles with demand, Jain's index of admitted over
// the max-min target, among the clients the target gives something.
func meanJain(res *Result) float64 {
	var total float64
	var n int
	for k := range res.Demand {
		target := honestTarget(res, k)
		var xs []float64
		for i, m := range target {
			if m > 0 {
				xs = append(xs, float64(res.Admitted[k][i])/m)
			}
		}
		if j := Jain(xs); !math.IsNaN(j) {
			total += j
			n++
		}
	}
	return ratio(total, float64(n))
}

// utilisation is Σ admitted / Σ min(Σ demand, C): how much of what could
// have been served was.
func utilisation(res *Result) float64 {
	var admitted, servable float64
	for k := range res.Demand {
		admitted += float64(sum(res.Admitted[k]))
		servable += math.Min(float64(sum(res.Demand[k])), float64(res.Scenario.Capacity))
	}
	return ratio(admitted, servable)
}

// lightRejection is the share of light clients' attempts rejected, where a
// light client in a cycle is an honest one that asked for no more than its
// default share, C/N (w × C/W with weights: W the total weight of the
// clients registered at the cycle's start).
func lightRejection(res *Result) float64 {
	var rejected, demand float64
	for k := range res.Demand {
		n := res.Registered[k]
		if n == 0 {
			continue
		}
		def := float64(res.Scenario.Capacity) / registeredWeight(res, k, n)
		for i, d := range res.Demand[k] {
			if d > 0 && float64(d) <= def*res.Members[i].weightOr1() && res.Members[i].honest {
				demand += float64(d)
				rejected += float64(d - res.Admitted[k][i])
			}
		}
	}
	return ratio(rejected, demand)
}

// registeredWeight is the total weight of the n clients registered at the
// start of cycle row k: the members with a share, plus weight 1 for any
// registered id that is not a member (a spoofed one).
func registeredWeight(res *Result, k, n int) float64 {
	var w float64
	members := 0
	for i, share := range res.Share[k] {
		if share >= 0 {
			w += res.Members[i].weightOr1()
			members++
		}
	}
	return w + float64(max(0, n-members))
}

// stranded is the share left unused by registered clients in cycles where
// someone was turned away, over all the capacity of the run. A cycle
// strands no more than the capacity it left unused: the fair policy's
// shares are limits that sum to more than C, not a partition of it.
func stranded(res *Result) float64 {
	var unused float64
	for k := range res.Demand {
		if sum(res.Rejected[k]) == 0 {
			continue
		}
		var left float64
		for i, share := range res.Share[k] {
			if share > 0 {
				left += math.Max(0, float64(share-res.Admitted[k][i]))
			}
		}
		unused += math.Min(left, math.Max(0, float64(res.Scenario.Capacity-sum(res.Admitted[k]))))
	}
	return ratio(unused, float64(res.Scenario.Capacity)*float64(len(res.Demand)))
}

// inflationGain compares what the inflating client gets with what it got
// honestly. Its admitted requests in the inflated run are capped at its
// honest demand per cycle: requests it only sent to look bigger are not a
// gain, the extra real ones served are.
func inflationGain(honest, inflated *Result, name string) float64 {
	var got, base float64
	for i, m := range honest.Members {
		if m.name != name && honest.Scenario.Clients[m.group].Name != name {
			continue
		}
		for k := range honest.Demand {
			base += float64(honest.Admitted[k][i])
			got += float64(min(inflated.Admitted[k][i], honest.Demand[k][i]))
		}
	}
	return ratio(got, base) - 1
}

// convergence counts the cycles from step until admitted allocations are
// within 5% of max-min (in L1 distance over the target's total) and stay so
// until windowEnd. −1: they never do.
func convergence(res *Result, step, windowEnd int) int {
	settled := -1
	for k := step; k < windowEnd && k <= len(res.Demand); k++ {
		switch d := maxMinDistance(res, k); {
		case math.IsNaN(d) || d <= convergenceTolerance:
			if settled < 0 {
				settled = k
			}
		default:
			settled = -1
		}
	}
	if settled < 0 {
		return -1
	}
	return settled - step
}

// maxMinDistance is Σ|admitted − target| / Σ target in grid cycle k
// (1-based), over honest clients; NaN when nobody wanted anything.
func maxMinDistance(res *Result, k int) float64 {
	row := k - 1
	target := honestTarget(res, row)
	var dist, total float64
	for i, m := range target {
		if res.Members[i].honest {
			dist += math.Abs(float64(res.Admitted[row][i]) - m)
			total += m
		}
	}
	return ratio(dist, total)
}

// stepCycle is the scenario's demand step: explicit, or the first step or
// burst arrival's start.
func stepCycle(sc *Scenario) int {
	if sc.Metrics.Step > 0 {
		return sc.Metrics.Step
	}
	for _, c := range sc.Clients {
		if a := c.Arrival; a != nil && (a.Kind == "step" || a.Kind == "burst") {
			return a.At
		}
	}
	return 0
}

// stepWindowEnd is where convergence stops being judged: the end of a
// burst (demand steps back down there), else the end of the run.
func stepWindowEnd(sc *Scenario, step int) int {
	for _, c := range sc.Clients {
		if a := c.Arrival; a != nil && a.Kind == "burst" && a.At == step {
			return a.At + a.Length
		}
	}
	return sc.Cycles + 1
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

func sum2(g [][]int64) float64 {
	var s int64
	for _, row := range g {
		s += sum(row)
	}
	return float64(s)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}
