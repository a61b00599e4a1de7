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

func TestParseCaps(t *testing.T) {
	// base's capacity is 100.
	for _, tc := range []struct {
		json     string
		maxShare int64
		caps     map[string]int64
	}{
		{`{` + base + `}`, 0, nil},
		{withField(`"max_share": 10`), 10, nil},
		{withField(`"max_share": 40, "caps": {"free": 1, "paid": 100}`), 40, map[string]int64{"free": 1, "paid": 100}},
		{withField(`"caps": {}`), 0, nil},
	} {
		cfg, err := ParseConfig([]byte(tc.json))
		if err != nil {
			t.Errorf("%s: %v", tc.json, err)
			continue
		}
		if e := cfg.Engine; e.MaxShare != tc.maxShare || len(e.Caps) != len(tc.caps) {
			t.Errorf("%s: max_share %d caps %v", tc.json, e.MaxShare, e.Caps)
		}
		for id, m := range tc.caps {
			if cfg.Engine.Caps[id] != m {
				t.Errorf("%s: cap of %s = %d, want %d", tc.json, id, cfg.Engine.Caps[id], m)
			}
		}
	}
	for _, tc := range []struct{ json, want string }{
		{withField(`"max_share": 0`), `max_share: must be an integer in [1, 100], got 0`},
		{withField(`"max_share": 101`), `max_share: must be an integer in [1, 100], got 101`},
		{withField(`"max_share": 1.5`), `max_share: must be an integer in [1, 100], got 1.5`},
		{withField(`"caps": [1]`), `caps: must be an object, got an array`},
		{withField(`"caps": {"free": 0}`), `caps: "free": must be an integer in [1, 100], got 0`},
		{withField(`"caps": {"free": 2.5}`), `caps: "free": must be an integer in [1, 100], got 2.5`},
		{withField(`"caps": {"b": 1, "a": null}`), `caps: "a": must be a number, got null`},
		{withField(`"caps": {"": 2}`), `caps: client ids must be 1 to 256 bytes, got 0`},
		{withField(`"cost": 5, "max_share": 4`), `max_share: must be at least cost (5), got 4`},
		{withField(`"cost": 5, "caps": {"b": 9, "a": 3}`), `caps: "a": must be at least cost (5), got 3`},
		{`{"limits": [{"name": "a", "capacity": 5, "cycle": "1s", "caps": {"x": 6}}]}`, `limits[0].caps: "x": must be an integer in [1, 5], got 6`},
	} {
		_, err := ParseConfig([]byte(tc.json))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%.80s: error %v, want %q", tc.json, err, tc.want)
		}
	}
}

// TestCapsInherited: a limit takes max_share and caps from the top level
// unless it gives its own.
func TestCapsInherited(t *testing.T) {
	s, err := ParseSettings([]byte(`{"capacity": 10, "cycle": "1s", "max_share": 4, "caps": {"p": 2},
		"limits": [{"name": "a", "match": {"path_prefix": "/a"}}, {"name": "b", "max_share": 6, "caps": {"q": 3}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := s.Limits[0].Engine, s.Limits[1].Engine
	if a.MaxShare != 4 || a.Caps["p"] != 2 || len(a.Caps) != 1 {
		t.Errorf("a: max_share %d caps %v", a.MaxShare, a.Caps)
	}
	if b.MaxShare != 6 || b.Caps["q"] != 3 || len(b.Caps) != 1 {
		t.Errorf("b: max_share %d caps %v", b.MaxShare, b.Caps)
	}
}
