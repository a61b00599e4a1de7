package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestWaterLevel(t *testing.T) {
	for _, tc := range []struct {
		capacity float64
		demands  []float64
		want     float64
	}{
		{40, []float64{10, 10, 10, 20}, 10},           // exactly fits at 10: D's 20 is above it
		{40, []float64{0, 10, 10, 10}, 40},            // fits: no level binds
		{100, []float64{10, 20, 30, 50}, 40},          // 10+20+30 leave 40 for D
		{100, []float64{1000, 10, 10, 10, 10}, 60},    // the greedy client gets what the light ones leave
		{100, []float64{60, 60, 20}, 40},              // retries make no difference above the level
		{100, []float64{600, 60, 20}, 40},             // ... however many
		{10, []float64{math.NaN(), -3, 100}, 10},      // junk demand counts as none
		{10, nil, 10},                                 // nobody
		{30, []float64{math.Inf(1), math.Inf(1)}, 15}, // infinite demands share equally
	} {
		if got := weightedLevel(tc.capacity, tc.demands, nil); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("weightedLevel(%v, %v, nil) = %v, want %v", tc.capacity, tc.demands, got, tc.want)
		}
	}
}

func TestFairAllocateIsMaxMin(t *testing.T) {
	for _, tc := range []struct {
		demands []float64
		want    []int64
	}{
		{[]float64{10, 20, 30, 50}, []int64{10, 20, 30, 40}},
		{[]float64{0, 10, 10, 20}, []int64{15, 25, 25, 35}}, // 60 spare, 15 each
		{[]float64{0, 0, 0, 0}, []int64{25, 25, 25, 25}},    // spare spread equally
		{[]float64{1000, 10, 10, 10, 10}, []int64{60, 10, 10, 10, 10}},
	} {
		got := Fair{}.Allocate(nil, 100, tc.demands)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Allocate(100, %v) = %v, want %v", tc.demands, got, tc.want)
		}
	}
}

// TestBorrowGateRoom: the gate's three tiers on a budget of capacity 100,
// and the late level a take leaves.
func TestBorrowGateRoom(t *testing.T) {
	past := func(excess float64, keep int64, elapsed float64) borrowGate {
		return borrowGate{on: true, past: true, excess: excess, weight: 1, keep: keep, elapsed: elapsed}
	}
	for _, tc := range []struct {
		name             string
		gate             borrowGate
		allowed, granted int64
		late             float64 // the late level before the take
		want             int64
		wantLate         float64
	}{
		{"off", borrowGate{}, 30, 90, 0, 30, 0},
		{"own units need no pool", borrowGate{on: true, own: 25, level: 40, elapsed: 0}, 30, 50, 0, 25, 0},
		{"up to the entitlement from the pool", borrowGate{on: true, own: 0, level: 40, elapsed: 0.5}, 30, 40, 0, 10, 0},
		{"a unit is lendable as it starts to accrue", borrowGate{on: true, own: 0, level: 40, elapsed: 0.501}, 30, 40, 0, 11, 0},
		{"the entitlement bounds the pool", borrowGate{on: true, own: 0, level: 3, elapsed: 0.5}, 30, 44, 0, 3, 0},
		{"under its entitlement, no late pool", borrowGate{on: true, own: 0, level: 0, elapsed: 0.5}, 30, 20, 5, 0, 5},
		// The late pool at half the window: ⌈100 × (0.5 − 1/32) / (31/32)⌉ = 49 units accrued.
		{"below the late level, up to it", past(1, 2, 0.5), 30, 45, 3, 2, 3},
		{"at the late level, a raise leaves keep units", past(3, 2, 0.5), 30, 20, 3, 27, 30},
		{"a raise by one unit", past(3, 2, 0.5), 1, 20, 3, 1, 4},
		{"no raise into the units kept", past(3, 2, 0.5), 1, 47, 3, 0, 3},
		{"below the level, the kept units too", past(2, 2, 0.5), 1, 47, 3, 1, 3},
		{"nothing kept for nobody", past(3, 0, 0.5), 1, 48, 3, 1, 4},
		{"no take, no raise", past(5, 2, 0.5), 1, 48, 3, 0, 3},
		{"the level is per weight unit", borrowGate{on: true, past: true, excess: 4, weight: 2, keep: 2, elapsed: 0.5}, 5, 47, 3, 2, 3},
		{"nothing late yet", past(0, 0, 0.02), 30, 0, 5, 0, 5},
		{"the budget bounds everything", borrowGate{on: true, own: 25, level: 40, elapsed: 1}, 3, 97, 0, 3, 0},
		{"everything lendable at the end", past(0, 0, 1), 30, 80, 0, 20, 20},
	} {
		got, late := tc.gate.room(tc.allowed, tc.granted, 100, tc.late)
		if got != tc.want || late != tc.wantLate {
			t.Errorf("%s: room = %d, late level %v; want %d, %v", tc.name, got, late, tc.want, tc.wantLate)
		}
	}
}

