package filter

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/borrowcycle/borrowcycle/engine"
)

// This file parses the policy, burst and weights fields (docs/contract.md, "The fair
// policy, pacing and weights"): policy, burst and weights, strictly like
// the others: a wrong type, a null or a value out of range is refused with
// the field's name.

// policies maps the policy field's values to engine policies; the first
// is the default.
var policies = []string{"seed", "fair", "static"}

// policyFields sets ec's Policy, Pace, Burst and Weights from raw.
// Reservation must already be parsed: the seed policy carries it.
func (p *fieldParser) policyFields(raw *rawConfig, ec *engine.Config) {
	switch p.enum("policy", raw.Policy, policies[0], policies...) {
	case "seed":
		ec.Policy = nil // the engine's default, which carries the reservation
	case "fair":
		ec.Policy = engine.Fair{}
	case "static":
		ec.Policy = engine.Static{}
	}
	if raw.Burst != nil {
		ec.Burst = p.number("burst", raw.Burst, 0, 0, 1)
		ec.Pace = true
	}
	ec.Weights = p.weights("weights", raw.Weights)
}

// weights parses an object of client id → weight in [MinWeight, MaxWeight], at
// most MaxWeights entries, ids 1 to MaxWeightIDLen bytes. Members are read
// in sorted order, so the same bad one is reported every time.
func (p *fieldParser) weights(field string, raw json.RawMessage) map[string]float64 {
	if !p.present(field, raw, "an object", false) {
		return nil
	}
	members, names, err := objectMembers(raw)
	if err != nil {
		p.fail(field, err.Error())
		return nil
	}
	if len(names) > engine.MaxWeights {
		p.fail(field, "at most "+strconv.Itoa(engine.MaxWeights)+" entries, got "+strconv.Itoa(len(names)))
		return nil
	}
	out := make(map[string]float64, len(names))
	for _, id := range names {
		if id == "" || len(id) > engine.MaxWeightIDLen {
			p.fail(field, "client ids must be 1 to "+strconv.Itoa(engine.MaxWeightIDLen)+" bytes, got "+strconv.Itoa(len(id)))
			return nil
		}
		v := members[id]
		if k := jsonKind(v); k != "a number" {
			p.fail(field, strconv.Quote(id)+": must be a number, got "+k)
			return nil
		}
		w, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsNaN(w) || w < engine.MinWeight || w > engine.MaxWeight {
			p.fail(field, strconv.Quote(id)+": must be a number in ["+strconv.FormatFloat(engine.MinWeight, 'g', -1, 64)+", "+strconv.Itoa(engine.MaxWeight)+"], got "+string(v))
			return nil
		}
		out[id] = w
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
