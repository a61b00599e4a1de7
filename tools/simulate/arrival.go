package main

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Arrival is a process that yields how many requests a client sends in each
// cycle. Rates are requests per cycle. Every random draw comes from a
// generator seeded by the scenario seed and the client's index, so a run is
// reproducible and changing one client leaves the others' draws alone.
type Arrival struct {
	// Kind is one of constant, poisson, onoff, pareto_onoff, step, burst.
	Kind string `yaml:"kind"`
	// Rate is the base rate: the constant rate, the Poisson mean, the rate
	// while on, the rate before a step, the rate outside a burst.
	Rate float64 `yaml:"rate"`
	// To is a step's rate from cycle At on.
	To float64 `yaml:"to"`
	// At is the first cycle of a step or a burst.
	At int `yaml:"at"`
	// Factor multiplies Rate during a burst of Length cycles.
	Factor float64 `yaml:"factor"`
	Length int     `yaml:"length"`
	// On and Off are an on/off process's period lengths in cycles; Phase
	// shifts it (cycles spent off before the first on period).
	On    int `yaml:"on"`
	Off   int `yaml:"off"`
	Phase int `yaml:"phase"`
	// Alpha, MeanOn and MeanOff shape a Pareto on/off process: period
	// lengths (in cycles, rounded up) are Pareto with shape Alpha > 1 and
	// these means. Heavy tails make the long bursts that defeat averaging.
	Alpha   float64 `yaml:"alpha"`
	MeanOn  float64 `yaml:"mean_on"`
	MeanOff float64 `yaml:"mean_off"`
	// Poisson draws each cycle's count from a Poisson distribution around
	// the process's rate instead of rounding the rate. Kind poisson is
	// constant with Poisson set.
	Poisson bool `yaml:"poisson"`
}

func (a *Arrival) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("arrival %s: "+format, append([]any{a.Kind}, args...)...)
	}
	if a.Rate < 0 || a.To < 0 || math.IsNaN(a.Rate) || math.IsNaN(a.To) {
		return bad("rates must not be negative")
	}
	switch a.Kind {
	case "constant", "poisson":
	case "onoff":
		if a.On < 1 || a.Off < 0 || a.Phase < 0 {
			return bad("needs on >= 1, off >= 0, phase >= 0")
		}
	case "pareto_onoff":
		if a.Alpha <= 1 || a.MeanOn < 1 || a.MeanOff < 1 {
			return bad("needs alpha > 1, mean_on >= 1, mean_off >= 1")
		}
	case "step":
		if a.At < 1 {
			return bad("needs at >= 1")
		}
	case "burst":
		if a.At < 1 || a.Length < 1 || a.Factor <= 0 {
			return bad("needs at >= 1, length >= 1, factor > 0")
		}
	default:
		return fmt.Errorf("arrival kind: must be constant, poisson, onoff, pareto_onoff, step or burst, got %q", a.Kind)
	}
	return nil
}

// series returns the rate of each cycle 1..cycles (index 0 is cycle 1).
func (a *Arrival) series(cycles int, rng *rand.Rand) []float64 {
	out := make([]float64, cycles)
	switch a.Kind {
	case "constant", "poisson":
		for i := range out {
			out[i] = a.Rate
		}
	case "onoff":
		period := a.On + a.Off
		for i := range out {
			if pos := (i - a.Phase) % period; i >= a.Phase && pos < a.On {
				out[i] = a.Rate
			}
		}
	case "pareto_onoff":
		a.paretoOnOff(out, rng)
	case "step":
		for i := range out {
			out[i] = a.Rate
			if i+1 >= a.At {
				out[i] = a.To
			}
		}
	case "burst":
		for i := range out {
			out[i] = a.Rate
			if c := i + 1; c >= a.At && c < a.At+a.Length {
				out[i] = a.Rate * a.Factor
			}
		}
	}
	return out
}

// paretoOnOff alternates on and off periods of Pareto-distributed length,
// starting off so that clients do not all burst in cycle 1.
func (a *Arrival) paretoOnOff(out []float64, rng *rand.Rand) {
	on := false
	for i := 0; i < len(out); {
		mean := a.MeanOff
		if on {
			mean = a.MeanOn
		}
		n := int(math.Ceil(pareto(rng, a.Alpha, mean)))
		for ; n > 0 && i < len(out); n-- {
			if on {
				out[i] = a.Rate
			}
			i++
		}
		on = !on
	}
}

// counts turns rates into integer request counts.
func (a *Arrival) counts(cycles int, rng *rand.Rand) []int64 {
	rates := a.series(cycles, rng)
	out := make([]int64, cycles)
	for i, r := range rates {
		if a.Poisson || a.Kind == "poisson" {
			out[i] = poisson(rng, r)
		} else {
			out[i] = int64(math.Round(r))
		}
	}
	return out
}

// pareto draws from a Pareto distribution with shape alpha > 1 and the given
// mean, by inverting its CDF. The scale x_m = mean·(alpha−1)/alpha makes the
// mean come out right.
func pareto(rng *rand.Rand, alpha, mean float64) float64 {
	xm := mean * (alpha - 1) / alpha
	u := 1 - rng.Float64() // in (0, 1], so the power is finite
	return xm / math.Pow(u, 1/alpha)
}

// poisson draws a Poisson count. Knuth's product method is exact but takes
// O(mean) steps and underflows for large means, where a rounded normal
// approximation is within a fraction of a request of the real thing.
func poisson(rng *rand.Rand, mean float64) int64 {
	if mean <= 0 {
		return 0
	}
	if mean > 30 {
		return max(0, int64(math.Round(mean+math.Sqrt(mean)*rng.NormFloat64())))
	}
	limit := math.Exp(-mean)
	k, p := int64(0), rng.Float64()
	for p > limit {
		k++
		p *= rng.Float64()
	}
	return k
}

// clientRNG is the generator for the client at index idx of a scenario.
func clientRNG(seed uint64, idx int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(idx)+1))
}