// TestFairKeep: a raise of the late level keeps units in the late pool
// for the other clients only when more than one client wanted more than
// the level.
func TestFairKeep(t *testing.T) {
	for _, tc := range []struct {
		demands []float64
		want    int64
	}{
		{[]float64{10, 60, 60}, lateKeep}, // level 45: two above it
		{[]float64{10, 20, 90}, 0},        // level 70: one above it
		{[]float64{10, 20, 30}, 0},        // everything fits
	} {
		pp := Fair{}.params(100, tc.demands, nil, nil)
		if got := (Fair{}).keep(&pp); got != tc.want {
			t.Errorf("demands %v (level %v): keep %d, want %d", tc.demands, pp[fairLevel], got, tc.want)
		}
	}
}

// TestFairExpected: the plan expects each client to take what it asked
// for in the window before, up to its guarantee (capacity / clients, per
// weight, rounded down) and its cap; the same whether the plan is computed
// at once (params) or a step at a time (planMath). A plan within the window
// (a re-plan) owes a client that took what its gate owes it for what it
// had.
func TestFairExpected(t *testing.T) {
	for _, tc := range []struct {
		demands, weights, mosts []float64
		want                    int64
		granted                 []int64 // in the window planned, by a re-plan's clients
		owed                    int64   // what the re-plan owes them
	}{
		{[]float64{4, 4, 4}, nil, nil, 9, []int64{2, 0, 0}, 1 + 3 + 3},       // one took 2 of its 3
		{[]float64{4, 4, 4}, nil, nil, 9, []int64{1, 3, 7}, 2},               // all took: one is owed 2
		{[]float64{9, 9}, []float64{1, 4}, nil, 2 + 8, []int64{0, 1}, 2 + 7}, // weights
		{[]float64{4, 4, 4}, nil, nil, 9, nil, 0},                            // guarantees of 3 (10/3)
		{[]float64{1, 0, 7}, nil, nil, 1 + 0 + 3, nil, 0},                    // a light client, an idle one
		{[]float64{0.2, 2.5, 40}, nil, nil, 1 + 3 + 3, nil, 0},               // what was asked, rounded up
		{[]float64{9, 9}, []float64{1, 4}, nil, 2 + 8, nil, 0},               // weights: guarantees of 2 and 8
		{[]float64{40, 40}, nil, []float64{2, math.Inf(1)}, 2 + 5, nil, 0},   // a cap
	} {
		n := len(tc.demands)
		pp := Fair{}.params(10, tc.demands, tc.weights, tc.mosts)
		if got := (Fair{}).expected(&pp); got != tc.want {
			t.Errorf("demands %v, weights %v, caps %v: expected %d, want %d", tc.demands, tc.weights, tc.mosts, got, tc.want)
		}
		s := &planScratch{demands: tc.demands, weights: tc.weights, mosts: tc.mosts, granted: tc.granted, shown: make([]float64, n), isNew: make([]bool, n), hashes: make([]uint64, n)}
		want := tc.want
		if s.granted == nil {
			s.granted = make([]int64, n)
		} else {
			want = tc.owed
		}
		if s.weights == nil {
			s.weights = make([]float64, n)
			for i := range s.weights {
				s.weights[i] = 1
			}
		}
		if s.mosts == nil {
			s.mosts = make([]float64, n)
			for i := range s.mosts {
				s.mosts[i] = math.Inf(1)
			}
		}
		var m planMath
		m.start(&plan{}, s, Fair{}, 10, 10)
		for !m.step(1) {
		}
		if got := (Fair{}).expected(&m.next.params); got != want {
			t.Errorf("demands %v, weights %v, caps %v, granted %v: a plan a step at a time expects %d, want %d", tc.demands, tc.weights, tc.mosts, tc.granted, got, want)
		}
	}
}

func fairConfig(capacity int64) Config {
	cfg := Defaults(capacity, 10*time.Second)
	cfg.MinCycle = time.Second
	cfg.Policy = Fair{}
	return cfg
}

