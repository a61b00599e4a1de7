package engine

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestCapsValidate(t *testing.T) {
	big := map[string]int64{}
	for i := 0; i <= MaxWeights; i++ {
		big[time.Duration(i).String()] = 1
	}
	for _, tc := range []struct {
		maxShare int64
		caps     map[string]int64
		field    string // "" for valid
		want     string
	}{
		{0, nil, "", ""},
		{10, map[string]int64{"free": 1, "paid": 10}, "", ""},
		{-1, nil, "max_share", "max_share: must be an integer in [1, capacity=10], got -1"},
		{11, nil, "max_share", "max_share: must be an integer in [1, capacity=10], got 11"},
		{0, map[string]int64{"free": 0}, "caps", `caps: "free": must be an integer in [1, capacity=10], got 0`},
		{0, map[string]int64{"free": 11}, "caps", `caps: "free": must be an integer in [1, capacity=10], got 11`},
		{0, map[string]int64{"": 2}, "caps", "caps: client ids must be 1 to 256 bytes, got 0"},
		{0, map[string]int64{strings.Repeat("a", 257): 2}, "caps", "caps: client ids must be 1 to 256 bytes, got 257"},
		{0, big, "caps", "caps: at most 10000 entries"},
	} {
		cfg := Defaults(10, time.Second)
		cfg.MaxShare, cfg.Caps = tc.maxShare, tc.caps
		err := cfg.Validate()
		var fe *FieldError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("max_share %d, caps %v: %v", tc.maxShare, tc.caps, err)
		case tc.field != "" && (err == nil || !errors.As(err, &fe) || fe.Field != tc.field || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("max_share %d: got %v, want %q...", tc.maxShare, err, tc.want)
		}
	}
}

// capsOf computes every client's real-valued cap the way a plan does:
// demands count up to the caps, then the policy's caps, then the spread.
func capsOf(pol Policy, capacity int64, demands, mosts []float64) []float64 {
	d := make([]float64, len(demands))
	for i := range demands {
		d[i] = math.Min(demands[i], mosts[i])
	}
	pp := pol.params(capacity, d, nil, mosts)
	out := make([]float64, len(d))
	for i := range d {
		out[i] = weightedCap(pol, &pp, d[i], 1, mosts[i])
	}
	if _, lends := pol.(lender); lends {
		return out
	}
	p := plan{spread: spreadCaps(float64(capacity), out, mosts)}
	for i := range out {
		out[i] = spreadCap(&p, out[i], mosts[i])
	}
	return out
}

// TestCapsShareWhatTheyKeep: a cap bounds one client's cap, and what it
// keeps from that client goes to the others, so a partition still sums to
// the capacity unless every client is at its cap.
func TestCapsShareWhatTheyKeep(t *testing.T) {
	inf := math.Inf(1)
	seed := Seed{Reservation: 0.1} // capacity 100, 4 clients: D 25, floor 2.5
	for _, tc := range []struct {
		name    string
		pol     Policy
		demands []float64
		mosts   []float64
		want    []float64
	}{
		{"seed, a capped borrower", seed, []float64{100, 100, 100, 100}, []float64{10, inf, inf, inf}, []float64{10, 30, 30, 30}},
		{"seed, an idle client capped below the reservation", seed, []float64{0, 100, 100, 100}, []float64{1, inf, inf, inf}, []float64{1, 33, 33, 33}},
		{"seed, every client capped", seed, []float64{100, 100, 100, 100}, []float64{10, 10, 10, 10}, []float64{10, 10, 10, 10}},
		{"seed, without caps", seed, []float64{10, 50, 0, 100}, []float64{inf, inf, inf, inf}, nil},
		{"seed, all demand met", seed, []float64{5, 5, 5, 5}, []float64{6, inf, inf, inf}, []float64{6, 94.0 / 3, 94.0 / 3, 94.0 / 3}},
		{"seed, a cap the loans do not reach", seed, []float64{100, 100, 100, 100}, []float64{10, 28, inf, inf}, []float64{10, 25 + 15*3.0/153, 25 + 15*75.0/153, 25 + 15*75.0/153}},
		{"seed, a cap the spread reaches", seed, []float64{5, 5, 5, 5}, []float64{6, 20, inf, inf}, []float64{6, 20, 37, 37}},
		{"static", Static{}, []float64{100, 100, 100, 100}, []float64{10, inf, inf, inf}, []float64{10, 30, 30, 30}},
		{"fair: caps are limits", Fair{}, []float64{100, 100, 100, 100}, []float64{10, inf, inf, inf}, []float64{10, 100, 100, 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := capsOf(tc.pol, 100, tc.demands, tc.mosts)
			want := tc.want
			if want == nil { // no caps: the policy's own caps
				pp := tc.pol.params(100, tc.demands, nil, nil)
				want = make([]float64, len(tc.demands))
				for i, d := range tc.demands {
					want[i] = tc.pol.capOf(&pp, d, inf)
				}
			}
			for i := range got {
				if math.Abs(got[i]-want[i]) > 1e-9 {
					t.Fatalf("caps %v, want %v", got, want)
				}
			}
		})
	}
}

