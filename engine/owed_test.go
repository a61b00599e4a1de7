package engine

// What the clients are owed of their guarantees under the fair policy, as
// plans change within a window (rules.go, "Guarantees owed").

import (
	"fmt"
	"math/rand"
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

// guaranteeOf has id ask n times through ask, each admitted.
func guaranteeOf(t *testing.T, ask func(string) Decision, id string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if d := ask(id); !d.Allowed {
			t.Fatalf("%s refused its guarantee: %+v", id, d)
		}
	}
}

// pastGuarantee has id ask once more, at the time now gives after ask: it
// is refused, and told (in told) when to come back if in the window.
func pastGuarantee(t *testing.T, ask func(string) Decision, now func() time.Time, id string, told map[string]time.Time) {
	t.Helper()
	d := ask(id)
	if d.Allowed {
		t.Fatalf("%s admitted past its guarantee: %+v", id, d)
	}
	if d.RetryAfter < d.Reset {
		told[id] = now().Add(d.RetryAfter)
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

// Over a large table (inPlaceMax lowered) a window's roll is provisional,
// with the window before's parameters: guarantees of 4 (16 over a, b, c,
// d). The plan the slices complete no longer counts c and d (idle two
// windows, IdleCycles 1): guarantees of 8. a took its 4 under the
// provisional plan; it asked 10 in the window before, so it is expected to
// take 8 and is still owed 4, and b its 8: nothing is spare. b, refused
// past its guarantee, must not be told a unit a takes first.
func TestAGuaranteeRaisedByTheCompletingPlanIsOwed(t *testing.T) {
	cfg := Defaults(16, 5*time.Second)
	cfg.Policy = Fair{}
	cfg.IdleCycles = 1
	store := NewMemStore()
	l := newLimiter(t, cfg, store)
	l.view.inPlaceMax = 2
	if err := l.RegisterAt(t0, "a", "b", "c", "d"); err != nil {
		t.Fatal(err)
	}
	var at time.Time
	for w, busy := range [][]string{{"a", "b", "c", "d"}, {"a", "b"}} {
		at = t0.Add(time.Duration(w+1)*cfg.Cycle + 10*time.Millisecond)
		for _, id := range busy {
			for i := 0; i < 10; i++ {
				at = at.Add(2 * time.Millisecond)
				l.AdmitAt(at, id)
			}
		}
		for s := 0; s < 20; s++ {
			at = at.Add(10 * time.Millisecond)
			l.TickAt(at)
		}
		t.Logf("window %d: plan %d n %d provisional %v params %v", w+1, l.view.plan.id, l.view.plan.n, l.view.plan.provisional, l.view.plan.params)
	}
	at = t0.Add(3*cfg.Cycle + 10*time.Millisecond)
	ask := func(id string) Decision {
		at = at.Add(2 * time.Millisecond)
		return l.AdmitAt(at, id)
	}
	for i := 0; i < 4; i++ {
		if d := ask("a"); !d.Allowed {
			t.Fatalf("a refused its guarantee: %+v", d)
		}
	}
	t.Logf("a took 4 under plan %d provisional %v params %v", l.view.plan.id, l.view.plan.provisional, l.view.plan.params)
	for s := 0; s < 20 && l.view.plan.provisional; s++ {
		at = at.Add(10 * time.Millisecond)
		l.TickAt(at)
	}
	v := storedBudget(t, l, store)
	t.Logf("completed: plan %d n %d provisional %v params %v; budget %+v owes %d", l.view.plan.id, l.view.plan.n, l.view.plan.provisional, l.view.plan.params, v, l.view.owedOf(&v))
	if l.view.plan.provisional {
		t.Fatal("set-up: the plan was not completed")
	}
	if owed := l.view.owedOf(&v); owed < 12 {
		t.Errorf("a owed 4 more of its guarantee of 8 and b its 8, yet %d owed", owed)
	}
	told := map[string]time.Time{}
	guaranteeOf(t, ask, "b", 8)
	pastGuarantee(t, ask, func() time.Time { return at }, "b", told)
	for i := 0; i < 4; i++ {
		if d := ask("a"); !d.Allowed {
			t.Logf("a refused within its guarantee of 8: %+v", d)
		}
	}
	retryAtTheirMoments(t, l.AdmitAt, told, func() budget { return storedBudget(t, l, store) })
}

// No reload: two one-shot ids counted early in a long window retire
// (oneShotPlans × MinCycle after they came), and the re-plan for a later
// newcomer raises a's and b's guarantees from 12 to 16 after each took its
// 12. They asked for 40 each in the window before: each is expected to
// take its 16 and is still owed 4. The newcomer y, refused past its
// guarantee, is told a unit only if one is left beyond those 8.
func TestGuaranteesRaisedByRetiredOneShotIDsAreOwed(t *testing.T) {
	cfg := Defaults(48, 60*time.Second)
	cfg.MinCycle = time.Second
	cfg.Policy = Fair{}
	l, store := warmFair(t, cfg, 40, "a", "b")
	w := t0.Add(2 * cfg.Cycle)
	at := w.Add(10 * time.Millisecond)
	ask := func(id string) Decision {
		at = at.Add(2 * time.Millisecond)
		return l.AdmitAt(at, id)
	}
	dx1 := ask("x1")
	at = w.Add(1500 * time.Millisecond)
	dx2 := ask("x2")
	t.Logf("x1 %+v x2 %+v; plan n %d params %v", dx1, dx2, l.view.plan.n, l.view.plan.params)
	for _, id := range []string{"a", "b"} {
		for i := 0; i < 12; i++ {
			if d := ask(id); !d.Allowed {
				t.Fatalf("%s refused its guarantee of 12: %+v (params %v)", id, d, l.view.plan.params)
			}
		}
	}
	v := storedBudget(t, l, store)
	t.Logf("after a's and b's 12: budget %+v owes %d", v, l.view.owedOf(&v))
	at = w.Add(25 * time.Second)
	got := 0
	var dy Decision
	for i := 0; i < 40; i++ {
		if dy = ask("y"); !dy.Allowed {
			break
		}
		got++
	}
	v = storedBudget(t, l, store)
	t.Logf("y got %d then %+v; plan n %d params %v; budget %+v owes %d", got, dy, l.view.plan.n, l.view.plan.params, v, l.view.owedOf(&v))
	if dy.Allowed || dy.RetryAfter >= dy.Reset {
		t.Logf("y not told a moment: nothing to check")
		return
	}
	when := at.Add(dy.RetryAfter)
	for _, id := range []string{"a", "b"} {
		for i := 0; i < 4; i++ {
			d := ask(id)
			t.Logf("%s within its raised guarantee: %v", id, d.Allowed)
		}
	}
	if d := l.AdmitAt(when, "y"); !d.Allowed {
		t.Errorf("y, told its unit at %v, was refused then: %+v (budget %+v)", when.Sub(t0), d, storedBudget(t, l, store))
	}
}

// retryAtTheirMoments sends each told client back at its moment and reports the
// ones refused then.
func retryAtTheirMoments(t *testing.T, admit func(time.Time, string) Decision, told map[string]time.Time, budget func() budget) {
	t.Helper()
	for id, when := range told {
		if d := admit(when, id); !d.Allowed {
			t.Errorf("%s, told its unit at %v, was refused then: %+v (budget %+v)", id, when.Sub(t0), d, budget())
		}
	}
}

// A reload mid-window raises a's weight (1 -> 3), and a newcomer's re-plan
// (under the new settings) raises a's guarantee from 5 to 7 after a took
// its 5. a asked 8 in the window before: it is expected to take its 7, and
// is still owed 2. b, c and d, refused past their new guarantees of 2, may
// be booked at most the 2 units nobody is owed.
func TestARaisedGuaranteeOfATakerIsOwed(t *testing.T) {
	cfg := Defaults(15, 5*time.Second)
	cfg.Policy = Fair{}
	l1, store := warmFair(t, cfg, 8, "a", "b", "c")
	at := t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	for i := 0; i < 5; i++ {
		at = at.Add(2 * time.Millisecond)
		if d := l1.AdmitAt(at, "a"); !d.Allowed {
			t.Fatalf("a refused its guarantee of 5: %+v", d)
		}
	}
	cfg2 := cfg
	cfg2.Weights = map[string]float64{"a": 3}
	l2 := newLimiter(t, cfg2, store) // the reload
	ask := func(id string) Decision {
		at = at.Add(2 * time.Millisecond)
		return l2.AdmitAt(at, id)
	}
	for i := 0; i < 2; i++ {
		if d := ask("d"); !d.Allowed { // a newcomer: a re-plan under the new weights
			t.Fatalf("d refused its guarantee: %+v", d)
		}
	}
	t.Logf("plan %d params %v print ok %v", l2.view.plan.id, l2.view.plan.params, l2.view.plan.print == l2.view.sharePrint)
	for _, id := range []string{"b", "b", "c", "c"} {
		if d := ask(id); !d.Allowed {
			t.Fatalf("%s refused its guarantee: %+v", id, d)
		}
	}
	v := storedBudget(t, l2, store)
	t.Logf("budget %+v owes %d", v, l2.view.owedOf(&v))
	told := map[string]time.Time{}
	for _, id := range []string{"b", "c", "d"} {
		if d := ask(id); d.Allowed {
			t.Fatalf("%s admitted past its guarantee: %+v", id, d)
		} else if d.RetryAfter < d.Reset {
			told[id] = at.Add(d.RetryAfter)
		}
	}
	t.Logf("told %v; budget %+v", told, storedBudget(t, l2, store))
	for i := 0; i < 2; i++ {
		if d := ask("a"); !d.Allowed {
			t.Fatalf("a refused within its raised guarantee of 7: %+v", d)
		}
	}
	if len(told) > 2 {
		t.Errorf("%d clients told a unit in the window (%v), with 2 to spare", len(told), told)
	}
	retryAtTheirMoments(t, l2.AdmitAt, told, func() budget { return storedBudget(t, l2, store) })
}

// Over a large table (inPlaceMax lowered) the window's roll is provisional
// and its worker reads the table on its ticks. Newcomer d comes after the
// read passed its bucket: it stays pending in the plan the read completes,
// which does not expect it (x, counted by the window's first re-plan,
// took at once: what it was expected is in seen), yet the worker serves it under that plan (it
// is registered) at its guarantee: it is expected to take what it asked
// for while it waited (1). Capacity 15, guarantees of 5: a and x take
// theirs, b and c asked for 2 in the window before and are expected to
// take 2 each, d 1: nothing is spare. a, refused past its guarantee, must
// not be told a unit that b, c and d take first.
func TestANewcomerPendingAfterTheSlicesIsOwed(t *testing.T) {
	cfg := Defaults(15, 5*time.Second)
	cfg.Policy = Fair{}
	store := NewMemStore()
	l := newLimiter(t, cfg, store)
	l.view.inPlaceMax = 2
	if err := l.RegisterAt(t0, "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	askInTurn(l.AdmitAt, t0.Add(cfg.Cycle+10*time.Millisecond), []string{"a"}, 8)
	askInTurn(l.AdmitAt, t0.Add(cfg.Cycle+100*time.Millisecond), []string{"b", "c"}, 2)
	for s := 0; s < 10; s++ {
		l.TickAt(t0.Add(cfg.Cycle + time.Second + time.Duration(s)*10*time.Millisecond))
	}
	at := t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	ask := func(id string) Decision {
		at = at.Add(2 * time.Millisecond)
		return l.AdmitAt(at, id)
	}
	if d := ask("a"); !d.Allowed {
		t.Fatalf("a's first request: %+v", d)
	}
	t.Logf("roll: plan %d provisional %v n %d", l.view.plan.id, l.view.plan.provisional, l.view.plan.n)
	at = at.Add(5 * time.Millisecond)
	l.TickAt(at)                   // the first slice reads the table
	if d := ask("x"); !d.Allowed { // a newcomer: the window's first re-plan, provisional
		t.Logf("x: %+v", d)
	}
	for i := 0; i < 3; i++ {
		d := ask("d") // within MinCycle of x's re-plan: pending
		t.Logf("d while the plan is read: %v %s (plan %d provisional %v pending %d)", d.Allowed, d.Reason, l.view.plan.id, l.view.plan.provisional, l.view.plan.pending)
	}
	for s := 0; s < 20 && l.view.plan.provisional; s++ {
		at = at.Add(5 * time.Millisecond)
		l.TickAt(at)
	}
	p := &l.view.plan
	t.Logf("completed: plan %d provisional %v n %d pending %d params %v", p.id, p.provisional, p.n, p.pending, p.params)
	if p.provisional || p.pending == 0 {
		t.Fatalf("set-up: d not pending in a completed plan")
	}
	for i := 0; i < 4; i++ {
		if d := ask("x"); !d.Allowed {
			t.Fatalf("x refused its guarantee of 5: %+v", d)
		}
	}
	var da Decision
	for i := 0; i < 20; i++ {
		if da = ask("a"); !da.Allowed {
			break
		}
	}
	v := storedBudget(t, l, store)
	want, detail := gatesOwe(t, l, at)
	t.Logf("a past its guarantee: %+v; budget %+v owes %d; the counted clients owed %d:%s", da, v, l.view.owedOf(&v), want, detail)
	if da.Allowed {
		t.Fatalf("a admitted past its guarantee: %+v", da)
	}
	for _, id := range []string{"d", "b", "b", "c", "c"} {
		if d := ask(id); !d.Allowed {
			t.Logf("%s refused: %+v", id, d)
		}
	}
	if da.RetryAfter < da.Reset {
		when := at.Add(da.RetryAfter)
		if when.Before(at) {
			t.Fatalf("set-up: a told %v, before the others took", when.Sub(t0))
		}
		if d := l.AdmitAt(when, "a"); !d.Allowed {
			t.Errorf("a, told its unit at %v, was refused then: %+v (budget %+v)", when.Sub(t0), d, storedBudget(t, l, store))
		}
	}
}

// a takes 5 of its guarantee of 10, the host refunds the 5 requests, and the
// worker's tick hands the unused lease back to the budget: a has had
// nothing in the window again, and is owed its 10 again, as b and c are
// theirs. Capacity 31: one unit is spare. a and b, refused past their
// guarantees, may not both be booked it.
func TestARefundedTakeIsOwedAgain(t *testing.T) {
	cfg := Defaults(31, 5*time.Second)
	cfg.Policy = Fair{}
	l, store := warmFair(t, cfg, 12, "a", "b", "c")
	at := t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	ask := func(id string) Decision {
		at = at.Add(2 * time.Millisecond)
		return l.AdmitAt(at, id)
	}
	for i := 0; i < 5; i++ {
		if d := ask("a"); !d.Allowed {
			t.Fatalf("a refused its guarantee: %+v", d)
		}
		l.Refund("a", 1)
	}
	for i := 0; i < 2; i++ {
		at = at.Add(10 * time.Millisecond)
		l.TickAt(at)
	}
	v := storedBudget(t, l, store)
	t.Logf("after a's 5 refunded and given back: budget %+v, owes %d, params %v", v, l.view.owedOf(&v), l.view.plan.params)
	if v.granted == 0 && l.view.owedOf(&v) < 30 {
		t.Errorf("nothing granted, a, b and c owed 10 each, yet %d owed", l.view.owedOf(&v))
	}
	told := map[string]time.Time{}
	for _, id := range []string{"a", "b"} {
		guaranteeOf(t, ask, id, 10)
		pastGuarantee(t, ask, func() time.Time { return at }, id, told)
	}
	t.Logf("told %v; budget %+v", told, storedBudget(t, l, store))
	if len(told) > 1 {
		t.Errorf("a and b both told a unit in the window (%v), with one to spare", told)
	}
	guaranteeOf(t, ask, "c", 10)
	retryAtTheirMoments(t, l.AdmitAt, told, func() budget { return storedBudget(t, l, store) })
}

// a asks for its whole guarantee (9 units) at once, three times, each time
// refunded and given back at the worker's tick: each give-back takes back
// what its take moved. A newcomer's re-plan then lowers the guarantees to
// 6; d takes its 6, a and b are owed 6 each, nothing is spare, and d,
// refused past its guarantee, must not be told a unit that a and b take
// first.
func TestRepeatedGiveBacksKeepWhatIsOwed(t *testing.T) {
	cfg := Defaults(18, 5*time.Second)
	cfg.Policy = Fair{}
	l, store := warmFair(t, cfg, 12, "a", "b")
	at := t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	for k := 0; k < 3; k++ {
		at = at.Add(2 * time.Millisecond)
		if d := l.AdmitNAt(at, "a", 9); !d.Allowed {
			t.Fatalf("a's request of its guarantee of 9 refused: %+v", d)
		}
		l.Refund("a", 9)
		for i := 0; i < 2; i++ {
			at = at.Add(10 * time.Millisecond)
			l.TickAt(at)
		}
	}
	v := storedBudget(t, l, store)
	t.Logf("after three refunds: budget %+v owes %d", v, l.view.owedOf(&v))
	ask := func(id string) Decision {
		at = at.Add(2 * time.Millisecond)
		return l.AdmitAt(at, id)
	}
	for i := 0; i < 6; i++ {
		if d := ask("d"); !d.Allowed { // a newcomer: a re-plan, guarantees of 6
			t.Fatalf("d refused its guarantee: %+v", d)
		}
	}
	v = storedBudget(t, l, store)
	t.Logf("after d's 6: params %v; budget %+v owes %d", l.view.plan.params, v, l.view.owedOf(&v))
	if owed := l.view.owedOf(&v); owed < 12 {
		t.Errorf("a and b, yet to take, owed 6 each; %d owed", owed)
	}
	dd := ask("d")
	if dd.Allowed {
		t.Fatalf("d admitted past its guarantee: %+v", dd)
	}
	when := at.Add(dd.RetryAfter)
	for _, id := range []string{"a", "b"} {
		for i := 0; i < 6; i++ {
			if d := ask(id); !d.Allowed {
				t.Fatalf("%s refused its guarantee: %+v", id, d)
			}
		}
	}
	if dd.RetryAfter < dd.Reset {
		if d := l.AdmitAt(when, "d"); !d.Allowed {
			t.Errorf("d, told its unit at %v, was refused then: %+v (budget %+v)", when.Sub(t0), d, storedBudget(t, l, store))
		}
	}
}

// TestAShrunkGuaranteeIsOwedInFullToThoseYetToTake with the requests
// routed: w0 serves a, b and c, w1 serves the newcomer d and re-plans for
// it (guarantees 14/4 = 3). w0 has not read the re-plan (no tick yet): its
// takes through the gates of the plan it holds are stale, and it grants b
// and c under the re-plan. d, refused past its guarantee on w1, is told a
// unit only if b and c, taking theirs on w0, leave it.
func TestAWorkerBehindAReplanMovesNothing(t *testing.T) {
	cfg := Defaults(14, 5*time.Second)
	cfg.Policy = Fair{}
	store := NewMemStore()
	old := []string{"a", "b", "c"}
	workers, admit := alternating(t, cfg, store, old...)
	askInTurn(admit, t0.Add(cfg.Cycle+10*time.Millisecond), old, 5)
	w0, w1 := workers[0], workers[1]
	at := t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	take := func(w *Limiter, id string, n int) int {
		got := 0
		for i := 0; i < n; i++ {
			at = at.Add(2 * time.Millisecond)
			if d := w.AdmitAt(at, id); d.Allowed {
				got++
			}
		}
		return got
	}
	if got := take(w0, "a", 4); got != 4 {
		t.Fatalf("a got %d of its guarantee of 4", got)
	}
	if got := take(w1, "d", 3); got != 3 {
		t.Fatalf("d got %d of its guarantee of 3", got)
	}
	t.Logf("w0 plan %d params %v; w1 plan %d params %v", w0.view.plan.id, w0.view.plan.params, w1.view.plan.id, w1.view.plan.params)
	at = at.Add(2 * time.Millisecond)
	dd := w1.AdmitAt(at, "d")
	if dd.Allowed {
		t.Fatalf("d admitted past its guarantee: %+v", dd)
	}
	t.Logf("d refused: %+v; budget %+v", dd, storedBudget(t, w0, store))
	gb, gc := take(w0, "b", 4), take(w0, "c", 4)
	t.Logf("on w0 (plan %d), b got %d and c %d; budget %+v", w0.view.plan.id, gb, gc, storedBudget(t, w0, store))
	if dd.RetryAfter < dd.Reset {
		when := at.Add(dd.RetryAfter)
		if when.Before(at) {
			t.Fatalf("set-up: d told %v, before b and c took", when.Sub(t0))
		}
		if d := w1.AdmitAt(when, "d"); !d.Allowed {
			t.Errorf("d, told its unit at %v, was refused then: %+v (budget %+v)", when.Sub(t0), d, storedBudget(t, w0, store))
		}
	}
}

// gatesOwe is what the clients counted in w's plan are owed of their
// guarantees, each as its own gate sees it (borrowGate.owes), read from the
// table: the quantity owedOf stands for.
func gatesOwe(t *testing.T, w *Limiter, at time.Time) (sum int64, detail string) {
	t.Helper()
	r := w.view
	p := &r.plan
	var b bucketVal
	for k := 0; k < r.nb; k++ {
		raw, _, err := r.store.Get(r.key(k))
		if err != nil {
			continue
		}
		if decodeBucket(raw, &b) != nil {
			continue
		}
		for _, e := range b.entries {
			if !counted(&e, p, r.cfg) {
				continue
			}
			had, prev := int64(0), demandOf(&e, p, r.cfg)
			if e.window == p.window {
				had, prev = e.granted, e.prev
			}
			g := gateFor(r.pol, p, r.cfg, e.hash, had, prev, at.UnixNano()+p.shift)
			o := g.owes(had)
			sum += o
			detail += fmt.Sprintf(" %x:had %d expects %d reach %d owes %d;", e.hash&0xffff, had, g.expects, g.reach, o)
		}
	}
	return sum, detail
}

type owedOp struct {
	worker int
	id     string
	cost   int64
	tick   bool
	dt     time.Duration
}

// owedTraffic is checkOwed's traffic: what it adds to requests of two
// workers and their ticks.
type owedTraffic struct {
	refunds   bool // a quarter of the admitted requests refunded
	sliced    bool // plans over more than two clients read in slices
	noPending bool // (sliced) no check under a plan with clients pending
	behind    bool // checks on a worker behind the other's plan too
	weights   bool // weights and a cap
	corrupt   bool // the plan overwritten with garbage, now and then
	jumps     bool // the clock stepping back or jumping ahead, now and then
	oneShots  bool // one-shot ids among the clients, and a short MinCycle
	cycle     time.Duration
	seeds     int64
	idle      int
	steps     int
}

// checkOwed sends random traffic (two workers on one store, newcomers,
// costs of 1 to 3, ticks) and checks after each request, on a worker whose
// plan is the stored one, in force and of its own settings, that what the
// budget owes (owedOf, bounded by what is left) is never less than what the
// counted clients' gates owe them (bounded likewise).
func checkOwed(t *testing.T, k owedTraffic) {
	refunds := k.refunds
	checks, replans := 0, 0
	defer func() { t.Logf("%d checks, %d plans past the roll", checks, replans) }()
	ids := []string{"a", "b", "c", "d", "e", "f"}
	seeds := k.seeds
	if seeds == 0 {
		seeds = 400
	}
	for seed := int64(1); seed <= seeds; seed++ {
		rng := rand.New(rand.NewSource(seed))
		cycle := 5 * time.Second
		if k.cycle > 0 {
			cycle = k.cycle
		}
		cfg := Defaults(int64(8+rng.Intn(30)), cycle)
		if k.oneShots {
			cfg.MinCycle = cycle / 50
		}
		cfg.Policy = Fair{}
		store := NewMemStore()
		if k.weights {
			cfg.Weights = map[string]float64{"a": float64(1 + rng.Intn(3)), "d": 0.5 + float64(rng.Intn(3))}
			cfg.Caps = map[string]int64{"b": int64(1 + rng.Intn(int(cfg.Capacity)))}
		}
		if k.idle > 0 {
			cfg.IdleCycles = k.idle
		}
		workers := []*Limiter{newLimiter(t, cfg, store), newLimiter(t, cfg, store)}
		if k.sliced {
			for _, w := range workers {
				w.view.inPlaceMax = 2
			}
		}
		if err := workers[0].RegisterAt(t0, ids[:3]...); err != nil {
			t.Fatal(err)
		}
		askInTurn(workers[0].AdmitAt, t0.Add(cfg.Cycle+10*time.Millisecond), ids[:3], 3+rng.Intn(10))
		at := t0.Add(2*cfg.Cycle + 10*time.Millisecond)
		var ops []owedOp
		failed := false
		for step := 0; step < k.steps && !failed; step++ {
			op := owedOp{worker: rng.Intn(2), id: ids[rng.Intn(len(ids))], cost: 1, dt: time.Duration(rng.Intn(60)) * time.Millisecond}
			if k.oneShots {
				op.dt *= cycle / (5 * time.Second)
				if rng.Intn(15) == 0 {
					op.id = fmt.Sprintf("z%d", step)
				}
			}
			if rng.Intn(8) == 0 {
				op.cost = int64(2 + rng.Intn(2))
			}
			op.tick = rng.Intn(10) == 0 || k.sliced && rng.Intn(3) == 0
			if k.corrupt && rng.Intn(150) == 0 {
				_, cas, err := store.Get(workers[0].view.planKey)
				if err == nil {
					_ = store.Set(workers[0].view.planKey, []byte("garbage"), cas)
				}
			}
			if k.jumps && rng.Intn(200) == 0 {
				if rng.Intn(2) == 0 {
					at = at.Add(-time.Duration(rng.Intn(12000)) * time.Millisecond)
				} else {
					at = at.Add(time.Duration(rng.Intn(12000)) * time.Millisecond)
				}
			}
			ops = append(ops, op)
			at = at.Add(op.dt)
			w := workers[op.worker]
			if op.tick {
				w.TickAt(at)
				continue
			}
			d := w.AdmitNAt(at, op.id, op.cost)
			if refunds && d.Allowed && rng.Intn(4) == 0 {
				w.Refund(op.id, op.cost)
			}
			v := storedBudget(t, w, store)
			p := &w.view.plan
			if v.window != p.window || p.provisional || p.print != w.view.sharePrint {
				continue
			}
			behind := false
			for _, o := range workers {
				if o.view.plan.id > p.id {
					behind = true
				}
			}
			if k.noPending && p.pending > 0 {
				continue
			}
			if behind && !k.behind {
				continue
			}
			checks++
			if p.replan {
				replans++
			}
			left := max(0, v.capacity-v.granted)
			got := min(w.view.owedOf(&v), left)
			want, detail := gatesOwe(t, w, at)
			if want = min(want, left); got < want {
				t.Errorf("seed %d, step %d (%+v → allowed %v): owedOf %d (owed %d seen %d, params %v, plan %d), the counted clients owed %d:%s", seed, step, op, d.Allowed, got, v.owed, v.seen, p.params, p.id, want, detail)
				failed = true
			}
		}
	}
}

func TestOwedNeverBelowWhatTheGatesOwe(t *testing.T) {
	for _, tc := range []struct {
		name    string
		traffic owedTraffic
	}{
		{"requests", owedTraffic{steps: 300, seeds: 200}},
		// One-shot ids in a 20 s window (MinCycle 0.4 s): ids that asked
		// once retire 8 s after they came, and the re-plan that no longer
		// counts them raises the guarantees of clients that took.
		{"one-shot ids", owedTraffic{idle: 1, steps: 900, oneShots: true, seeds: 30, cycle: 20 * time.Second}},
		{"refunds", owedTraffic{refunds: true, steps: 300, seeds: 100}},
		{"refunds, read in slices", owedTraffic{refunds: true, sliced: true, noPending: true, steps: 300, seeds: 100}},
		{"read in slices", owedTraffic{sliced: true, noPending: true, steps: 300, seeds: 100}},
		{"read in slices, with pending", owedTraffic{sliced: true, steps: 300, seeds: 100}},
		{"a worker behind", owedTraffic{behind: true, steps: 300, seeds: 100}},
		{"weights and caps", owedTraffic{weights: true, steps: 300, seeds: 100}},
		{"corrupt plans", owedTraffic{corrupt: true, steps: 300, seeds: 100}},
		{"clock jumps", owedTraffic{jumps: true, steps: 300, seeds: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkOwed(t, tc.traffic) })
	}
}

// Only a lender policy's budget counts what is owed: under seed, a lease
// refunded and given back leaves owed, and the plan it is counted under,
// as they were.
func TestAGiveBackUnderSeedOwesNothing(t *testing.T) {
	cfg := Defaults(24, 5*time.Second)
	store := NewMemStore()
	l := newLimiter(t, cfg, store)
	if err := l.RegisterAt(t0, "a", "b"); err != nil {
		t.Fatal(err)
	}
	at := takeRefunded(t, l, t0.Add(cfg.Cycle+10*time.Millisecond), "a", 3)
	for i := 0; i < 3; i++ {
		at = at.Add(10 * time.Millisecond)
		l.TickAt(at)
	}
	if v := storedBudget(t, l, store); v.returned == 0 || v.owed != 0 || v.owedPlan != 0 {
		t.Errorf("under seed, after a lease given back: budget %+v (want returned > 0, owed and owedPlan 0)", v)
	}
}
