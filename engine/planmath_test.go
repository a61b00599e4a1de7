package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// A plan computed a step at a time is the plan computed at once, for every
// policy, with weights, caps and newcomers, whatever the steps.
func TestPlanMathInSteps(t *testing.T) {
	pols := []compactPolicy{Seed{Reservation: 0.1}, Static{}, Fair{}}
	for seed := uint64(0); seed < 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 1 + rng.IntN(300)
		var s planScratch
		for i := 0; i < n; i++ {
			s.hashes = append(s.hashes, rng.Uint64()|1)
			s.since = append(s.since, int64(rng.IntN(4))) // ties: the hash decides
			d := float64(rng.IntN(40))
			if rng.IntN(4) == 0 {
				d = 7 // many equal demands
			}
			s.demands = append(s.demands, d)
			s.isNew = append(s.isNew, rng.IntN(8) == 0)
			s.shown = append(s.shown, -1)
			w := 1.0
			if seed%3 == 1 {
				w = 0.5 + rng.Float64()*3
			}
			s.weights = append(s.weights, w)
			most := math.Inf(1)
			if seed%4 == 2 && rng.IntN(3) == 0 {
				most = float64(1 + rng.IntN(20))
			}
			s.mosts = append(s.mosts, most)
			s.granted = append(s.granted, int64(rng.IntN(5)))
		}
		capacity := int64(1 + rng.IntN(2000))
		left := capacity - int64(rng.IntN(int(capacity)))
		for _, pol := range pols {
			var want plan
			computePlan(&want, &s, pol, capacity, left)
			for _, budget := range []int{1, 7, 1000} {
				var m planMath
				m.start(&plan{}, &s, pol, capacity, left)
				steps := 0
				for !m.step(budget) {
					if steps++; steps > 100*n+1000 {
						t.Fatalf("seed %d %s: no plan after %d steps of %d", seed, pol.Name(), steps, budget)
					}
				}
				var got plan
				copyShares(&got, &m.next)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("seed %d %s, steps of %d:\n got %+v\nwant %+v", seed, pol.Name(), budget, got, want)
				}
			}
		}
	}
}

// The water level found a step at a time meets its definition:
// Σ wᵢ·min(dᵢ/wᵢ, L) = c, or L = c when every demand fits.
func TestWeightedLevelMeetsItsDefinition(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		n := 1 + rng.IntN(50)
		d, w := make([]float64, n), make([]float64, n)
		var total float64
		for i := range d {
			d[i], w[i] = float64(rng.IntN(30)), 0.25+rng.Float64()*2
			if rng.IntN(3) == 0 {
				d[i] = 10
			}
			total += d[i]
		}
		c := float64(1 + rng.IntN(400))
		level := weightedLevel(c, d, w)
		if total < c {
			if level != c {
				t.Errorf("seed %d: every demand fits (%v < %v), level %v, want %v", seed, total, c, level, c)
			}
			continue
		}
		var filled float64
		for i := range d {
			filled += w[i] * math.Min(d[i]/w[i], level)
		}
		if math.Abs(filled-c) > 1e-6*c {
			t.Errorf("seed %d: Σ wᵢ·min(dᵢ/wᵢ, %v) = %v, want %v", seed, level, filled, c)
		}
	}
}

// When the demands fill the capacity exactly, the level is the lowest that
// does, the largest demand (per weight unit), as the sorted walk the
// search replaced gave: above it, a client wanting more would borrow in
// step with the whole capacity rather than with its level (the fair
// policy's step scenario is such a window: 10 + 3 × 30 = 100).
func TestWeightedLevelOfDemandsThatFillTheCapacity(t *testing.T) {
	for _, tc := range []struct {
		d, w []float64
		want float64
	}{
		{[]float64{10, 30, 30, 30}, nil, 30},
		{[]float64{30, 10, 30, 30}, nil, 30},
		{[]float64{60, 40}, []float64{2, 1}, 40},
		{[]float64{100}, nil, 100},
	} {
		if got := weightedLevel(100, tc.d, tc.w); got != tc.want {
			t.Errorf("weightedLevel(100, %v, %v) = %v, want %v", tc.d, tc.w, got, tc.want)
		}
	}
}
