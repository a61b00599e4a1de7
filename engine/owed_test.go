package engine

// What the clients are owed of their guarantees under the fair policy, as
// plans change within a window (rules.go, "Guarantees owed").

import (
	"fmt"
	"testing"
	"time"
)

func storedBudget(t *testing.T, l *Limiter, store Store) budget {
	t.Helper()
	raw, _, err := store.Get(l.view.budgetKey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := decodeBudget(raw)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// alternating returns two workers of cfg on store, the first having
// registered ids, and an admit that sends each request to the other worker
// than the last.
func alternating(t *testing.T, cfg Config, store Store, ids ...string) ([]*Limiter, func(at time.Time, id string) Decision) {
	t.Helper()
	workers := []*Limiter{newLimiter(t, cfg, store), newLimiter(t, cfg, store)}
	if err := workers[0].RegisterAt(t0, ids...); err != nil {
		t.Fatal(err)
	}
	n := 0
	return workers, func(at time.Time, id string) Decision {
		n++
		return workers[n%2].AdmitAt(at, id)
	}
}

// askInTurn sends n requests of each id in turn, 2 ms apart, from at.
func askInTurn(admit func(at time.Time, id string) Decision, at time.Time, ids []string, n int) {
	for _, id := range ids {
		for range n {
			at = at.Add(2 * time.Millisecond)
			admit(at, id)
		}
	}
}

// warmFair returns a worker of cfg (a fair policy's), on a store of its own, whose ids have
// each asked n times in the window after t0's: the window the next is
// planned from.
func warmFair(t *testing.T, cfg Config, n int, ids ...string) (*Limiter, Store) {
	t.Helper()
	store := NewMemStore()
	l := newLimiter(t, cfg, store)
	if err := l.RegisterAt(t0, ids...); err != nil {
		t.Fatal(err)
	}
	askInTurn(l.AdmitAt, t0.Add(cfg.Cycle+10*time.Millisecond), ids, n)
	return l, store
}

// A re-plan in the window (a newcomer counted) lowers the guarantees after
// a client took its own: once every client has had its guarantee under
// the re-plan, nothing is owed, and a client refused past its guarantee
// with a unit left is told a moment in the window, not its end.
func TestAReplanMovesWhatIsOwed(t *testing.T) {
	cfg := Defaults(10, 5*time.Second)
	cfg.Policy = Fair{}
	l, store := warmFair(t, cfg, 4, "a", "b", "c")
	var at time.Time
	w := t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	at = w
	ask := func(id string, n int) (got int, last Decision) {
		for i := 0; i < n; i++ {
			at = at.Add(2 * time.Millisecond)
			if last = l.AdmitAt(at, id); last.Allowed {
				got++
			}
		}
		return
	}
	ga, _ := ask("a", 3)
	t.Logf("after a's 3: %+v", storedBudget(t, l, store))
	gd, _ := ask("d", 1) // a newcomer, counted by a re-plan at once
	gb, _ := ask("b", 2)
	gc, _ := ask("c", 2)
	gd2, _ := ask("d", 1)
	v := storedBudget(t, l, store)
	t.Logf("a %d, d %d+%d, b %d, c %d; budget %+v; plan params %v", ga, gd, gd2, gb, gc, v, l.view.plan.params)
	// every client has had its guarantee (2 each under the re-plan); what
	// is still owed is owed to nobody.
	_, db := ask("b", 1)
	t.Logf("b past its guarantee: %+v", db)
	if owed := l.view.owedOf(&v); owed > 0 {
		t.Errorf("owed %d with every client past what it is expected to take (granted %d of %d)", owed, v.granted, v.capacity)
	}
	if !db.Allowed && db.RetryAfter >= db.Reset {
		t.Errorf("b told the window's end with %d of %d units granted", v.granted, v.capacity)
	}
}

// A newcomer counted by a re-plan after the window's first take is owed
// its guarantee all the same: with every other client past its guarantee
// of 2 and one unit left, which the newcomer's guarantee takes, a client
// refused past its own is not told of that unit (or, told of it, finds it).
func TestANewcomerCountedMidWindowIsOwedItsGuarantee(t *testing.T) {
	cfg := Defaults(10, 5*time.Second)
	cfg.Policy = Fair{}
	store := NewMemStore()
	old := []string{"a", "b", "c", "d"}
	workers, admit := alternating(t, cfg, store, old...)
	askInTurn(admit, t0.Add(cfg.Cycle+10*time.Millisecond), old, 3) // the window the next is planned from
	at := t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	for _, id := range old { // guarantees of 2 (10/4, and 10/5 once e is counted)
		for i := 0; i < 2; i++ {
			at = at.Add(2 * time.Millisecond)
			if d := admit(at, id); !d.Allowed {
				t.Fatalf("%s refused its guarantee: %+v", id, d)
			}
		}
	}
	at = at.Add(2 * time.Millisecond)
	if d := admit(at, "e"); !d.Allowed { // a newcomer, counted at once by a re-plan
		t.Fatalf("e's first request: %+v", d)
	}
	t.Logf("after e's first take: %+v, params %v", storedBudget(t, workers[0], store), workers[0].view.plan.params)
	at = at.Add(2 * time.Millisecond)
	da := admit(at, "a")
	t.Logf("a past its guarantee: %+v; budget %+v", da, storedBudget(t, workers[0], store))
	if da.Allowed {
		t.Fatalf("a admitted past its guarantee with one unit left: %+v", da)
	}
	at = at.Add(2 * time.Millisecond)
	if d := admit(at, "e"); !d.Allowed {
		t.Fatalf("e's second unit, within its guarantee of 2: %+v", d)
	}
	if da.RetryAfter < da.Reset {
		if d := admit(at.Add(da.RetryAfter), "a"); !d.Allowed {
			t.Errorf("a, told its unit at %v, was refused then: %+v (budget %+v)", da.RetryAfter, d, storedBudget(t, workers[0], store))
		}
	}
}

// Over a large table a window's roll is provisional: its parameters are
// the plan's before (cur.params), what it expected of the window before
// last. It expects nothing: clients busy then and idle since are not owed,
// and a client refused past its guarantee, with units no one is expected
// to take, is told a moment in the window, not its end.
func TestAProvisionalPlanOwesNothing(t *testing.T) {
	cfg := Defaults(12, 5*time.Second)
	cfg.Policy = Fair{}
	store := NewMemStore()
	l := newLimiter(t, cfg, store)
	l.view.inPlaceMax = 2 // a table of 4 is planned provisionally
	ids := []string{"a", "b", "c", "d"}
	if err := l.RegisterAt(t0, ids...); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(cfg.Cycle + 10*time.Millisecond)
	for w, busy := range [][]string{{"a", "b", "c", "d"}, {"a", "b"}} {
		at = t0.Add(time.Duration(w+1)*cfg.Cycle + 10*time.Millisecond)
		for _, id := range busy {
			for i := 0; i < 4; i++ {
				at = at.Add(2 * time.Millisecond)
				l.AdmitAt(at, id)
			}
		}
		l.TickAt(at.Add(time.Second))
		l.TickAt(at.Add(2 * time.Second))
	}
	at = t0.Add(3*cfg.Cycle + 10*time.Millisecond)
	for _, id := range []string{"a", "b"} {
		for i := 0; i < 3; i++ {
			at = at.Add(2 * time.Millisecond)
			if d := l.AdmitAt(at, id); !d.Allowed {
				t.Fatalf("%s refused its guarantee: %+v", id, d)
			}
		}
	}
	at = at.Add(2 * time.Millisecond)
	d := l.AdmitAt(at, "a")
	v := storedBudget(t, l, store)
	t.Logf("provisional %v, params %v; budget %+v; a: %+v", l.view.plan.provisional, l.view.plan.params, v, d)
	if !d.Allowed && d.RetryAfter >= d.Reset {
		t.Errorf("a told the window's end with %d of %d granted and c, d idle in the window before (owed %d)", v.granted, v.capacity, l.view.owedOf(&v))
	}
}

type fixedHolding struct{ n *int64 }

func (h fixedHolding) heldIn(Store, int64) int64 { return *h.n }

// In fleet mode a window's budget is bounded by what the process holds,
// which grows as leases come in. What is owed is bounded by it where it is
// used, not where it is kept: once the holding grows, the clients that
// have not taken are owed their guarantees again, and no retry told a
// moment finds its unit taken by one of them.
func TestAGrowingHoldingIsOwedAgain(t *testing.T) {
	cfg := Defaults(10, 5*time.Second)
	cfg.Policy = Fair{}
	store := NewMemStore()
	ids := []string{"a", "b", "c"}
	workers, admit := alternating(t, cfg, store, ids...)
	held := int64(10)
	for _, w := range workers {
		w.view.holding = fixedHolding{&held}
	}
	askInTurn(admit, t0.Add(cfg.Cycle+10*time.Millisecond), ids, 4) // the window the next is planned from
	at := t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	held = 4 // the process's lease for the new window is still coming in
	told := map[string]time.Time{}
	for _, id := range ids {
		for i := 0; i < 4; i++ {
			at = at.Add(2 * time.Millisecond)
			d := admit(at, id)
			if i < 3 && !d.Allowed {
				t.Fatalf("%s refused its guarantee: %+v", id, d)
			}
			if i == 3 && !d.Allowed && d.RetryAfter < d.Reset {
				told[id] = at.Add(d.RetryAfter)
			}
		}
		if id == "a" {
			t.Logf("after a: %+v", storedBudget(t, workers[0], store))
			held = 10
		}
		if id == "b" { // a asks again, before c's first take
			at = at.Add(2 * time.Millisecond)
			if d := admit(at, "a"); !d.Allowed && d.RetryAfter < d.Reset {
				told["a"] = at.Add(d.RetryAfter)
			}
		}
	}
	t.Logf("told %v; budget %+v", told, storedBudget(t, workers[0], store))
	for _, id := range ids {
		if when, ok := told[id]; ok {
			if d := admit(when, id); !d.Allowed {
				t.Errorf("%s, told its unit at %v, was refused then: %+v", id, when.Sub(t0), d)
			}
		}
	}
}

// One-shot ids promoted in a window (one per min_cycle) are counted by the
// next window's roll and expected to take what their one request asked for
// (one unit here, the route's cost): ten of them hold back ten units of a
// hundred, and a client refused past its guarantee is still told a moment
// in the window, not its end.
func TestOneShotIDsAreOwedWhatTheyAsked(t *testing.T) {
	cfg := Defaults(100, 10*time.Second)
	cfg.MinCycle = time.Second
	cfg.Policy = Fair{}
	store := NewMemStore()
	l := newLimiter(t, cfg, store)
	real := []string{"a", "b", "c", "d"}
	if err := l.RegisterAt(t0, real...); err != nil {
		t.Fatal(err)
	}
	w1 := t0.Add(cfg.Cycle)
	for s := 0; s < 10; s++ {
		at := w1.Add(time.Duration(s)*time.Second + 10*time.Millisecond)
		for _, id := range real {
			for i := 0; i < 10; i++ {
				l.AdmitAt(at.Add(time.Duration(i)*time.Millisecond), id)
			}
		}
		l.AdmitAt(at.Add(20*time.Millisecond), fmt.Sprintf("spoof-%d", s))
		l.TickAt(at.Add(500 * time.Millisecond))
	}
	w2 := t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	got := 0
	var last Decision
	for i := 0; i < 30; i++ {
		if last = l.AdmitAt(w2.Add(time.Duration(i)*time.Millisecond), "a"); last.Allowed {
			got++
		} else {
			break
		}
	}
	v := storedBudget(t, l, store)
	t.Logf("plan n %d params %v; a got %d then %+v; budget granted %d owed %d of %d", l.view.plan.n, l.view.plan.params, got, last, v.granted, l.view.owedOf(&v), v.capacity)
	if !last.Allowed && last.RetryAfter > last.Reset*9/10 {
		t.Errorf("a, refused past its guarantee with %d of %d units granted, is told %v of %v: %d owed (ten one-shot ids asked for one each)", v.granted, v.capacity, last.RetryAfter, last.Reset, l.view.owedOf(&v))
	}
}

// A client capped below its guarantee (Caps: 10 of a guarantee of 50) is
// expected to take no more than its cap: the other client, refused past
// its guarantee with 40 units free that nobody is owed, is told a moment
// in the window, not its end.
func TestACappedClientIsOwedOnlyToItsCap(t *testing.T) {
	cfg := Defaults(100, 10*time.Second)
	cfg.Policy = Fair{}
	cfg.Caps = map[string]int64{"a": 10}
	store := NewMemStore()
	l := newLimiter(t, cfg, store)
	if err := l.RegisterAt(t0, "a", "b"); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(cfg.Cycle + 10*time.Millisecond)
	for _, id := range []string{"a", "b"} {
		for i := 0; i < 100; i++ {
			at = at.Add(time.Millisecond)
			l.AdmitAt(at, id)
		}
	}
	at = t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	ask := func(id string) Decision {
		at = at.Add(time.Millisecond)
		return l.AdmitAt(at, id)
	}
	ga, gb := 0, 0
	var last Decision
	for i := 0; i < 20; i++ {
		if ask("a").Allowed {
			ga++
		}
	}
	for i := 0; i < 100; i++ {
		if last = ask("b"); !last.Allowed {
			break
		}
		gb++
	}
	v := storedBudget(t, l, store)
	t.Logf("params %v; a got %d (cap 10), b got %d then %+v; granted %d owed %d seen %d: owes %d", l.view.plan.params, ga, gb, last, v.granted, v.owed, v.seen, l.view.owedOf(&v))
	if !last.Allowed && last.RetryAfter >= last.Reset {
		t.Errorf("b told the window's end with %d of %d granted; a at its cap, owed %d", v.granted, v.capacity, l.view.owedOf(&v))
	}
	// b asks again at 70% of the window: the pool has 40 units it may borrow.
	at = t0.Add(2*cfg.Cycle + 7*time.Second)
	d := ask("b")
	l2 := newLimiter(t, cfg, store) // another worker, which did not see b refused
	d2 := l2.AdmitAt(at.Add(time.Millisecond), "b")
	v = storedBudget(t, l, store)
	t.Logf("b at 70%%: this worker %+v; another worker %+v; granted %d owed %d", d, d2, v.granted, l.view.owedOf(&v))
}

// A newcomer promoted by a re-plan on a request of 4 units, and not back
// in that window, is counted by the next window's roll as a one-shot id.
// Its first request in that window proves it, and its gate then expects
// the 4 it asked for; the plan expected the same of it, so its takes leave
// the others' guarantees owed, and a client told a moment finds its unit.
func TestAOneShotIDProvenLaterPaysOffWhatWasExpected(t *testing.T) {
	cfg := Defaults(16, 5*time.Second)
	cfg.Policy = Fair{}
	l, store := warmFair(t, cfg, 8, "a", "b", "c")
	var at time.Time
	at = at.Add(2 * time.Millisecond)
	dx := l.AdmitNAt(at, "x", 4)
	t.Logf("x's first request (4 units): %+v", dx)
	at = t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	ask := func(id string) Decision {
		at = at.Add(2 * time.Millisecond)
		return l.AdmitAt(at, id)
	}
	for i := 0; i < 4; i++ {
		if d := ask("x"); !d.Allowed {
			t.Fatalf("x refused within its guarantee: %+v", d)
		}
	}
	v := storedBudget(t, l, store)
	t.Logf("params %v n %d; after x's 4: granted %d owed %d seen %d: owes %d", l.view.plan.params, l.view.plan.n, v.granted, v.owed, v.seen, l.view.owedOf(&v))
	for i := 0; i < 4; i++ {
		if d := ask("a"); !d.Allowed {
			t.Fatalf("a refused within its guarantee: %+v", d)
		}
	}
	da := ask("a")
	atA := at
	v = storedBudget(t, l, store)
	t.Logf("a past its guarantee: %+v; granted %d owed %d seen %d: owes %d; plan %d params %v", da, v.granted, v.owed, v.seen, l.view.owedOf(&v), l.view.plan.id, l.view.plan.params)
	if da.Allowed {
		t.Fatalf("set-up: a admitted past its guarantee: %+v", da)
	}
	for _, id := range []string{"b", "b", "b", "b", "c", "c", "c", "c"} {
		if d := ask(id); !d.Allowed {
			t.Fatalf("%s refused within its guarantee: %+v", id, d)
		}
	}
	if da.RetryAfter < da.Reset {
		if d := l.AdmitAt(atA.Add(da.RetryAfter), "a"); !d.Allowed {
			t.Errorf("a, told its unit in %v, was refused then: %+v (budget %+v)", da.RetryAfter, d, storedBudget(t, l, store))
		}
	}
}

// A request of 3 units from a client 1 unit short of its guarantee, early
// in the window: the gate lets 1 unit through, the lease falls short of the
// request and the unit goes back to the budget (sync's inHand). It is no
// take of the client's: what is owed does not move, however often the
// request is repeated.
func TestAUnitGivenBackIsNotPaidOff(t *testing.T) {
	cfg := Defaults(12, 5*time.Second)
	cfg.Policy = Fair{}
	l, store := warmFair(t, cfg, 4, "a", "b", "c")
	var at time.Time
	at = t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	for i := 0; i < 3; i++ {
		at = at.Add(2 * time.Millisecond)
		if d := l.AdmitAt(at, "a"); !d.Allowed {
			t.Fatalf("a refused within its guarantee: %+v", d)
		}
	}
	v := storedBudget(t, l, store)
	before := l.view.owedOf(&v)
	at = at.Add(2 * time.Millisecond)
	d := l.AdmitNAt(at, "a", 3)
	v = storedBudget(t, l, store)
	t.Logf("params %v; owed %d before, a's request of 3: %+v; granted %d owed %d seen %d: owes %d", l.view.plan.params, before, d, v.granted, v.owed, v.seen, l.view.owedOf(&v))
	if d.Allowed || v.granted != 3 {
		t.Fatalf("set-up: a's request of 3 with 1 unit of its guarantee left: %+v, %d granted", d, v.granted)
	}
	if l.view.owedOf(&v) != before {
		t.Errorf("a refused, nothing granted, yet owed went from %d to %d (a, b and c still owed 1+4+4)", before, l.view.owedOf(&v))
	}
	// The same request again, a few times, on this worker and another.
	l2 := newLimiter(t, cfg, store)
	for i := 0; i < 4; i++ {
		at = at.Add(2 * time.Millisecond)
		w := l
		if i%2 == 1 {
			w = l2
		}
		d = w.AdmitNAt(at, "a", 3)
	}
	v = storedBudget(t, l, store)
	t.Logf("after 4 more: %+v; granted %d owed %d seen %d: owes %d", d, v.granted, v.owed, v.seen, l.view.owedOf(&v))
	if v.granted == 3 && l.view.owedOf(&v) != before {
		t.Errorf("the request refused four more times, nothing granted, yet owed went from %d to %d", before, l.view.owedOf(&v))
	}
}

// A re-plan that lowers the guarantees (a newcomer counted) after a client
// took its old one owes the clients that have not taken their new ones in
// full. Capacity 14: a takes its guarantee of 4, then newcomer d is counted
// and the guarantees become 3; d takes its 3, leaving 7, of which b and c,
// not asking yet, are owed 3 each. One unit is spare: a and d, refused
// past their guarantees, may not both be booked it.
func TestAShrunkGuaranteeIsOwedInFullToThoseYetToTake(t *testing.T) {
	cfg := Defaults(14, 5*time.Second)
	cfg.Policy = Fair{}
	store := NewMemStore()
	old := []string{"a", "b", "c"}
	workers, admit := alternating(t, cfg, store, old...)
	askInTurn(admit, t0.Add(cfg.Cycle+10*time.Millisecond), old, 5) // the window the next is planned from
	at := t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	take := func(id string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			at = at.Add(2 * time.Millisecond)
			if d := admit(at, id); !d.Allowed {
				t.Fatalf("%s refused its guarantee: %+v (budget %+v)", id, d, storedBudget(t, workers[0], store))
			}
		}
	}
	take("a", 4)
	take("d", 3) // a newcomer, counted at once by a re-plan: guarantees of 14/4
	v := storedBudget(t, workers[0], store)
	if owed, want := workers[0].view.owedOf(&v), int64(3+3); owed != want {
		t.Errorf("after d's guarantee, %d owed, with b and c yet to take 3 each (budget %+v, params %v)", owed, v, workers[0].view.plan.params)
	}
	told := map[string]time.Time{}
	for _, id := range []string{"a", "d"} {
		at = at.Add(2 * time.Millisecond)
		if d := admit(at, id); d.Allowed {
			t.Fatalf("%s admitted past its guarantee: %+v", id, d)
		} else if d.RetryAfter < d.Reset {
			told[id] = at.Add(d.RetryAfter)
		}
	}
	if len(told) > 1 {
		t.Errorf("a and d both told a unit in the window (%v), with one to spare", told)
	}
	take("b", 3)
	take("c", 3)
	for id, when := range told {
		if !when.After(at) {
			t.Fatalf("%s told %v, before b and c took their guarantees (%v)", id, when.Sub(t0), at.Sub(t0))
		}
		if d := admit(when, id); !d.Allowed {
			t.Errorf("%s, told its unit at %v, was refused then: %+v (budget %+v)", id, when.Sub(t0), d, storedBudget(t, workers[0], store))
		}
	}
}
