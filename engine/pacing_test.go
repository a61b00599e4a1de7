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

func TestPaceTakeWithoutBookings(t *testing.T) {
	const I, tol = 10, 30 // a unit every 10 ns, 3 more units of tolerance
	for _, tc := range []struct {
		name           string
		grace          int64
		tat, now, n    int64
		wantM, wantTat int64
	}{
		{"idle: a burst of tolerance/I + 1", 0, 0, 1000, 10, 4, 1040},
		{"one unit when just conforming", 0, 1030, 1000, 5, 1, 1040},
		{"asks less than fits", 0, 0, 1000, 2, 2, 1020},
		{"nothing asked", 0, 0, 1000, 0, 0, 0},
		// With a grace, a unit nobody took is still there for a while.
		{"idle: the burst and the unit kept by the grace", 10, 0, 1000, 10, 5, 1040},
		{"a unit accrued 7 ago, kept", 10, 993, 1000, 10, 4, 1033},
		{"a unit accrued 12 ago: forfeited past the grace", 10, 988, 1000, 10, 5, 1040},
	} {
		st := paceState{tat: tc.tat}
		m, _, _, _ := paceTake(&st, 1, tc.now, tc.n, tc.now, false, paceParam{interval: I, tolerance: tol, grace: tc.grace, hold: 100, horizon: 1 << 40})
		if m != tc.wantM || st.tat != tc.wantTat {
			t.Errorf("%s: paceTake = (%d, tat %d), want (%d, %d)", tc.name, m, st.tat, tc.wantM, tc.wantTat)
		}
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

// Bookings of the pacer (paceTake): a client refused is told the first
// free slot and it is set aside for it; the next is told the slot after;
// each takes its own when it comes; one that asks early cancels its own,
// and is not booked again before its time; one that does not come within
// hold forfeits it.
func TestPaceTakeBookings(t *testing.T) {
	const I, tol, hold = 10, 0, 25
	pp := paceParam{interval: I, tolerance: tol, hold: hold, horizon: 1 << 40}
	st := paceState{tat: 1000}
	take := func(client uint32, now, notBefore int64) (int64, int64, bool) {
		m, at, booked, _ := paceTake(&st, client, now, 1, notBefore, false, pp)
		return m, at, booked
	}
	if m, at, booked := take(1, 995, 995); m != 0 || at != 1000 || !booked {
		t.Fatalf("a refused client: (%d, %d, %v), want booked for the next slot, 1000", m, at, booked)
	}
	if m, at, booked := take(2, 996, 996); m != 0 || at != 1010 || !booked {
		t.Fatalf("the next refused client: (%d, %d, %v), want booked for the slot after, 1010", m, at, booked)
	}
	if m, at, _ := take(3, 1001, 1001); m != 0 || at != 1020 {
		t.Fatalf("a third, after the first slot fits: (%d, %d), want refused and booked at 1020: the first slot is client 1's", m, at)
	}
	if m, _, _ := take(2, 1012, 1012); m != 1 {
		t.Fatalf("client 2 at its time: took %d, want its unit", m)
	}
	if m, _, _ := take(1, 1014, 1014); m != 1 {
		t.Fatalf("client 1, late but within hold: took %d, want its unit", m)
	}
	// Client 3 asks early: its booking is cancelled, and asking again
	// before its time books nothing; its slot is free for the others.
	if m, at, booked := take(3, 1015, 1015); m != 0 || at != 1020 || booked {
		t.Fatalf("client 3 early: (%d, %d, %v), want refused, told 1020, not booked", m, at, booked)
	}
	if m, _, booked := take(3, 1016, 1016); m != 0 || booked {
		t.Fatalf("client 3 early again: (%d, %v), want refused and not booked again", m, booked)
	}
	if m, _, _ := take(4, 1020, 1020); m != 1 {
		t.Fatalf("client 4 at the cancelled slot: took %d, want it", m)
	}
	// Client 5 is booked for its own next unit (notBefore), past the free
	// slots before it, and does not come: past hold, its slot is gone and
	// its booking forgotten.
	if m, at, booked := take(5, 1021, 1060); m != 0 || at != 1060 || !booked {
		t.Fatalf("client 5, not before 1060: (%d, %d, %v), want booked at 1060", m, at, booked)
	}
	if m, _, _ := take(6, 1031, 1031); m != 1 {
		t.Fatalf("client 6 at 1031: took %d, want the free slot before client 5's", m)
	}
	if m, _, _ := take(7, 1200, 1200); m != 1 || len(st.booked) != 0 {
		t.Fatalf("long after: took %d with bookings %+v, want a unit and none left", m, st.booked)
	}
	// At most maxBookings: the next refused client is told the next free
	// slot, unbooked.
	st = paceState{tat: 2000}
	for c := uint32(1); c <= maxBookings; c++ {
		if _, _, booked := take(c, 1990, 1990); !booked {
			t.Fatalf("client %d of %d not booked", c, maxBookings)
		}
	}
	if m, at, booked := take(99, 1990, 1990); m != 0 || booked || at != 2000+maxBookings*I {
		t.Fatalf("one more: (%d, %d, %v), want refused, unbooked, told %d", m, at, booked, 2000+maxBookings*I)
	}
}

// Slots taken and booked stay an interval apart, whoever asks when: the
// pacer's spacing holds with bookings.
func TestPaceTakeKeepsSlotsApart(t *testing.T) {
	const I, tol, grace, hold = 10, 20, 10, 50
	pp := paceParam{interval: I, tolerance: tol, grace: grace, hold: hold, horizon: 1 << 40}
	rng := rand.New(rand.NewPCG(7, 7))
	for run := 0; run < 200; run++ {
		st := paceState{}
		var slots []int64
		now := int64(1000)
		for i := 0; i < 300; i++ {
			now += rng.Int64N(8)
			client := uint32(1 + rng.IntN(12))
			notBefore := now
			if rng.IntN(4) == 0 {
				notBefore += rng.Int64N(60)
			}
			before := st.tat
			var mine []booking
			for _, b := range st.booked {
				if b.client == client && b.n > 0 && now >= b.at && now <= b.at+hold && notBefore <= now {
					mine = append(mine, b)
				}
			}
			m, _, _, _ := paceTake(&st, client, now, 1, notBefore, false, pp)
			if m == 0 {
				continue
			}
			if len(mine) > 0 {
				slots = append(slots, mine[0].slot)
				continue
			}
			if st.tat == before && now-grace <= before {
				t.Fatalf("run %d: took a unit without a booking and without moving tat", run)
			}
			slots = append(slots, st.tat-I) // the slot just taken
			if st.tat-I < max(before, now-grace) {
				t.Fatalf("run %d: took slot %d before the first free one (%d at %d)", run, st.tat-I, before, now)
			}
		}
		sort.Slice(slots, func(i, j int) bool { return slots[i] < slots[j] })
		for i := 1; i < len(slots); i++ {
			if slots[i]-slots[i-1] < I {
				t.Fatalf("run %d: slots %d and %d taken, closer than the interval %d", run, slots[i-1], slots[i], I)
			}
		}
	}
}

// Clients that obey Retry-After but come back as late as a booking waits
// for them: the units booked for them are taken later than they fit, and
// an interval of one cycle's length still admits at most PacedMost.
func TestPacingBoundWithLateBookings(t *testing.T) {
	for _, burst := range []float64{0, 0.25} {
		cfg := Defaults(100, 10*time.Second)
		cfg.MinCycle = time.Second
		cfg.Pace, cfg.Burst = true, burst
		store := NewMemStore()
		ws := []*Limiter{newLimiter(t, cfg, store), newLimiter(t, cfg, store)}
		ids := make([]string, 12)
		next := make([]time.Time, len(ids))
		for i := range ids {
			ids[i] = fmt.Sprintf("late-%d", i)
			next[i] = t0.Add(time.Duration(i) * time.Millisecond)
		}
		if err := ws[0].RegisterAt(t0, ids...); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(5, uint64(burst*100)))
		pp := paceParams(&cfg)
		var admitted []time.Time
		booked := 0
		end := t0.Add(6 * cfg.Cycle)
		for n := 0; ; n++ {
			i := 0
			for j := range next {
				if next[j].Before(next[i]) {
					i = j
				}
			}
			now := next[i]
			if !now.Before(end) {
				break
			}
			for _, l := range ws {
				l.TickAt(now)
			}
			d := ws[n%2].AdmitAt(now, ids[i])
			if d.Allowed {
				admitted = append(admitted, now)
				next[i] = now.Add(time.Millisecond)
				continue
			}
			booked++
			// As late as the booking waits, less a hair.
			next[i] = now.Add(d.RetryAfter + time.Duration(rng.Int64N(pp.hold-int64(time.Millisecond))))
		}
		most := capcheck.SlidingMost(admitted, cfg.Cycle)
		bound := int(PacedMost(&cfg))
		if most > bound {
			t.Errorf("burst %v: %d admitted in one cycle's length, bound %d", burst, most, bound)
		}
		if booked == 0 {
			t.Fatalf("burst %v: nobody was refused: the test shows nothing", burst)
		}
		t.Logf("burst %v: most in a sliding cycle %d (bound %d), %d refusals", burst, most, bound, booked)
	}
}
