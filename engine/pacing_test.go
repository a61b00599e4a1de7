package engine

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/internal/capcheck"
)

func TestPacedAmount(t *testing.T) {
	for _, tc := range []struct {
		share int64
		burst float64
		f     float64
		want  int64
	}{
		{100, 0.2, 0, 20},   // the burst at once
		{100, 0.2, 0.5, 60}, // plus half of the rest
		{100, 0.2, 1, 100},  // all of it by the end
		{100, 0, 0.001, 1},  // rounded up: a unit as soon as it starts to accrue
		{100, 1, 0, 100},    // burst 1: no per-client pacing
		{10, 0.5, -3, 5},    // times outside the window are clamped
		{10, 0.5, 7, 10},
	} {
		if got := pacedAmount(tc.share, tc.burst, tc.f); got != tc.want {
			t.Errorf("pacedAmount(%d, %v, %v) = %d, want %d", tc.share, tc.burst, tc.f, got, tc.want)
		}
	}
}

func TestPaceFit(t *testing.T) {
	const I, tol = 10, 30 // a unit every 10 ns, 3 more units of tolerance
	for _, tc := range []struct {
		name           string
		grace          int64
		tat, now, n    int64
		wantM, wantTat int64
	}{
		{"idle: a burst of tolerance/I + 1", 0, 0, 1000, 10, 4, 1040},
		{"one unit when just conforming", 0, 1030, 1000, 5, 1, 1040},
		{"nothing when too far ahead", 0, 1031, 1000, 5, 0, 1031},
		{"asks less than fits", 0, 0, 1000, 2, 2, 1020},
		{"nothing asked", 0, 0, 1000, 0, 0, 0},
		// With a grace, a unit nobody took is still there for a while.
		{"idle: the burst and the unit kept by the grace", 10, 0, 1000, 10, 5, 1040},
		{"a unit accrued 7 ago, kept", 10, 993, 1000, 10, 4, 1033},
		{"a unit accrued 12 ago: forfeited past the grace", 10, 988, 1000, 10, 5, 1040},
	} {
		m, next := paceFit(tc.tat, tc.now, tc.n, paceParam{interval: I, tolerance: tol, grace: tc.grace})
		if m != tc.wantM || next != tc.wantTat {
			t.Errorf("%s: paceFit = (%d, %d), want (%d, %d)", tc.name, m, next, tc.wantM, tc.wantTat)
		}
	}
	pp := paceParam{interval: I, tolerance: tol}
	if w := paceWait(1045, 1000, 1, pp); w != 15 {
		t.Errorf("paceWait for one unit = %d, want 15", w)
	}
	if w := paceWait(1045, 1000, 3, pp); w != 15+2*I {
		t.Errorf("paceWait for three units = %d, want %d", w, 15+2*I)
	}
}

// TestPacingBoundsSlidingCycle: with pacing, any interval of one cycle's
// length admits at most (1 + burst) × capacity (one more when the pacer's
// grace is in force, see paceParams), for every policy, under
// random traffic that is idle for most of each window and then floods
// across the boundary (the fixed-window edge). Without pacing the same
// traffic gets close to 2 × capacity through.
func TestPacingBoundsSlidingCycle(t *testing.T) {
	run := func(t *testing.T, pol Policy, pace bool, burst float64, seed uint64) (most int, cfg Config) {
		rng := rand.New(rand.NewPCG(seed, 3))
		cfg = Defaults(100, 10*time.Second)
		cfg.MinCycle = time.Second
		cfg.Policy, cfg.Pace, cfg.Burst = pol, pace, burst
		store := NewMemStore()
		ws := []*Limiter{newLimiter(t, cfg, store), newLimiter(t, cfg, store)}
		if err := ws[0].RegisterAt(t0, "a", "b", "c"); err != nil {
			t.Fatal(err)
		}
		var admitted []time.Time
		for w := 0; w < 6; w++ {
			start := t0.Add(time.Duration(w) * cfg.Cycle)
			for _, l := range ws {
				l.TickAt(start)
			}
			// Quiet until the last 10%, then everyone floods into the
			// first 10% of the next window.
			times := make([]time.Time, 600)
			for i := range times {
				times[i] = start.Add(cfg.Cycle*9/10 + time.Duration(rng.Int64N(int64(cfg.Cycle)/5)))
			}
			sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
			for _, at := range times {
				if !at.Before(start.Add(cfg.Cycle)) {
					for _, l := range ws {
						l.TickAt(start.Add(cfg.Cycle)) // the next window is planned on time
					}
				}
				c := string(rune('a' + rng.IntN(3)))
				if ws[rng.IntN(2)].AdmitAt(at, c).Allowed {
					admitted = append(admitted, at)
				}
			}
		}
		return capcheck.SlidingMost(admitted, cfg.Cycle), cfg
	}
	for _, pol := range []Policy{Seed{Reservation: 0.1}, Static{}, Fair{}} {
		for _, burst := range []float64{0, 0.25, 1} {
			t.Run(fmt.Sprintf("%s/burst=%v", pol.Name(), burst), func(t *testing.T) {
				most, cfg := run(t, pol, true, burst, 1)
				bound := int(PacedMost(&cfg))
				if most > bound {
					t.Errorf("paced: %d admitted in one cycle's length, bound %d (PacedMost)", most, bound)
				}
				t.Logf("paced: most in a sliding cycle %d (bound %d)", most, bound)
			})
		}
		t.Run(pol.Name()+"/unpaced", func(t *testing.T) {
			// The fixture is able to show the edge: without pacing it does.
			if most, cfg := run(t, pol, false, 0, 1); most <= int(cfg.Capacity*5/4) {
				t.Errorf("unpaced: only %d in a sliding cycle; the test traffic does not reach the edge", most)
			}
		})
	}
}

