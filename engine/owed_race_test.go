package engine

// What the clients are owed of their guarantees (rules.go, "Guarantees
// owed") when another worker takes, gives back or re-plans between a
// plan's scan and its coming into force, or a store write fails.

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"
)

// hookedStore runs beforeSet/beforeGet ahead of the store operation: another
// worker's callback between two store operations of this one. A hook
// clears itself to run once.
type hookedStore struct {
	Store
	beforeSet func(key string)
	beforeGet func(key string)
}

func (s *hookedStore) Set(k string, v []byte, cas uint32) error {
	if f := s.beforeSet; f != nil {
		f(k)
	}
	return s.Store.Set(k, v, cas)
}

func (s *hookedStore) Get(k string) ([]byte, uint32, error) {
	if f := s.beforeGet; f != nil {
		f(k)
	}
	return s.Store.Get(k)
}

// checkOwedNow is checkOwed's check on w: what the budget owes (bounded by
// what is left) is at least what the counted clients' gates owe them.
func checkOwedNow(t *testing.T, w *Limiter, store Store, at time.Time) {
	t.Helper()
	v := storedBudget(t, w, store)
	left := max(0, v.capacity-v.granted)
	got := min(w.view.owedOf(&v), left)
	all, detail := gatesOwe(t, w, at)
	want := min(all, left)
	t.Logf("plan %d params %v; budget %+v; owedOf %d, gates %d", w.view.plan.id, w.view.plan.params, v, w.view.owedOf(&v), all)
	if got < want {
		t.Errorf("the budget owes %d, the counted clients' gates %d:%s", got, want, detail)
	}
}

// twoFairWorkers: w0 on the store, w1 through a hook; a, b, x registered,
// a and b asked 8 each in the window before, x nothing (capacity 24:
// guarantees of 8, x expected to take nothing of its own).
func twoFairWorkers(t *testing.T) (w0, w1 *Limiter, hook *hookedStore, mem Store, cfg Config) {
	t.Helper()
	cfg = Defaults(24, 5*time.Second)
	cfg.Policy = Fair{}
	mem = NewMemStore()
	hook = &hookedStore{Store: mem}
	w0, w1 = newLimiter(t, cfg, mem), newLimiter(t, cfg, hook)
	if err := w0.RegisterAt(t0, "a", "b", "x"); err != nil {
		t.Fatal(err)
	}
	askInTurn(w0.AdmitAt, t0.Add(cfg.Cycle+10*time.Millisecond), []string{"a", "b"}, 8)
	return
}

// w1 re-plans for newcomer d (guarantees 24/4 = 6). Between its scan,
// which read x's bucket with nothing had, and its publish, w0 (still under
// the roll) grants x 3 units. x asked nothing in the window before: its gate
// owes it twice what it has had, up to its guarantee: 3 more. The plan
// found x owed nothing, and x's take moved owed before the plan came into
// force (base): x's 3 are owed by nobody.
func TestATakeBetweenTheScanAndThePlanIsOwed(t *testing.T) {
	w0, w1, hook, mem, cfg := twoFairWorkers(t)
	at := t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	if d := w0.AdmitAt(at, "a"); !d.Allowed { // the roll
		t.Fatalf("a: %+v", d)
	}
	w1.TickAt(at)
	at = at.Add(2 * time.Millisecond)
	hook.beforeSet = func(k string) {
		if k != w1.view.planKey {
			return
		}
		hook.beforeSet = nil
		for i := 0; i < 3; i++ {
			if d := w0.AdmitAt(at, "x"); !d.Allowed {
				t.Errorf("x refused within its guarantee: %+v", d)
			}
		}
	}
	if d := w1.AdmitAt(at, "d"); !d.Allowed {
		t.Fatalf("d: %+v", d)
	}
	if hook.beforeSet != nil {
		t.Fatal("set-up: no re-plan")
	}
	checkOwedNow(t, w1, mem, at)
}

// takeRefunded has id take n units on w, 2 ms apart from at, each
// admitted, then refunds them all; it returns the time of the last.
func takeRefunded(t *testing.T, w *Limiter, at time.Time, id string, n int) time.Time {
	t.Helper()
	for i := 0; i < n; i++ {
		at = at.Add(2 * time.Millisecond)
		if d := w.AdmitAt(at, id); !d.Allowed {
			t.Fatalf("%s refused its guarantee: %+v", id, d)
		}
	}
	w.Refund(id, int64(n))
	return at
}