// evenly sends n requests by client evenly over window w (0-based from
// t0), each at its slot's middle, and returns how many were admitted.
func evenly(l *Limiter, w int, client string, n int, cycle time.Duration) (admitted int) {
	start := t0.Add(time.Duration(w) * cycle)
	for i := 0; i < n; i++ {
		at := start.Add(time.Duration((float64(i) + 0.5) * float64(cycle) / float64(n)))
		if l.AdmitAt(at, client).Allowed {
			admitted++
		}
	}
	return admitted
}

// TestFairGuarantee: a client asking no more than its default share gets
// all of it, even in the window right after it was idle, while a greedy
// client asks for everything from the window's first instant. The seed
// policy sizes the returning client from its idle window and turns it away.
func TestFairGuarantee(t *testing.T) {
	for _, tc := range []struct {
		policy Policy
		want   int // what the light client gets of its 10 in the window after its idle one
	}{
		{Fair{}, 10},
		{Seed{Reservation: 0.1}, 1}, // its reservation: the seed's lag
	} {
		t.Run(tc.policy.Name(), func(t *testing.T) {
			cfg := fairConfig(40)
			cfg.Policy = tc.policy
			l := newLimiter(t, cfg, NewMemStore())
			if err := l.RegisterAt(t0, "light", "b", "c", "greedy"); err != nil {
				t.Fatal(err)
			}
			cycle := cfg.Cycle
			for w := 0; w < 4; w++ {
				l.TickAt(t0.Add(time.Duration(w) * cycle))
				// The greedy client tries everything at the window's start.
				start := t0.Add(time.Duration(w) * cycle)
				send(l, start, "greedy", 100)
				evenly(l, w, "b", 10, cycle)
				evenly(l, w, "c", 10, cycle)
				n := 10
				if w == 2 {
					n = 0 // idle
				}
				got := evenly(l, w, "light", n, cycle)
				if w == 3 && got != tc.want {
					t.Errorf("window after idle: light admitted %d of 10, want %d", got, tc.want)
				}
				if w < 2 && tc.policy.Name() == "fair" && got != 10 {
					t.Errorf("window %d: light admitted %d of 10", w, got)
				}
			}
		})
	}
}

// TestFairBorrowing: what the light clients leave goes to the one that
// wants more, but only as it accrues: at no time has the window granted
// more than its guarantee or the capacity accrued so far, whichever is
// larger; by the window's end the borrower has everything left over.
func TestFairBorrowing(t *testing.T) {
	cfg := fairConfig(100)
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "g", "l1", "l2", "l3"); err != nil {
		t.Fatal(err)
	}
	l.TickAt(t0)
	// The light clients ask 5 each of their 25, all at once early on.
	for _, c := range []string{"l1", "l2", "l3"} {
		if a, _ := send(l, t0.Add(time.Second), c, 5); a != 5 {
			t.Fatalf("%s admitted %d of 5", c, a)
		}
	}
	// g asks 10 every 100 ms through the window.
	granted := int64(15)
	for i := 1; i < 100; i++ {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		a, _ := send(l, at, "g", 10)
		granted += int64(a)
		accruedNow := int64(float64(i) / 100 * float64(cfg.Capacity))
		if limit := max(int64(25)+15, accruedNow+1); granted > limit {
			t.Fatalf("at %v the window had granted %d, more than max(guarantee, accrued) = %d", at.Sub(t0), granted, limit)
		}
	}
	end := t0.Add(cfg.Cycle - time.Microsecond)
	l.TickAt(end)
	for i := 0; i < 100; i++ {
		if l.AdmitAt(end, "g").Allowed {
			granted++
		}
	}
	if granted != cfg.Capacity {
		t.Errorf("the window granted %d, want all %d: capacity nobody used was stranded", granted, cfg.Capacity)
	}
}

