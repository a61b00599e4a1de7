package filter

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"

	"github.com/borrowcycle/borrowcycle/engine"
)

// This file parses the policy, burst, weights, max_share and caps fields
// (docs/contract.md, "The fair policy, pacing and weights" and "Caps"),
// strictly like the others: a wrong type, a null or a value out of range
// is refused with the field's name.

// policies maps the policy field's values to engine policies; the first
// is the default.
var policies = []string{"seed", "fair", "static"}

// policy parses the policy field: nil is seed, the engine's default,
// which carries the reservation.
func (p *fieldParser) policy(field string, raw json.RawMessage) engine.Policy {
	switch p.enum(field, raw, policies[0], policies...) {
	case "fair":
		return engine.Fair{}
	case "static":
		return engine.Static{}
	}
	return nil
}

// policyName is the policy field's value for pol.
func policyName(pol engine.Policy) string {
	switch pol.(type) {
	case engine.Fair:
		return "fair"
	case engine.Static:
		return "static"
	}
	return policies[0]
}

// burst parses the burst field: given, it turns pacing on.
func (p *fieldParser) burst(field string, raw json.RawMessage) (pace bool, burst float64) {
	if raw == nil {
		return false, 0
	}
	return true, p.number(field, raw, 0, 0, 1)
}

// checkCaps refuses caps that the rest of cfg makes meaningless: below the
// cost of one request (the client could never be admitted), or in fleet
// mode, where a cap would hold per Envoy rather than across the fleet.
func checkCaps(cfg *Config, label func(string) string) error {
	ec := &cfg.Engine
	if ec.MaxShare == 0 && len(ec.Caps) == 0 {
		return nil
	}
	field := "max_share"
	if ec.MaxShare == 0 {
		field = "caps"
	}
	if ec.Fleet != nil {
		return fieldError(label(field), "not supported with fleet: a cap would hold per Envoy, not across the fleet")
	}
	cost := strconv.FormatInt(cfg.Cost, 10)
	if ec.MaxShare > 0 && ec.MaxShare < cfg.Cost {
		return fieldError(label("max_share"), "must be at least cost ("+cost+"), got "+strconv.FormatInt(ec.MaxShare, 10))
	}
	ids := make([]string, 0, len(ec.Caps))
	for id := range ec.Caps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if m := ec.Caps[id]; m < cfg.Cost {
			return fieldError(label("caps"), strconv.Quote(id)+": must be at least cost ("+cost+"), got "+strconv.FormatInt(m, 10))
		}
	}
	return nil
}

// checkPacedCost refuses a cost that pacing could never let through: more
// units than it passes at once (engine.PacedAtOnce), from burst and the
// capacity. field names cost.
func checkPacedCost(ec *engine.Config, cost int64, field string) error {
	if !ec.Pace {
		return nil
	}
	if most := engine.PacedAtOnce(ec); cost > most {
		return fieldError(field, "must not exceed the units pacing lets through at once ("+strconv.FormatInt(most, 10)+
			", from burst and capacity), got "+strconv.FormatInt(cost, 10))
	}
	return nil
}

// weights parses an object of client id → weight in [MinWeight,
// MaxWeight] (see perClient).
func (p *fieldParser) weights(field string, raw json.RawMessage) map[string]float64 {
	return perClient(p, field, raw, "a number in ["+strconv.FormatFloat(engine.MinWeight, 'g', -1, 64)+", "+strconv.Itoa(engine.MaxWeight)+"]",
		func(v string) (float64, bool) {
			w, err := strconv.ParseFloat(v, 64)
			return w, err == nil && !math.IsNaN(w) && w >= engine.MinWeight && w <= engine.MaxWeight
		})
}

// caps parses an object of client id → cap, an integer in [1, capacity]
// (see perClient).
func (p *fieldParser) caps(field string, raw json.RawMessage, capacity int64) map[string]int64 {
	return perClient(p, field, raw, "an integer in [1, "+strconv.FormatInt(capacity, 10)+"]",
		func(v string) (int64, bool) {
			m, err := strconv.ParseInt(v, 10, 64)
			return m, err == nil && m >= 1 && m <= capacity
		})
}

// perClient parses an object of client id → number, at most MaxWeights
// entries, ids 1 to MaxWeightIDLen bytes, each value one that parse
// accepts (want says which). Members are read in sorted order, so the
// same bad one is reported every time. nil when absent or empty.
func perClient[T any](p *fieldParser, field string, raw json.RawMessage, want string, parse func(string) (T, bool)) map[string]T {
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
	out := make(map[string]T, len(names))
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
		x, ok := parse(string(v))
		if !ok {
			p.fail(field, strconv.Quote(id)+": must be "+want+", got "+string(v))
			return nil
		}
		out[id] = x
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