// TestSpreadCapsNeverExceedsCapacity: whatever the caps, the spread never
// makes a partition sum to more than the capacity, and it fills it
// whenever the caps allow.
func TestSpreadCapsNeverExceedsCapacity(t *testing.T) {
	for seed := uint64(1); seed <= 500; seed++ {
		r := seed
		next := func() float64 {
			r = r*6364136223846793005 + 1442695040888963407
			return float64(r>>33) / float64(1<<31)
		}
		n := 1 + int(next()*40)
		capacity := 1 + math.Floor(next()*1000)
		caps, mosts := make([]float64, n), make([]float64, n)
		var sum, room float64
		for i := range caps {
			mosts[i] = math.Inf(1)
			if next() < 0.5 {
				mosts[i] = 1 + math.Floor(next()*capacity)
			}
			caps[i] = math.Min(mosts[i], next()*capacity/float64(n))
			sum += caps[i]
			room += mosts[i]
		}
		if sum > capacity {
			continue // not a partition
		}
		p := plan{spread: spreadCaps(capacity, caps, mosts)}
		var total float64
		for i := range caps {
			total += spreadCap(&p, caps[i], mosts[i])
		}
		if total > capacity*(1+1e-9) {
			t.Fatalf("seed %d: the spread %v makes the caps sum to %v > capacity %v", seed, p.spread, total, capacity)
		}
		if want := math.Min(capacity, room); sum > 0 && total < want*(1-1e-6) {
			t.Fatalf("seed %d: the spread %v fills %v of %v", seed, p.spread, total, want)
		}
	}
}

// TestCappedShares: through the limiter, a capped client gets no more
// than its cap in any window, even with capacity idle, and the others get
// what it leaves, under every policy and with weights.
func TestCappedShares(t *testing.T) {
	for _, pol := range []Policy{Seed{Reservation: 0.1}, Static{}, Fair{}} {
		t.Run(pol.Name(), func(t *testing.T) {
			cfg := fairConfig(50)
			cfg.Policy = pol
			cfg.Weights = map[string]float64{"premium": 3}
			cfg.Caps = map[string]int64{"premium": 20}
			cfg.MaxShare = 17
			l := newLimiter(t, cfg, NewMemStore())
			if err := l.RegisterAt(t0, "premium", "a", "b"); err != nil {
				t.Fatal(err)
			}
			for w := 0; w < 3; w++ {
				got := hammer(l, cfg, w, "premium", "a", "b")
				// Weighted, premium would have 30 of 50: its cap keeps it
				// at 20, a and b (each capped at 17 by max_share) share
				// the other 30. Under fair the pool lends late, so a unit
				// or two may be left at the window's end.
				lo := 30
				if _, lends := pol.(Fair); lends {
					lo = 28
				}
				if got["premium"] != 20 || got["a"] > 17 || got["b"] > 17 || got["a"]+got["b"] < lo {
					t.Errorf("window %d: admitted %v, want premium 20, a and b at most 17 each and %d or more together", w, got, lo)
				}
			}
		})
	}
}

// TestCapHoldsWhenCapacityIdles: a capped client alone gets its cap, not
// the idle capacity, and once it has had it, it is told the window's end.
func TestCapHoldsWhenCapacityIdles(t *testing.T) {
	for _, pol := range []Policy{Seed{Reservation: 0.1}, Static{}, Fair{}} {
		t.Run(pol.Name(), func(t *testing.T) {
			cfg := fairConfig(50)
			cfg.Policy = pol
			cfg.Caps = map[string]int64{"free": 7}
			l := newLimiter(t, cfg, NewMemStore())
			if err := l.RegisterAt(t0, "free"); err != nil {
				t.Fatal(err)
			}
			for w := 0; w < 3; w++ {
				if got := evenly(l, w, "free", 100, cfg.Cycle); got != 7 {
					t.Errorf("window %d: free admitted %d, want its cap 7", w, got)
				}
			}
			start := t0.Add(3 * cfg.Cycle)
			for i := 0; i < 7; i++ {
				if d := l.AdmitAt(start.Add(time.Duration(i+1)*time.Millisecond), "free"); !d.Allowed {
					t.Fatalf("request %d of window 3: %+v", i, d)
				}
			}
			at := start.Add(cfg.Cycle / 2)
			if d := l.AdmitAt(at, "free"); d.Allowed || d.Reason != ReasonOverLimit || d.Limit != 7 || d.RetryAfter != cfg.Cycle/2 {
				t.Errorf("past its cap mid-window: %+v, want over_limit, limit 7, retry after %v (the window's end)", d, cfg.Cycle/2)
			}
		})
	}
}

// TestRefundTakesNothing: a request admitted and then refunded (another
// limit refused it) takes nothing: the client still gets its whole share
// of admissions that pass, and a refunded unit left unused goes back to
// the window's budget at the tick, for another worker's client.
func TestRefundTakesNothing(t *testing.T) {
	cfg := Static{}
	c := Defaults(10, 10*time.Second)
	c.Policy = cfg
	store := NewMemStore()
	w1, w2 := newLimiter(t, c, store), newLimiter(t, c, store)
	if err := w1.RegisterAt(t0, "a", "b"); err != nil {
		t.Fatal(err)
	}
	passed := 0
	at := t0.Add(time.Second)
	for i := 0; i < 40; i++ {
		d := w1.AdmitAt(at, "a")
		switch {
		case d.Allowed && i%2 == 0:
			w1.Refund("a", 1) // refused by another limit
		case d.Allowed:
			passed++
		}
		at = at.Add(time.Millisecond)
	}
	if passed != 5 {
		t.Errorf("a passed %d requests, want its whole share 5 though half its admissions were refunded", passed)
	}
	// One refunded unit left unused on w1 returns to the budget with the
	// lease, at the first tick that finds the lease unused since the last:
	// then b's share of 5 is all on w2.
	w1.AdmitAt(at, "b")
	w1.Refund("b", 1)
	w1.TickAt(at.Add(time.Second / 2))
	w1.TickAt(at.Add(time.Second))
	got := 0
	for i := 0; i < 10; i++ {
		if w2.AdmitAt(at.Add(time.Second+time.Duration(i)*time.Millisecond), "b").Allowed {
			got++
		}
	}
	if got != 5 {
		t.Errorf("b admitted %d on the other worker after its refunded unit was handed back, want 5", got)
	}
}