// refundOnW0 has a take 3 units on w0, refunded by the host and kept in
// w0's lease over one tick (a asked since the last), w1 ticked, and returns
// the time to go on from.
func refundOnW0(t *testing.T, w0, w1 *Limiter, cfg Config) time.Time {
	t.Helper()
	at := takeRefunded(t, w0, t0.Add(2*cfg.Cycle+10*time.Millisecond), "a", 3)
	w0.TickAt(at.Add(time.Millisecond)) // (a used since the last tick: kept)
	w1.TickAt(at)
	return at.Add(5 * time.Millisecond)
}

// The same, with a give-back: a took 3 of its guarantee on w0 and the host
// refunded them; w0's tick hands the lease back between w1's scan (a had
// 3) and w1's publish. a has had nothing then, and is owed its 6 again.
func TestAGiveBackBetweenTheScanAndThePlanIsOwed(t *testing.T) {
	w0, w1, hook, mem, cfg := twoFairWorkers(t)
	at := refundOnW0(t, w0, w1, cfg)
	hook.beforeSet = func(k string) {
		if k != w1.view.planKey {
			return
		}
		hook.beforeSet = nil
		w0.TickAt(at) // a's lease goes back
	}
	if d := w1.AdmitAt(at, "d"); !d.Allowed {
		t.Fatalf("d: %+v", d)
	}
	if hook.beforeSet != nil {
		t.Fatal("set-up: no re-plan")
	}
	if v := storedBudget(t, w1, mem); v.granted != 1 {
		t.Fatalf("set-up: a's lease not given back (granted %d)", v.granted)
	}
	checkOwedNow(t, w1, mem, at)
}

// A give-back through a stale gate: w0's tick reads the plan (the roll),
// and as it reads a's bucket to hand a's refunded lease back, w1 re-plans
// for d (its scan reads a with 3 had, and the plan comes into force). The
// give-back comes from a worker behind the plan in force: a has had
// nothing and is owed its 6, and the budget must owe it so, not the 3 the
// re-plan found.
func TestAGiveBackFromAWorkerBehindIsOwed(t *testing.T) {
	w0, w1, _, mem, cfg := twoFairWorkers(t)
	hook := &hookedStore{Store: mem}
	w0.view.store = hook
	at := refundOnW0(t, w0, w1, cfg)
	hook.beforeGet = func(k string) {
		if !strings.Contains(k, "/c/") {
			return
		}
		hook.beforeGet = nil
		if d := w1.AdmitAt(at, "d"); !d.Allowed {
			t.Fatalf("d: %+v", d)
		}
	}
	before := w0.view.plan.id
	w0.TickAt(at) // a's lease goes back
	if hook.beforeGet != nil || w0.view.plan.id != before || w1.view.plan.id == before {
		t.Fatalf("set-up: w0 plan %d (was %d), w1 plan %d", w0.view.plan.id, before, w1.view.plan.id)
	}
	if v := storedBudget(t, w1, mem); v.granted != 1 {
		t.Fatalf("set-up: a's lease not given back (granted %d)", v.granted)
	}
	for i := 0; i < 5; i++ { // d takes the rest of its guarantee of 6
		at = at.Add(2 * time.Millisecond)
		if d := w1.AdmitAt(at, "d"); !d.Allowed {
			t.Fatalf("d refused its guarantee: %+v", d)
		}
	}
	checkOwedNow(t, w1, mem, at)
}