// TestFairLevelIsPriority: two borrowers that wanted 60 each beside a
// client at 20: the level is 40, and the one that retries every rejection
// three times does not get more than the one that does not.
func TestFairLevelIsPriority(t *testing.T) {
	cfg := fairConfig(100)
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "retrier", "patient", "small"); err != nil {
		t.Fatal(err)
	}
	cycle := cfg.Cycle
	got := map[string]int{}
	for w := 0; w < 4; w++ {
		start := t0.Add(time.Duration(w) * cycle)
		l.TickAt(start)
		got = map[string]int{}
		for i := 0; i < 60; i++ {
			at := start.Add(time.Duration((float64(i) + 0.5) * float64(cycle) / 60))
			for try := 0; try < 4; try++ {
				if l.AdmitAt(at.Add(time.Duration(try)*time.Millisecond), "retrier").Allowed {
					got["retrier"]++
					break
				}
			}
			if l.AdmitAt(at.Add(time.Microsecond), "patient").Allowed {
				got["patient"]++
			}
			if i%3 == 0 && l.AdmitAt(at.Add(2*time.Microsecond), "small").Allowed {
				got["small"]++
			}
		}
	}
	if got["small"] != 20 {
		t.Errorf("small admitted %d of 20", got["small"])
	}
	if d := got["retrier"] - got["patient"]; d > 2 {
		t.Errorf("retrier %d vs patient %d: retries bought %d units", got["retrier"], got["patient"], d)
	}
}

// TestFairLateLevelSharesTheLatePool: three borrowers wanted 40 each
// beside a client at 10 (level 30); then one of them goes quiet, and what
// it leaves comes through the late pool, past the other two's level. The
// one that asks twice as often gets no more of it than the other: the
// late level shares the late pool max-min, not by who asks first.
func TestFairLateLevelSharesTheLatePool(t *testing.T) {
	cfg := fairConfig(100)
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "fast", "slow", "gone", "small"); err != nil {
		t.Fatal(err)
	}
	cycle := cfg.Cycle
	l.TickAt(t0)
	for _, c := range []string{"fast", "slow", "gone"} {
		evenly(l, 0, c, 40, cycle)
	}
	evenly(l, 0, "small", 10, cycle)
	l.TickAt(t0.Add(cycle))
	got := map[string]int{}
	start := t0.Add(cycle)
	for i := 0; i < 120; i++ {
		at := start.Add(time.Duration((float64(i) + 0.5) * float64(cycle) / 120))
		if l.AdmitAt(at, "fast").Allowed {
			got["fast"]++
		}
		if i%2 == 0 && l.AdmitAt(at.Add(time.Microsecond), "slow").Allowed {
			got["slow"]++
		}
		if i%12 == 0 && l.AdmitAt(at.Add(2*time.Microsecond), "small").Allowed {
			got["small"]++
		}
	}
	if got["small"] != 10 {
		t.Errorf("small admitted %d of 10", got["small"])
	}
	if got["fast"]+got["slow"] < 85 {
		t.Errorf("fast %d + slow %d of the 90 left: the late pool was not lent", got["fast"], got["slow"])
	}
	if d := got["fast"] - got["slow"]; d > 2 {
		t.Errorf("fast %d vs slow %d: asking twice as often bought %d units of the late pool", got["fast"], got["slow"], d)
	}
}

// TestFairPacedLevelIsNotRaced: paced, a client that asks for its level
// at the level's pace (c: 30, the level, above its guarantee of 25) gets
// it all beside two that ask more often (a, d). Their guarantees accrue
// with the pace, and so does what they may borrow against: a client asking
// ahead of its pace does not take the pool the level's pace needs.
func TestFairPacedLevelIsNotRaced(t *testing.T) {
	cfg := fairConfig(100)
	cfg.Pace, cfg.Burst = true, 0.25
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "a", "b", "c", "d"); err != nil {
		t.Fatal(err)
	}
	demand := map[string]int{"a": 50, "b": 10, "c": 30, "d": 40} // level 30
	for w := 0; w < 4; w++ {
		start := t0.Add(time.Duration(w) * cfg.Cycle)
		l.TickAt(start)
		got := map[string]int{}
		for i := 0; i < 200; i++ { // every client's requests in time order
			at := start.Add(time.Duration((float64(i) + 0.5) * float64(cfg.Cycle) / 200))
			for _, c := range []string{"a", "b", "c", "d"} {
				if n := demand[c]; (i*n)/200 != ((i+1)*n)/200 && l.AdmitAt(at, c).Allowed {
					got[c]++
				}
			}
		}
		if w > 0 && (got["c"] != 30 || got["b"] != 10) {
			t.Errorf("window %d: %v, want c 30 and b 10", w, got)
		}
	}
}

// TestFairNewcomerAfterTheRoll: under the fair policy a newcomer arriving
// just after the window's own plan is counted at its first request; the
// next one waits for MinCycle after that re-plan, as under every policy.
func TestFairNewcomerAfterTheRoll(t *testing.T) {
	cfg := fairConfig(100)
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "a", "b"); err != nil {
		t.Fatal(err)
	}
	l.TickAt(t0)
	if d := l.AdmitAt(t0.Add(100*time.Millisecond), "new1"); !d.Allowed {
		t.Errorf("first newcomer after the roll: %+v, want admitted", d)
	}
	if d := l.AdmitAt(t0.Add(200*time.Millisecond), "new2"); d.Reason != ReasonPending {
		t.Errorf("second newcomer within MinCycle of the re-plan: %+v, want pending", d)
	}
}

