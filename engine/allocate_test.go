package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// The worked example (docs/contract.md, "How shares are computed"):
// capacity 40, four clients, reservation 0.1, so the reservation floor is 1.
func TestAllocateWorkedExample(t *testing.T) {
	tests := []struct {
		name    string
		demands []int64
		want    []int64
	}{
		{"cycle 2 from cycle-1 demand", []int64{2, 15, 10, 10}, []int64{5, 15, 10, 10}},
		{"cycle 3 from cycle-2 demand", []int64{3, 15, 50, 10}, []int64{3, 11, 16, 10}},
		{"cycle 4 from cycle-3 demand", []int64{0, 15, 50, 5}, []int64{1, 12, 22, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertShares(t, Allocate(40, 0.1, tt.demands), tt.want)
		})
	}
}

func TestAllocateRounding(t *testing.T) {
	tests := []struct {
		name     string
		capacity int64
		demands  []int64
		want     []int64
	}{
		// Equal split: leftover units go to the lowest indices.
		{"equal split 40/3", 40, []int64{0, 0, 0}, []int64{14, 13, 13}},
		// Round-to-nearest would give 10/10/10/11 = 41; largest remainder
		// keeps the sum exact.
		{"nearest would overshoot", 40, []int64{0, 0, 0, 11}, []int64{10, 10, 9, 11}},
		{"more clients than capacity", 3, []int64{5, 5, 5, 5, 5}, []int64{1, 1, 1, 0, 0}},
		{"single client takes all", 7, []int64{1}, []int64{7}},
		{"everyone over", 40, []int64{100, 100, 100, 100}, []int64{10, 10, 10, 10}},
		{"no clients", 40, nil, []int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertShares(t, Allocate(tt.capacity, 0.1, tt.demands), tt.want)
		})
	}
}

func TestStaticSplitsEqually(t *testing.T) {
	got := Static{}.Allocate(nil, 40, []float64{0, 100, 3})
	assertShares(t, got, []int64{14, 13, 13})
}

// Properties over random inputs: the sum is exactly capacity, nothing is
// negative, demand at or under the default share is always covered, and an
// idle client keeps at least the floor of its reservation.
func TestAllocateProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 5000; i++ {
		capacity := 1 + rng.Int64N(10000)
		n := 1 + rng.IntN(60)
		res := rng.Float64()
		demands := make([]int64, n)
		for j := range demands {
			switch rng.IntN(4) {
			case 0:
				demands[j] = 0
			case 1:
				demands[j] = rng.Int64N(capacity/int64(n) + 1)
			default:
				demands[j] = rng.Int64N(3 * capacity)
			}
		}
		shares := Allocate(capacity, res, demands)
		var sum int64
		def := float64(capacity) / float64(n)
		for j, s := range shares {
			if s < 0 {
				t.Fatalf("case %d: negative share %d (capacity %d demands %v)", i, s, capacity, demands)
			}
			if float64(demands[j]) <= def && float64(s) < math.Floor(math.Max(float64(demands[j]), def*res)) {
				t.Fatalf("case %d: client %d under its default share got %d < demand %d", i, j, s, demands[j])
			}
			sum += s
		}
		if sum != capacity {
			t.Fatalf("case %d: sum %d != capacity %d (demands %v)", i, sum, capacity, demands)
		}
	}
}

func TestAllocateZeroDemandIsEqualSplit(t *testing.T) {
	for n := 1; n <= 50; n++ {
		shares := Allocate(1000, 0.1, make([]int64, n))
		lo, hi := shares[0], shares[0]
		for _, s := range shares {
			lo, hi = min(lo, s), max(hi, s)
		}
		if hi-lo > 1 {
			t.Fatalf("n=%d: zero demand gave unequal shares %v", n, shares)
		}
	}
}

func TestSeedSurvivesNonFiniteDemand(t *testing.T) {
	got := Seed{Reservation: 0.1}.Allocate(nil, 40, []float64{math.NaN(), math.Inf(1), -5, 10})
	var sum int64
	for _, s := range got {
		if s < 0 {
			t.Fatalf("negative share in %v", got)
		}
		sum += s
	}
	if sum != 40 {
		t.Fatalf("sum %d != 40: %v", sum, got)
	}
}

func FuzzAllocate(f *testing.F) {
	f.Add(int64(40), 0.1, []byte{2, 15, 10, 10})
	f.Add(int64(1), 1.0, []byte{0})
	f.Add(int64(3), 0.0, []byte{255, 255, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, capacity int64, res float64, raw []byte) {
		if capacity < 1 || capacity > MaxCapacity || len(raw) > 512 {
			t.Skip()
		}
		demands := make([]int64, len(raw))
		for i, b := range raw {
			demands[i] = int64(b) * int64(b) * int64(b)
		}
		shares := Allocate(capacity, res, demands)
		var sum int64
		for _, s := range shares {
			if s < 0 {
				t.Fatalf("negative share: %v", shares)
			}
			sum += s
		}
		if len(demands) > 0 && sum != capacity {
			t.Fatalf("sum %d != capacity %d", sum, capacity)
		}
	})
}

func assertShares(t *testing.T, got, want []int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("shares = %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("shares = %v, want %v", got, want)
		}
	}
}

// A policy set by pointer is the policy it points to (the engine's rules
// tell the policies apart by their values), and a nil one the default:
// the same plan, decision for decision, as the value.
func TestAPolicyByPointerPlansAsItsValue(t *testing.T) {
	for _, tc := range []struct {
		name       string
		value, ptr Policy
	}{
		{"seed", Seed{Reservation: 0.3}, &Seed{Reservation: 0.3}},
		{"fair", Fair{}, &Fair{}},
		{"static", Static{}, &Static{}},
		{"nil seed", nil, (*Seed)(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(pol Policy) ([]bool, policyParams) {
				cfg := Defaults(12, 5*time.Second)
				cfg.Policy = pol
				l := newLimiter(t, cfg, NewMemStore())
				if err := l.RegisterAt(t0, "a", "b", "c"); err != nil {
					t.Fatal(err)
				}
				var got []bool
				at := t0.Add(cfg.Cycle)
				for w := 0; w < 3; w++ {
					for i, id := range []string{"a", "a", "a", "b", "a", "a", "c", "a", "a", "a", "b", "a"} {
						got = append(got, l.AdmitAt(at.Add(time.Duration(i+1)*time.Millisecond), id).Allowed)
					}
					at = at.Add(cfg.Cycle)
				}
				return got, l.view.plan.params
			}
			want, wantParams := run(tc.value)
			got, gotParams := run(tc.ptr)
			if fmt.Sprint(got) != fmt.Sprint(want) || gotParams != wantParams {
				t.Errorf("by pointer: admitted %v, params %v; by value: %v, %v", got, gotParams, want, wantParams)
			}
		})
	}
}
