package filter

import (
	"strings"
	"testing"

	"github.com/borrowcycle/borrowcycle/engine"
)

func TestParsePolicyFields(t *testing.T) {
	for _, tc := range []struct {
		json    string
		policy  engine.Policy
		pace    bool
		burst   float64
		weights map[string]float64
	}{
		{`{` + base + `}`, nil, false, 0, nil},
		{withField(`"policy": "seed"`), nil, false, 0, nil},
		{withField(`"policy": "fair"`), engine.Fair{}, false, 0, nil},
		{withField(`"policy": "static", "burst": 0`), engine.Static{}, true, 0, nil},
		{withField(`"burst": 0.25`), nil, true, 0.25, nil},
		{withField(`"weights": {"premium": 3, "basic": 0.5}`), nil, false, 0, map[string]float64{"premium": 3, "basic": 0.5}},
		{withField(`"weights": {}`), nil, false, 0, nil},
	} {
		cfg, err := ParseConfig([]byte(tc.json))
		if err != nil {
			t.Errorf("%s: %v", tc.json, err)
			continue
		}
		e := cfg.Engine
		if e.Policy != tc.policy || e.Pace != tc.pace || e.Burst != tc.burst || len(e.Weights) != len(tc.weights) {
			t.Errorf("%s: policy %v pace %v burst %v weights %v", tc.json, e.Policy, e.Pace, e.Burst, e.Weights)
		}
		for id, w := range tc.weights {
			if e.Weights[id] != w {
				t.Errorf("%s: weight of %s = %v, want %v", tc.json, id, e.Weights[id], w)
			}
		}
	}
}

func TestParsePolicyFieldErrors(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{withField(`"policy": "water"`), `policy: must be one of "seed", "fair", "static", got "water"`},
		{withField(`"policy": null`), `policy: must be a string, got null`},
		{withField(`"burst": 1.5`), `burst: must be a number in [0, 1], got 1.5`},
		{withField(`"burst": "0.5"`), `burst: must be a number, got a string`},
		{withField(`"weights": [1]`), `weights: must be an object, got an array`},
		{withField(`"weights": {"premium": 0}`), `weights: "premium": must be a number in [0.001, 1000], got 0`},
		{withField(`"weights": {"premium": -2}`), `weights: "premium": must be a number in [0.001, 1000], got -2`},
		{withField(`"weights": {"premium": 1e-300}`), `weights: "premium": must be a number in [0.001, 1000], got 1e-300`},
		{withField(`"weights": {"premium": "3"}`), `weights: "premium": must be a number, got a string`},
		{withField(`"weights": {"b": 1, "a": null}`), `weights: "a": must be a number, got null`},
		{withField(`"weights": {"": 2}`), `weights: client ids must be 1 to 256 bytes, got 0`},
		{withField(`"weights": {"` + strings.Repeat("x", 257) + `": 2}`), `weights: client ids must be 1 to 256 bytes, got 257`},
		{`{"limits": [{"name": "a", "capacity": 5, "cycle": "1s", "burst": 2}]}`, `limits[0].burst: must be a number in [0, 1], got 2`},
	} {
		_, err := ParseConfig([]byte(tc.json))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%.80s: error %v, want %q", tc.json, err, tc.want)
		}
	}
}

// TestPolicyFieldsInherited: a limit takes policy, burst and weights from
// the top level unless it gives its own.
func TestPolicyFieldsInherited(t *testing.T) {
	s, err := ParseSettings([]byte(`{"capacity": 10, "cycle": "1s", "policy": "fair", "burst": 0.5, "weights": {"p": 2},
		"limits": [{"name": "a", "match": {"path_prefix": "/a"}}, {"name": "b", "policy": "static", "weights": {"q": 4}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := s.Limits[0].Engine, s.Limits[1].Engine
	if a.Policy != (engine.Fair{}) || !a.Pace || a.Burst != 0.5 || a.Weights["p"] != 2 {
		t.Errorf("a: %+v", a)
	}
	if b.Policy != (engine.Static{}) || !b.Pace || b.Weights["q"] != 4 || len(b.Weights) != 1 {
		t.Errorf("b: %+v", b)
	}
}