// TestCapHoldsForEveryPolicy is the property test of both invariants
// (internal/capcheck, through checkOutcomes) for every policy: random clients, costs and times
// on three workers over one store, across several windows with newcomers
// and idle clients, with and without weights and pacing.
func TestCapHoldsForEveryPolicy(t *testing.T) {
	for _, pol := range []Policy{Seed{Reservation: 0.1}, Static{}, Fair{}} {
		for seed := uint64(1); seed <= 12; seed++ {
			t.Run(fmt.Sprintf("%s/%d", pol.Name(), seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 14))
				cfg := Defaults(int64(20+rng.IntN(200)), time.Duration(1+rng.IntN(10))*time.Second)
				cfg.MinCycle = cfg.Cycle / 10
				cfg.Policy = pol
				if seed%2 == 0 {
					cfg.Weights = map[string]float64{"c0": 3, "c1": 0.5}
				}
				if seed%3 == 0 {
					cfg.Pace, cfg.Burst = true, 0.3
				}
				if seed%4 == 1 {
					cfg.MaxShare, cfg.Caps = max(3, cfg.Capacity/4), map[string]int64{"c1": 3, "c2": cfg.Capacity}
				}
				store := NewMemStore()
				workers := []*Limiter{newLimiter(t, cfg, store), newLimiter(t, cfg, store), newLimiter(t, cfg, store)}
				var outs []outcome
				at := t0
				for i := 0; i < 4000; i++ {
					at = at.Add(time.Duration(rng.ExpFloat64() * float64(cfg.Cycle) / 300))
					client := fmt.Sprintf("c%d", rng.IntN(3+int(seed)))
					cost := int64(1 + rng.IntN(3))
					w := workers[rng.IntN(len(workers))]
					if rng.IntN(50) == 0 {
						w.TickAt(at)
						continue
					}
					outs = append(outs, outcome{client: client, at: at, cost: cost, d: w.AdmitNAt(at, client, cost)})
				}
				checkOutcomes(t, cfg, outs)
				checkClientCaps(t, cfg, outs)
			})
		}
	}
}

// checkClientCaps fails t if a client was admitted more units in a window
// than its cap (Config.MaxShare, Config.Caps).
func checkClientCaps(t *testing.T, cfg Config, outs []outcome) {
	t.Helper()
	type key struct {
		window int64
		client string
	}
	got := map[key]int64{}
	for _, o := range outs {
		if !o.d.Allowed || o.d.Reason != ReasonOK {
			continue
		}
		k, _, _ := WindowAt(o.at, cfg.Cycle, cfg.WindowOffset)
		got[key{k, o.client}] += max(o.cost, 1)
		most, ok := cfg.Caps[o.client]
		if !ok {
			most = cfg.MaxShare
		}
		if n := got[key{k, o.client}]; most > 0 && n > most {
			t.Fatalf("window %d: %s admitted %d units, above its cap %d", k, o.client, n, most)
		}
	}
}

// TestFairLeaseIsExact: a fair client's lease is exactly what its request
// asks, within its guarantee too, so the window budget never holds units
// nobody has admitted yet (the borrow gate reads the budget as what has
// been used so far). The static split batches: its budget runs ahead.
func TestFairLeaseIsExact(t *testing.T) {
	for _, tc := range []struct {
		policy   Policy
		runAhead bool // the budget held more than was admitted at some point
	}{
		{Fair{}, false},
		{Static{}, true},
	} {
		t.Run(tc.policy.Name(), func(t *testing.T) {
			cfg := fairConfig(1000)
			cfg.Policy = tc.policy
			store := NewMemStore()
			l := newLimiter(t, cfg, store)
			if err := l.RegisterAt(t0, "light", "b"); err != nil {
				t.Fatal(err)
			}
			l.TickAt(t0)
			var admitted int64
			ahead := false
			// 20 requests, well under the default share of 500.
			for i := 0; i < 20; i++ {
				at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
				if !l.AdmitAt(at, "light").Allowed {
					t.Fatalf("request %d refused under the guarantee", i)
				}
				admitted++
				raw, _, err := store.Get(recordKey(&cfg, "w"))
				if err != nil {
					t.Fatal(err)
				}
				b, err := decodeBudget(raw)
				if err != nil {
					t.Fatal(err)
				}
				ahead = ahead || b.granted > admitted
			}
			if ahead != tc.runAhead {
				t.Errorf("budget ran ahead of admissions: %v, want %v", ahead, tc.runAhead)
			}
		})
	}
}

