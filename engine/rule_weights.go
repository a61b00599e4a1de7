package engine

import (
	"math"
	"sort"
)

// Weights (Config.Weights) turn equal shares into weighted ones
// in every policy. A client of weight w counts as w clients of weight 1
// with the same demand per unit: its default share is w × C/W (W the
// total weight of the counted clients), its seed reservation w × the
// per-unit reservation, its fair guarantee and water level w × the
// per-unit ones. Policies compute their parameters per weight unit
// (params over demands and weights) and a client's cap is
// w × capOf(params, d / w) (weightedCap), so a plan still derives one
// client's share from the plan and that client's own entry.

// Bounds on Config.Weights.
const (
	MaxWeights = 10_000
	MaxWeight  = 1_000
	// MinWeight keeps C/W and the caps finite: a weight of 1e-300 would
	// make them overflow.
	MinWeight      = 0.001
	MaxWeightIDLen = 256
)

// weightAt is weights[i], or 1 without weights.
func weightAt(weights []float64, i int) float64 {
	if weights == nil {
		return 1
	}
	return weights[i]
}

// totalWeight is W, at least a hair above 0 so that C/W is finite.
func totalWeight(weights []float64, n int) float64 {
	if weights == nil {
		return float64(max(n, 1))
	}
	var w float64
	for _, x := range weights {
		w += x
	}
	return math.Max(w, 1e-9)
}

// weightedCap is one client's real-valued cap under params pp: w times the
// cap of a weight-1 client with the same demand per unit. The fair
// policy's cap is a limit, the capacity, not a part of it (its weights act
// in the borrow gate), so it is not scaled: a light client alone may still
// use the whole window.
func weightedCap(pol compactPolicy, pp *policyParams, demand, w float64) float64 {
	if _, limit := pol.(Fair); limit {
		return pol.capOf(pp, sanitize(demand))
	}
	return w * pol.capOf(pp, sanitize(demand)/w)
}

// weightOf is the weight of the client with hash h (1 unless configured).
func (c *Config) weightOf(h uint64) float64 {
	if w, ok := c.hashedWeights[h]; ok {
		return w
	}
	return 1
}

// hashWeights indexes Weights by client hash, once per limiter.
func (c *Config) hashWeights() {
	if len(c.Weights) == 0 {
		c.hashedWeights = nil
		return
	}
	c.hashedWeights = make(map[uint64]float64, len(c.Weights))
	for id, w := range c.Weights {
		c.hashedWeights[clientHash(id)] = w
	}
}

// validateWeights reports the first bad entry of Config.Weights, in key
// order so that the message is the same on every run.
func validateWeights(ws map[string]float64) error {
	if len(ws) > MaxWeights {
		return fieldErr("weights", "at most %d entries, got %d", MaxWeights, len(ws))
	}
	ids := make([]string, 0, len(ws))
	for id := range ws {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		w := ws[id]
		switch {
		case id == "" || len(id) > MaxWeightIDLen:
			return fieldErr("weights", "client ids must be 1 to %d bytes, got %d", MaxWeightIDLen, len(id))
		case math.IsNaN(w) || w < MinWeight || w > MaxWeight:
			return fieldErr("weights", "%q: must be in [%v, %d], got %v", id, MinWeight, MaxWeight, w)
		}
	}
	return nil
}

// weightedLevel is the water level L per weight unit with
// Σ wᵢ·min(dᵢ/wᵢ, L) = capacity, or capacity when everything fits.
func weightedLevel(capacity float64, demands, weights []float64) float64 {
	n := len(demands)
	order := scratchInts(n)
	unit := func(i int) float64 { return sanitize(demands[i]) / weightAt(weights, i) }
	sort.Slice(order, func(a, b int) bool { return unit(order[a]) < unit(order[b]) })
	left, wLeft := capacity, totalWeight(weights, n)
	for _, i := range order {
		fair := left / wLeft
		if unit(i) >= fair {
			return fair
		}
		left -= unit(i) * weightAt(weights, i)
		wLeft -= weightAt(weights, i)
		if wLeft <= 0 {
			break
		}
	}
	return capacity
}