// A worker behind one re-plan (w0, under the window's roll) serves a, well
// within its guarantee: its take is stale (the budget counts what is owed
// under w1's re-plan for d), it reads the plan again and retries once.
// Between that read and the retry's take w1 re-plans again, for e
// (MinCycle after the first): that take is stale too, and the worker reads
// the plan and takes again. With one retry only, a was refused over_limit
// (the client marked unusable under the plan) and told the window's end.
func TestTwoReplansDuringOneRequestRefuseNobodyInItsGuarantee(t *testing.T) {
	cfg := Defaults(24, 5*time.Second)
	cfg.Policy = Fair{}
	mem := NewMemStore()
	hook := &hookedStore{Store: mem}
	w0, w1 := newLimiter(t, cfg, hook), newLimiter(t, cfg, mem)
	if err := w0.RegisterAt(t0, "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	askInTurn(w0.AdmitAt, t0.Add(cfg.Cycle+10*time.Millisecond), []string{"a", "b", "c"}, 8)
	at := t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	if d := w0.AdmitAt(at, "a"); !d.Allowed { // the roll
		t.Fatalf("a: %+v", d)
	}
	w1.TickAt(at)
	if d := w1.AdmitAt(at.Add(2*time.Millisecond), "d"); !d.Allowed { // the window's first re-plan
		t.Fatalf("d: %+v", d)
	}
	at = at.Add(cfg.MinCycle + 10*time.Millisecond)
	gets := 0
	hook.beforeGet = func(k string) {
		if k != w0.view.budgetKey {
			return
		}
		if gets++; gets == 2 {
			hook.beforeGet = nil
			if d := w1.AdmitAt(at, "e"); !d.Allowed {
				t.Logf("e: %+v", d)
			}
		}
	}
	plans := w1.view.plan.id
	d := w0.AdmitAt(at, "a")
	t.Logf("a on w0: %+v (w0 plan %d, w1 plans %d then %d)", d, w0.view.plan.id, plans, w1.view.plan.id)
	if !d.Allowed { // (before the stale check: admitted at once, the hook never runs)
		t.Errorf("a refused with 1 of its guarantee of 6 had: %+v", d)
	}
}

// failingBuckets fails bucket writes while on.
type failingBuckets struct {
	Store
	on bool
}

func (s *failingBuckets) Set(k string, v []byte, cas uint32) error {
	if s.on && strings.Contains(k, "/c/") {
		return errors.New("injected")
	}
	return s.Store.Set(k, v, cas)
}

// a's requests take a unit from the budget (through its gate: what it is
// owed moves), but the write of a's entry fails: the unit goes back to the
// budget (sync's inHand), and a has had nothing. Three
// such requests: a is still owed its 8, as b and c theirs; nothing is
// spare of 24.
func TestAFailedEntryWriteIsOwedAgain(t *testing.T) {
	cfg := Defaults(24, 5*time.Second)
	cfg.Policy = Fair{}
	mem := NewMemStore()
	store := &failingBuckets{Store: mem}
	l := newLimiter(t, cfg, store)
	ids := []string{"a", "b", "c"}
	if err := l.RegisterAt(t0, ids...); err != nil {
		t.Fatal(err)
	}
	askInTurn(l.AdmitAt, t0.Add(cfg.Cycle+10*time.Millisecond), ids, 8)
	at := t0.Add(2*cfg.Cycle + 10*time.Millisecond)
	if d := l.AdmitAt(at, "b"); !d.Allowed { // the roll
		t.Fatalf("b: %+v", d)
	}
	store.on = true
	for i := 0; i < 3; i++ {
		at = at.Add(2 * time.Millisecond)
		d := l.AdmitAt(at, "a")
		t.Logf("a with its entry's write failing: %v %s", d.Allowed, d.Reason)
	}
	store.on = false
	v := storedBudget(t, l, mem)
	if v.granted != 1 {
		t.Fatalf("set-up: granted %d", v.granted)
	}
	checkOwedNow(t, l, mem, at)
}

// Over a large table (inPlaceMax lowered) the window's roll is provisional
// and the worker reads the table in slices on its ticks. a takes 3 of its
// guarantee of 8, the host refunds them, and the worker's next tick hands
// the lease back: after the slice read a's bucket (had 3), before the plan
// the slices complete comes into force. a has had nothing then and is
// owed its 8 again; what the budget owes, under the completed plan, must
// not fall below what the counted clients' gates owe them.
func TestAGiveBackWhileTheSlicesReadIsOwed(t *testing.T) {
	cfg := Defaults(24, 5*time.Second)
	cfg.Policy = Fair{}
	store := NewMemStore()
	l := newLimiter(t, cfg, store)
	l.view.inPlaceMax = 2
	ids := []string{"a", "b", "c"}
	if err := l.RegisterAt(t0, ids...); err != nil {
		t.Fatal(err)
	}
	askInTurn(l.AdmitAt, t0.Add(cfg.Cycle+10*time.Millisecond), ids, 8)
	for s := 0; s < 20; s++ {
		l.TickAt(t0.Add(cfg.Cycle + time.Second + time.Duration(s)*10*time.Millisecond))
	}
	at := takeRefunded(t, l, t0.Add(2*cfg.Cycle+10*time.Millisecond), "a", 3)
	if !l.view.plan.provisional {
		t.Fatalf("set-up: the roll is not provisional")
	}
	for s := 0; s < 40 && l.view.plan.provisional; s++ {
		at = at.Add(10 * time.Millisecond)
		l.TickAt(at)
		v := storedBudget(t, l, store)
		t.Logf("tick %d: plan %d provisional %v, slices at bucket %d of %d; budget granted %d owed %d seen %d", s, l.view.plan.id, l.view.plan.provisional, l.view.sliced.bucket, l.view.nb, v.granted, v.owed, v.seen)
	}
	if l.view.plan.provisional {
		t.Fatal("set-up: the slices did not complete the plan")
	}
	checkOwedNow(t, l, store, at)
	// Nothing is spare (a, b and c owed 8 each of 24): b, refused past its
	// guarantee, must not be told a unit that a and c take first.
	ask := func(id string) Decision {
		at = at.Add(2 * time.Millisecond)
		return l.AdmitAt(at, id)
	}
	told := map[string]time.Time{}
	guaranteeOf(t, ask, "b", 8)
	pastGuarantee(t, ask, func() time.Time { return at }, "b", told)
	for _, id := range []string{"a", "c"} {
		for i := 0; i < 8; i++ {
			if d := ask(id); !d.Allowed {
				t.Errorf("%s refused its guarantee: %+v", id, d)
			}
		}
	}
	for id, when := range told {
		if !when.After(at) {
			t.Fatalf("set-up: %s told %v, before a and c took", id, when.Sub(t0))
		}
	}
	retryAtTheirMoments(t, l.AdmitAt, told, func() budget { return storedBudget(t, l, store) })
}

// Two workers of a fair limit on one store, one of them interleaved: before
// some of its store reads, the other worker serves a request or ticks
// (newcomers, re-plans, refunds, multi-unit costs, caps and weights). No
// window admits more than its capacity, refunds aside (invariant W).
func TestInterleavedFairWorkersKeepTheCapacity(t *testing.T) {
	for seed := int64(1); seed <= 150; seed++ {
		rng := rand.New(rand.NewSource(seed))
		cfg := Defaults(int64(6+rng.Intn(20)), 5*time.Second)
		cfg.Policy = Fair{}
		if seed%2 == 0 {
			cfg.Weights = map[string]float64{"a": 2, "d": 3}
			cfg.Caps = map[string]int64{"b": int64(1 + rng.Intn(int(cfg.Capacity)))}
		}
		mem := NewMemStore()
		hook := &hookedStore{Store: mem}
		w0, w1 := newLimiter(t, cfg, hook), newLimiter(t, cfg, mem)
		if seed%3 == 0 {
			w0.view.inPlaceMax, w1.view.inPlaceMax = 2, 2
		}
		ids := []string{"a", "b", "c", "d", "e", "f", "g"}
		if err := w0.RegisterAt(t0, ids[:3]...); err != nil {
			t.Fatal(err)
		}
		admitted := map[int64]int64{}
		at := t0.Add(cfg.Cycle + 10*time.Millisecond)
		count := func(w *Limiter, d Decision, cost int64, id string) {
			if d.Allowed {
				admitted[d.Window] += cost
				if rng.Intn(5) == 0 {
					w.Refund(id, cost)
					admitted[d.Window] -= cost
				}
			}
		}
		inHook := false
		hook.beforeGet = func(k string) {
			if inHook || rng.Intn(4) != 0 {
				return
			}
			inHook = true
			defer func() { inHook = false }()
			if rng.Intn(4) == 0 {
				w1.TickAt(at)
				return
			}
			id := ids[rng.Intn(len(ids))]
			cost := int64(1 + rng.Intn(2))
			count(w1, w1.AdmitNAt(at, id, cost), cost, id)
		}
		for step := 0; step < 400; step++ {
			at = at.Add(time.Duration(rng.Intn(80)) * time.Millisecond)
			w := w0
			if rng.Intn(2) == 0 {
				w = w1
			}
			if rng.Intn(8) == 0 {
				w.TickAt(at)
				continue
			}
			id := ids[rng.Intn(len(ids))]
			if rng.Intn(30) == 0 {
				id = fmt.Sprintf("z%d", step)
			}
			cost := int64(1)
			if rng.Intn(6) == 0 {
				cost = int64(2 + rng.Intn(3))
			}
			count(w, w.AdmitNAt(at, id, cost), cost, id)
		}
		for k, n := range admitted {
			if n > cfg.Capacity {
				t.Errorf("seed %d: window %d admitted %d of %d", seed, k, n, cfg.Capacity)
			}
		}
	}
}
