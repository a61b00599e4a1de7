package engine

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestWeightedLevel(t *testing.T) {
	for _, tc := range []struct {
		demands, weights []float64
		want             float64
	}{
		{[]float64{100, 100}, []float64{3, 1}, 25}, // 3×25 + 25 = 100
		{[]float64{30, 100}, []float64{3, 1}, 70},  // the heavy one wants only 10 a unit: 30 + 70
		{[]float64{100, 100, 5}, []float64{2, 1, 1}, 95.0 / 3},
		{[]float64{10, 10}, []float64{3, 1}, 100}, // everything fits
		{[]float64{100, 100}, nil, 50},            // nil weights: all 1
	} {
		if got := weightedLevel(100, tc.demands, tc.weights); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("weightedLevel(100, %v, %v) = %v, want %v", tc.demands, tc.weights, got, tc.want)
		}
	}
}

func TestWeightsValidate(t *testing.T) {
	big := map[string]float64{}
	for i := 0; i <= MaxWeights; i++ {
		big[strings.Repeat("x", 1+i%200)+string(rune('a'+i%26))+time.Duration(i).String()] = 1
	}
	for _, tc := range []struct {
		weights map[string]float64
		want    string // "" for valid
	}{
		{nil, ""},
		{map[string]float64{"premium": 3, "basic": 0.5}, ""},
		{map[string]float64{"premium": 0}, `weights: "premium": must be in [0.001, 1000], got 0`},
		{map[string]float64{"premium": -1}, `weights: "premium"`},
		{map[string]float64{"premium": math.NaN()}, `weights: "premium"`},
		{map[string]float64{"premium": 1001}, `weights: "premium"`},
		{map[string]float64{"": 2}, "weights: client ids must be 1 to 256 bytes, got 0"},
		{map[string]float64{strings.Repeat("a", 257): 2}, "weights: client ids must be 1 to 256 bytes, got 257"},
		{big, "weights: at most 10000 entries"},
	} {
		cfg := Defaults(10, time.Second)
		cfg.Weights = tc.weights
		err := cfg.Validate()
		var fe *FieldError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.weights, err)
		case tc.want != "" && (err == nil || !errors.As(err, &fe) || fe.Field != "weights" || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("got %v, want %q...", err, tc.want)
		}
	}
}

// TestWeightedShares: a client of weight 3 beside two of weight 1, all
// wanting more than the capacity, gets 3/5 of it under every policy; under
// the seed, an idle weighted client keeps a weighted reservation.
func TestWeightedShares(t *testing.T) {
	for _, pol := range []Policy{Seed{Reservation: 0.1}, Static{}, Fair{}} {
		t.Run(pol.Name(), func(t *testing.T) {
			cfg := fairConfig(50)
			cfg.Policy = pol
			cfg.Weights = map[string]float64{"premium": 3}
			l := newLimiter(t, cfg, NewMemStore())
			if err := l.RegisterAt(t0, "premium", "a", "b"); err != nil {
				t.Fatal(err)
			}
			for w := 0; w < 3; w++ {
				got := hammer(l, cfg, w, "premium", "a", "b")
				if got["premium"] != 30 || got["a"] != 10 || got["b"] != 10 {
					t.Errorf("window %d: admitted %v, want premium 30, a 10, b 10", w, got)
				}
			}
		})
	}
	t.Run("seed reservation", func(t *testing.T) {
		// Idle premium (weight 3) beside a and b wanting everything: it keeps
		// 3 × 10 × 0.1 = 3, the rest is lent.
		demands := []float64{0, 100, 100}
		weights := []float64{3, 1, 1}
		pol := Seed{Reservation: 0.1}
		pp := pol.params(50, demands, weights, nil)
		if got := weightedCap(pol, &pp, 0, 3, math.Inf(1)); math.Abs(got-3) > 1e-9 {
			t.Errorf("idle premium's cap = %v, want its weighted reservation 3", got)
		}
		if got := weightedCap(pol, &pp, 100, 1, math.Inf(1)); math.Abs(got-23.5) > 1e-9 {
			t.Errorf("a's cap = %v, want 10 + half of the 27 lent = 23.5", got)
		}
	})
}

// Under fair, a weight below 1 lowers the client's guarantee, not its
// limit: alone in the window, a client of weight 0.5 may use it all.
func TestFairLightWeightAloneUsesTheWindow(t *testing.T) {
	cfg := fairConfig(40)
	cfg.Weights = map[string]float64{"light": 0.5}
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "light", "idle"); err != nil {
		t.Fatal(err)
	}
	l.TickAt(t0.Add(cfg.Cycle))
	if got := evenly(l, 1, "light", 80, cfg.Cycle); got <= 20 {
		t.Errorf("light (weight 0.5) alone admitted %d of 80 asked in a window of 40, want more than its weighted half (the idle client's part is lent)", got)
	}
}

// hammer ticks at window w's start (0-based from t0) and sends 200 rounds
// of one request from each client, evenly over the window; it returns how
// many each was admitted.
func hammer(l *Limiter, cfg Config, w int, clients ...string) map[string]int {
	l.TickAt(t0.Add(time.Duration(w) * cfg.Cycle))
	got := map[string]int{}
	for i := 0; i < 200; i++ {
		at := t0.Add(time.Duration(w)*cfg.Cycle + time.Duration((float64(i)+0.5)*float64(cfg.Cycle)/200))
		for _, c := range clients {
			if l.AdmitAt(at, c).Allowed {
				got[c]++
			}
		}
	}
	return got
}