// TestPacedClientCannotBurst: a paced client that asks for its whole
// share at the window's start gets burst × share, then one unit per
// accrual, and its Retry-After says when the next unit accrues, not the
// window's end.
func TestPacedClientCannotBurst(t *testing.T) {
	for _, pol := range []Policy{Static{}, Fair{}} {
		t.Run(pol.Name(), func(t *testing.T) {
			cfg := Defaults(100, 10*time.Second)
			cfg.MinCycle = time.Second
			cfg.Policy, cfg.Pace, cfg.Burst = pol, true, 0.2
			l := newLimiter(t, cfg, NewMemStore())
			if err := l.RegisterAt(t0, "a", "b"); err != nil {
				t.Fatal(err)
			}
			l.TickAt(t0)
			var got int
			var last Decision
			for i := 0; i < 50; i++ {
				if d := l.AdmitAt(t0, "a"); d.Allowed {
					got++
				} else {
					last = d
				}
			}
			if got != 10 { // 0.2 × its share of 50
				t.Errorf("admitted %d at once, want burst × share = 10", got)
			}
			if last.RetryAfter <= 0 || last.RetryAfter > time.Second {
				t.Errorf("Retry-After %v: want when the next unit accrues (at most 1 s here), not the window's end", last.RetryAfter)
			}
			// Half a window later, 0.2 + 0.8 × 0.5 of the share has accrued.
			mid := t0.Add(cfg.Cycle / 2)
			for i := 0; i < 50; i++ {
				if l.AdmitAt(mid, "a").Allowed {
					got++
				}
			}
			if got != 30 {
				t.Errorf("by mid-window admitted %d, want 30", got)
			}
		})
	}
}

// A request of several units that does not fit the pacer takes none of
// it: a lone client obeying Retry-After to the nanosecond gets each of its
// retries, and the capacity, whatever its cost. (Were the units that fit
// spent on a refused request, a cost above what the pacer lets through
// between two retries would never be admitted.)
func TestPacedCostObeysRetryAfter(t *testing.T) {
	cases := []struct {
		capacity int64
		burst    float64
		cost     int64
		pol      Policy
	}{
		{30, 0.5, 1, nil}, {30, 0.5, 4, nil}, {30, 0.5, 8, nil},
		// An odd capacity for two units: the paced share refuses before
		// the pacer, and under fair the gate cuts the take to one unit.
		{5, 0.5, 2, nil}, {5, 0.5, 2, Fair{}},
	}
	for _, c := range cases {
		cfg := Defaults(c.capacity, 10*time.Second)
		cfg.Pace, cfg.Burst, cfg.Policy = true, c.burst, c.pol
		t.Run(fmt.Sprintf("%s/capacity=%d/cost=%d", cfg.policy().Name(), c.capacity, c.cost), func(t *testing.T) {
			cost := c.cost
			if cost > PacedAtOnce(&cfg) {
				t.Fatalf("cost %d is more than pacing lets through at once (%d)", cost, PacedAtOnce(&cfg))
			}
			l := newLimiter(t, cfg, NewMemStore())
			if err := l.RegisterAt(t0, "solo"); err != nil {
				t.Fatal(err)
			}
			now := t0.Add(cfg.Cycle)
			end := now.Add(6 * cfg.Cycle)
			var units, retries, refusedRetries int64
			retry := false
			for now.Before(end) {
				d := l.AdmitNAt(now, "solo", cost)
				switch {
				case d.Allowed:
					units += cost
					now = now.Add(time.Millisecond)
				case d.RetryAfter <= 0:
					t.Fatalf("refused at %v without a Retry-After: %+v", now.Sub(t0), d)
				default:
					if retry {
						refusedRetries++
						t.Logf("retry at %v refused: %+v", now.Sub(t0), d)
					}
					now = now.Add(d.RetryAfter)
					retries++
				}
				retry = !d.Allowed
			}
			if refusedRetries > 0 {
				t.Errorf("%d of %d retries made at Retry-After were refused", refusedRetries, retries)
			}
			if want := 6 * (cfg.Capacity / cost) * cost * 9 / 10; units < want {
				t.Errorf("admitted %d units in 6 windows, want at least %d", units, want)
			}
		})
	}
}

// A request the pacer cannot pass whole takes nothing from it, and is told
// when all of its units fit, not when the first one does.
func TestPacerRefusesARequestWhole(t *testing.T) {
	cfg := Defaults(30, 10*time.Second)
	cfg.Pace, cfg.Burst = true, 0.5
	store := NewMemStore()
	l := newLimiter(t, cfg, store)
	pp := paceParams(&cfg)
	now := t0.UnixNano()
	full := appendPace(nil, pace{tat: now + pp.tolerance + int64(100*time.Millisecond)}) // one unit fits in 100 ms
	if err := store.Set(l.view.paceKey, full, 0); err != nil {
		t.Fatal(err)
	}
	m, h := l.view.paced(3, 3, now, 1, 0)
	if m != 0 {
		t.Fatalf("passed %d of a request of 3 units", m)
	}
	if want := now + int64(100*time.Millisecond) + 2*pp.interval; h.paceAt != want {
		t.Errorf("told %v, want %v: when all three units fit", time.Duration(h.paceAt-now), time.Duration(want-now))
	}
	if raw, _, err := store.Get(l.view.paceKey); err != nil || string(raw) != string(full) {
		t.Errorf("the refused request moved the pacer (%v)", err)
	}
	if m, _ := l.view.paced(3, 1, now+int64(100*time.Millisecond), 1, 0); m != 1 {
		t.Errorf("a lease of 3 for a request of 1, when one unit fits: passed %d, want 1", m)
	}
}