// Bookings of the window budget (settleBookings, bookUnits): a client the
// borrow gate refuses books its units for when the gate lets one through;
// from then on the others see them as granted (due), and it takes them when
// it comes; one that asks early cancels its own and is not booked again
// before its time; one that does not come within hold loses them.
func TestBudgetBookings(t *testing.T) {
	const hold = 100
	start, end := int64(0), int64(1000)
	gate := borrowGate{on: true, had: 2, lv: 4, guar: 1, burst: 1, elapsed: 0.3}
	v := budget{capacity: 10, granted: 6}
	ask := func(client uint32, t int64) *bookAsk {
		return &bookAsk{client: client, need: 1, t: t, start: start, end: end}
	}
	// Refused at 300: its level reaches 3 units at 0.75 of the window.
	at := bookUnits(&v, ask(1, 300), gate, v.granted, 0, v.capacity)
	if want := gateAt(gate.nextAt(6, 10), 300, start, end); at != want || at <= 300 || len(v.booked) != 1 {
		t.Fatalf("booked at %d (%+v), want %d", at, v.booked, want)
	}
	if r := settleBookings(&v, ask(2, at-1), hold); r.due != 0 || r.claimed != 0 || r.mine {
		t.Fatalf("another client before its time: %+v; want nothing set aside yet", r)
	}
	if r := settleBookings(&v, ask(2, at), hold); r.due != 1 {
		t.Fatalf("another client at its time: due %d, want its unit set aside", r.due)
	}
	if r := settleBookings(&v, ask(1, at+5), hold); r.claimed != 1 || !r.changed || len(v.booked) != 0 {
		t.Fatalf("client 1 at its time: %+v, bookings %+v; want its unit and none left", r, v.booked)
	}
	// Early: cancelled, and not booked again before its time.
	at = bookUnits(&v, ask(1, 300), gate, v.granted, 0, v.capacity)
	again := ask(1, 300)
	again.again = true
	if r := settleBookings(&v, again, hold); r.at != at || r.changed || v.booked[0].n != 1 {
		t.Fatalf("the request that booked, its update retried: %+v, bookings %+v; want its booking kept", r, v.booked)
	}
	if r := settleBookings(&v, ask(1, at-1), hold); r.claimed != 0 || !r.mine || !r.changed || v.booked[0].n != 0 {
		t.Fatalf("client 1 early: %+v, bookings %+v; want its booking cancelled", r, v.booked)
	}
	if r := settleBookings(&v, ask(2, at+1), hold); r.due != 0 || r.claimed != 0 {
		t.Fatalf("a cancelled booking still sets %d aside", r.due)
	}
	if r := settleBookings(&v, ask(1, at+1), hold); r.claimed != 0 {
		t.Fatalf("client 1 took %d units of a cancelled booking", r.claimed)
	}
	// Not coming: past hold, gone.
	v.booked = nil
	at = bookUnits(&v, ask(3, 300), gate, v.granted, 0, v.capacity)
	if r := settleBookings(&v, ask(2, at+hold+1), hold); r.due != 0 || len(v.booked) != 0 {
		t.Fatalf("past hold: due %d, bookings %+v; want none", r.due, v.booked)
	}
	// The budget's last unit booked for one client: no other is booked.
	v.booked = nil
	last := budget{capacity: 10, granted: 9}
	first := bookUnits(&last, ask(5, 300), gate, last.granted, 0, last.capacity)
	r := settleBookings(&last, ask(6, 300), hold)
	if first == 0 || r.ahead != 1 || bookUnits(&last, ask(6, 300), gate, last.granted, r.ahead, last.capacity) != 0 {
		t.Fatalf("one unit left: booked at %d, %d ahead, bookings %+v; want the first client's only", first, r.ahead, last.booked)
	}
	// Not in this window: no booking.
	late := borrowGate{on: true, had: 4, lv: 4, guar: 1, burst: 1, elapsed: 0.3}
	if at := bookUnits(&v, ask(4, 300), late, v.granted, 0, v.capacity); at != 0 || len(v.booked) != 0 {
		t.Fatalf("its level reached for the window: booked at %d", at)
	}
}
