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

// A re-plan in the window (a newcomer counted) lowers the guarantees after
// the window's budget started owing the roll plan's: the clients then pay
// off less than was owed for them, and what is left stays owed all window.
func TestAReplanMovesWhatIsOwed(t *testing.T) {
	cfg := Defaults(10, 5*time.Second)
	cfg.Policy = Fair{}
	store := NewMemStore()
	l := newLimiter(t, cfg, store)
	if err := l.RegisterAt(t0, "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(cfg.Cycle + 10*time.Millisecond)
	for _, id := range []string{"a", "b", "c"} {
		for i := 0; i < 4; i++ {
			at = at.Add(2 * time.Millisecond)
			l.AdmitAt(at, id)
		}
	}
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
	if owed := l.view.owedOf(v.paid); owed > 0 {
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
// the plan's before (cur.params), so a budget opened under it owes what
// that plan expected of the window before last. Clients busy then and idle
// since are owed all window, and a client refused past its guarantee, with
// units no one is expected to take, is told the window's end.
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
		t.Errorf("a told the window's end with %d of %d granted and c, d idle in the window before (owed %d)", v.granted, v.capacity, l.view.owedOf(v.paid))
	}
}

type fixedHolding struct{ n *int64 }

func (h fixedHolding) heldIn(Store, int64) int64 { return *h.n }

// In fleet mode a window's budget is bounded by what the process holds,
// which grows as leases come in. The owed sum is cut to what is held at
// the window's first take and never grows back: the clients that take
// later pay off what was cut, and their guarantees are booked for others.
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
// next window's roll, and owed what they asked for, up to a guarantee,
// though they never come back: a flood whose first requests ask for many
// units has the next window's budget owe nearly all of it to nobody.
func TestOneShotIDsAreNotOwed(t *testing.T) {
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
		l.AdmitNAt(at.Add(20*time.Millisecond), fmt.Sprintf("spoof-%d", s), 50)
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
	t.Logf("plan n %d params %v; a got %d then %+v; budget granted %d owed %d of %d", l.view.plan.n, l.view.plan.params, got, last, v.granted, l.view.owedOf(v.paid), v.capacity)
	if !last.Allowed && last.RetryAfter > last.Reset*9/10 {
		t.Errorf("a, refused past its guarantee with %d of %d units granted, is told %v of %v: %d owed (ten one-shot ids asked for 50 each)", v.granted, v.capacity, last.RetryAfter, last.Reset, l.view.owedOf(v.paid))
	}
}
