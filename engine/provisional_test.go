package engine

import (
	"strconv"
	"testing"
	"time"
)

// largeTable is a limit with more clients than a request plans over, and
// a history: the first tenth of them asked for four units in the first
// window, the rest for one. inPlace is the largest table planned in place.
func largeTable(t *testing.T, inPlace int) (*Limiter, *countingStore, *rollovers, Config) {
	t.Helper()
	cfg := Defaults(100_000, time.Second)
	cfg.MaxClients = 4 * planInPlaceMax
	store := &countingStore{Store: NewMemStore()}
	obs := &rollovers{}
	l, err := New(cfg, store, WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	l.view.inPlaceMax = inPlace
	n := 2 * planInPlaceMax
	if err := l.RegisterAt(t0, clientIDs(n)...); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		asks := 1
		if i < n/10 {
			asks = 4
		}
		for j := 0; j < asks; j++ {
			if !l.AdmitAt(t0.Add(time.Millisecond), "client-"+strconv.Itoa(i)).Allowed {
				t.Fatalf("client-%d refused in the first window", i)
			}
		}
	}
	return l, store, obs, cfg
}

// declared is a limiter on a store of its own with n clients declared at
// t0, and their ids.
func declared(t testing.TB, cfg Config, n int) (*Limiter, []string) {
	t.Helper()
	l, err := New(cfg, NewMemStore())
	if err != nil {
		t.Fatal(err)
	}
	ids := clientIDs(n)
	if err := l.RegisterAt(t0, ids...); err != nil {
		t.Fatal(err)
	}
	return l, ids
}

// A request that crosses into a new window over a large table publishes a
// provisional plan without reading the table; ticks then read the table
// and compute the plan a slice at a time, and replace it with the plan,
// and the judgment of the window closed, that planning in place gives.
func TestLargeTableRollsProvisionallyOnRequest(t *testing.T) {
	l, store, obs, cfg := largeTable(t, planInPlaceMax)
	next := t0.Add(cfg.Cycle)
	before := l.view.plan
	store.ops.Store(0)
	if !l.AdmitAt(next, "client-7").Allowed {
		t.Fatal("client-7 refused at the start of the second window")
	}
	if ops := store.ops.Load(); ops > 16 {
		t.Errorf("the request that rolled made %d store operations, want a handful", ops)
	}
	p := l.view.plan
	if !p.provisional || p.window != before.window+1 || p.params != before.params || p.n != before.n {
		t.Fatalf("plan after the request: %+v, want a provisional plan with the parameters of %+v", p, before)
	}

	ref, _, refObs, _ := largeTable(t, 1<<30)
	ref.AdmitAt(next, "client-7") // planned in place
	want := ref.view.plan
	if want.provisional {
		t.Fatal("the reference made a provisional plan")
	}

	slices := 0
	for at := next.Add(PlanTick); l.view.plan.provisional; at = at.Add(PlanTick) {
		store.ops.Store(0)
		planning := l.PlanAt(at)
		slices++
		if ops := store.ops.Load(); ops > int64(l.view.nb)/2 {
			t.Errorf("slice %d made %d store operations", slices, ops)
		}
		if planning != l.view.plan.provisional {
			t.Errorf("slice %d: PlanAt says %v, the plan's provisional is %v", slices, planning, l.view.plan.provisional)
		}
		if slices > 100 {
			t.Fatal("still provisional after 100 slices")
		}
	}
	if min := int(before.n) / (2 * sliceWork); slices < min {
		t.Errorf("the table was read in %d slices, want at least %d", slices, min)
	}
	got := l.view.plan
	if got.window != want.window {
		t.Fatalf("plan after the slices: %+v, want one for window %d", got, want.window)
	}
	if got.params != want.params || got.n != want.n || got.spread != want.spread ||
		got.thrFrac != want.thrFrac || got.thrSince != want.thrSince || got.thrHash != want.thrHash {
		t.Errorf("the plan read in slices differs from one planned in place:\n got %+v\nwant %+v", got, want)
	}
	if got.params == before.params {
		t.Error("the demand of the first window changed no parameter: the test shows nothing")
	}
	last := obs.events[len(obs.events)-1]
	ref1 := refObs.events[len(refObs.events)-1]
	if !last.Completes || !last.Closed.Judged || last.Closed != ref1.Closed {
		t.Errorf("the plan read in slices judged the closed window %+v (completes %v), planning in place %+v", last.Closed, last.Completes, ref1.Closed)
	}
}

// interposedStore runs before (once it is set) ahead of each Get: another
// worker's callback between two store operations of this one, as Envoy's
// worker threads interleave.
type interposedStore struct {
	Store
	before func(key string)
}

func (s *interposedStore) Get(key string) ([]byte, uint32, error) {
	if f := s.before; f != nil {
		f(key)
	}
	return s.Store.Get(key)
}

// twoWorkers is largeTable's history (inPlace planInPlaceMax) on two
// workers sharing one store; a's reads go through interposed.
func twoWorkers(t *testing.T) (a, b *Limiter, interposed *interposedStore, mem Store, cfg Config) {
	t.Helper()
	cfg = Defaults(100_000, time.Second)
	cfg.MaxClients = 4 * planInPlaceMax
	mem = NewMemStore()
	interposed = &interposedStore{Store: mem}
	var err error
	if a, err = New(cfg, interposed); err != nil {
		t.Fatal(err)
	}
	if b, err = New(cfg, mem); err != nil {
		t.Fatal(err)
	}
	n := 2 * planInPlaceMax
	if err := a.RegisterAt(t0, clientIDs(n)...); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if !a.AdmitAt(t0.Add(time.Millisecond), "client-"+strconv.Itoa(i)).Allowed {
			t.Fatalf("client-%d refused", i)
		}
	}
	a.TickAt(t0.Add(2 * time.Millisecond))
	return a, b, interposed, mem, cfg
}

// entriesIn is how many clients the bucket at key holds.
func entriesIn(t *testing.T, s Store, key string) int {
	t.Helper()
	raw, _, err := s.Get(key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	var v bucketVal
	if err := decodeBucket(raw, &v); err != nil {
		t.Fatalf("bucket %s unreadable: %v", key, err)
	}
	return len(v.entries)
}

// A slice reads the plan, then buckets, without a CAS between them: a
// re-plan another worker publishes meanwhile can count a newcomer in a
// bucket the slice then reads, under a plan id above the one the slice
// read. That entry is not corrupt: the slice reads the plan again, and
// the bucket after it, and every valid client stays in the table.
func TestASliceReadsThePlanAgainForAnEntryOfALaterOne(t *testing.T) {
	a, b, interposed, mem, cfg := twoWorkers(t)
	next := t0.Add(cfg.Cycle)
	if !a.AdmitAt(next, "client-7").Allowed || !a.view.plan.provisional || !a.Planning() {
		t.Fatalf("a did not roll provisionally: %+v", a.view.plan)
	}
	b.AdmitAt(next.Add(time.Millisecond), "client-8") // b takes the provisional plan
	const x = 10                                      // a bucket the first slice reads
	key := a.view.key(x)
	before := entriesIn(t, mem, key)
	at := next.Add(150 * time.Millisecond) // past min_cycle: a re-plan may follow
	var newcomer string
	interposed.before = func(k string) {
		if k != key {
			return
		}
		interposed.before = nil
		// b, between a's read of the plan and of bucket x: a newcomer at
		// home in x is counted at once by b's provisional re-plan.
		for i := 0; newcomer == ""; i++ {
			if id := "new-" + strconv.Itoa(i); b.view.home(clientHash(id)) == x {
				newcomer = id
			}
		}
		b.AdmitAt(at, newcomer)
	}
	for i := 0; a.view.plan.provisional; i++ {
		if i > 400 {
			t.Fatal("still provisional after 400 slices")
		}
		a.PlanAt(at.Add(time.Duration(i) * PlanTick))
	}
	if newcomer == "" {
		t.Fatal("no slice read bucket x: the test shows nothing")
	}
	if after := entriesIn(t, mem, key); after < before {
		t.Errorf("bucket %d held %d clients and a newcomer; after the plan read in slices, %d: reset as corrupt", x, before, after)
	}
}

// One worker reads the table for a provisional plan: another that
// publishes a provisional re-plan of the same window (a newcomer) leaves
// the read to it, and one that ticks takes it over only once the plan is
// late by three quarters of a window.
func TestOneWorkerReadsTheTable(t *testing.T) {
	t.Run("re-plan", func(t *testing.T) {
		a, b, _, _, cfg := twoWorkers(t)
		next := t0.Add(cfg.Cycle)
		a.AdmitAt(next, "client-7")
		a.PlanAt(next.Add(PlanTick))
		b.AdmitAt(next.Add(150*time.Millisecond), "someone-new")
		if !b.view.plan.provisional || !b.view.plan.replan {
			t.Fatalf("b's plan: %+v, want a provisional re-plan", b.view.plan)
		}
		if !a.Planning() || b.Planning() {
			t.Errorf("a reads: %v, b reads: %v; want a alone", a.Planning(), b.Planning())
		}
	})
	t.Run("takeover", func(t *testing.T) {
		a, b, start, cfg := fullTableRolledBy(t, nil)
		// a's ticks come late, every 10 ms; b ticks at its own period.
		for d := 100 * time.Millisecond; a.view.plan.provisional && d < cfg.Cycle; d += 2 * PlanTick {
			a.PlanAt(start.Add(d))
			if d%(100*time.Millisecond) == 0 {
				b.TickAt(start.Add(d))
			}
			if b.Planning() {
				t.Fatalf("at +%v both workers read the table", d)
			}
		}
		if a.view.plan.provisional {
			t.Error("a never completed the plan")
		}
	})
}

// fullTableRolledBy is two workers a and b over 100,000 declared clients
// on 1 s windows, each having seen one, and a's request rolling the
// second window provisionally at start; b's store is wrap's (nil: the
// same).
func fullTableRolledBy(t *testing.T, wrap func(Store) Store) (a, b *Limiter, start time.Time, cfg Config) {
	t.Helper()
	cfg = Defaults(1_000_000, time.Second)
	cfg.MaxClients = MaxClientsCap
	mem := NewMemStore()
	bs := Store(mem)
	if wrap != nil {
		bs = wrap(mem)
	}
	a, _ = New(cfg, mem)
	b, _ = New(cfg, bs)
	ids := clientIDs(MaxClientsCap)
	if err := a.RegisterAt(t0, ids...); err != nil {
		t.Fatal(err)
	}
	a.AdmitAt(t0.Add(time.Millisecond), ids[0])
	b.AdmitAt(t0.Add(time.Millisecond), ids[1])
	start = t0.Add(cfg.Cycle)
	a.AdmitAt(start, ids[2])
	if !a.view.plan.provisional || !a.Planning() {
		t.Fatalf("a did not roll provisionally: %+v", a.view.plan)
	}
	return a, b, start, cfg
}

// A plan read in slices ends the slices: a provisional re-plan that the
// same worker publishes next is read afresh, its newcomers with it, and
// the window closed by the roll is judged once.
func TestANewProvisionalPlanIsReadAfresh(t *testing.T) {
	l, _, obs, cfg := largeTable(t, planInPlaceMax)
	next := t0.Add(cfg.Cycle)
	l.AdmitAt(next, "client-7")
	at := next
	for i := 0; l.view.plan.provisional; i++ {
		if i > 400 {
			t.Fatal("still provisional after 400 slices")
		}
		at = at.Add(PlanTick)
		l.PlanAt(at)
	}
	done := l.view.plan
	judged := func() (n int) {
		for _, ev := range obs.events {
			if ev.Closed.Judged && ev.Window == done.window {
				n++
			}
		}
		return n
	}
	once := judged()
	at = at.Add(cfg.MinCycle + time.Millisecond)
	l.AdmitAt(at, "newcomer-1")
	if !l.view.plan.provisional {
		t.Fatalf("the newcomer's re-plan is not provisional: %+v", l.view.plan)
	}
	l.PlanAt(at.Add(PlanTick))
	if !l.view.plan.provisional {
		t.Errorf("one slice after a new provisional re-plan published a plan read over the table (n=%d, was %d)", l.view.plan.n, done.n)
	}
	if n := judged(); n != once {
		t.Errorf("the window closed by the roll was judged %d times", n)
	}
}

// Slices grow to publish the plan within half a window, however late the
// host's ticks come: 100,000 clients on 1 s windows, the first tick 100 ms
// after the roll, then every 5 ms, every 10 ms, or every 100 ms (a host
// that never ticks faster). With ticks every 5 or 10 ms, no slice reads
// more than three times the buckets of the average one (with ticks every
// 100 ms, a slice's share of the work may be all reading). A roll made
// late in its window (its first request came late) is read before the
// window ends: a roll over a plan never read is planned in place.
func TestSlicesMeetTheirDeadlineWhateverTheTicks(t *testing.T) {
	cfg := Defaults(1_000_000, time.Second)
	cfg.MaxClients = MaxClientsCap
	cfg.Policy = Fair{}
	store := &countingStore{Store: NewMemStore()}
	l, err := New(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	ids := clientIDs(MaxClientsCap)
	if err := l.RegisterAt(t0, ids...); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(ids); i += 7 {
		l.AdmitNAt(t0.Add(time.Millisecond), ids[i], int64(1+i%13))
	}
	l.TickAt(t0.Add(2 * time.Millisecond))
	for w, tc := range []struct{ late, every time.Duration }{
		{0, PlanTick}, {0, 2 * PlanTick}, {0, 100 * time.Millisecond}, {700 * time.Millisecond, PlanTick},
	} {
		every := tc.every
		start := t0.Add(time.Duration(w+1)*cfg.Cycle + tc.late)
		l.AdmitAt(start, ids[1]) // a provisional roll
		if !l.view.plan.provisional {
			t.Fatalf("window %d not rolled provisionally", w+1)
		}
		var most, all int64
		slices := 0
		at := start.Add(100 * time.Millisecond)
		for ; l.view.plan.provisional && at.Before(start.Add(cfg.Cycle)); at = at.Add(every) {
			store.ops.Store(0)
			l.PlanAt(at)
			ops := store.ops.Load()
			most, all, slices = max(most, ops), all+ops, slices+1
		}
		within := min(cfg.Cycle/planDeadline, (cfg.Cycle-tc.late)*3/4)
		if end := at.Sub(start) - every; l.view.plan.provisional || end > within+every {
			t.Errorf("roll %v into the window, ticks every %v: plan read by +%v (provisional still: %v), want by %v and a tick", tc.late, every, end, l.view.plan.provisional, within)
		}
		if mean := float64(all) / float64(slices); every < 100*time.Millisecond && float64(most) > 3*mean {
			t.Errorf("ticks every %v: %d slices, the largest of %d store operations, the mean %.0f", every, slices, most, mean)
		}
	}
}

// A roll over a provisional plan (its read never completed: the host did
// not tick) is planned in place: rolled provisionally again, the
// parameters of an older window would last, and clients idle since would
// stay counted and keep the table full.
func TestARollOverAProvisionalPlanIsPlannedInPlace(t *testing.T) {
	cfg := Defaults(1_000_000, time.Second)
	cfg.MaxClients = 2048
	l, ids := declared(t, cfg, 2048)
	l.AdmitAt(t0.Add(time.Millisecond), ids[0])
	provisional := 0
	for w := 1; w <= cfg.IdleCycles+3; w++ { // only client-0 asks; nobody ticks
		l.AdmitAt(t0.Add(time.Duration(w)*cfg.Cycle), ids[0])
		if l.view.plan.provisional {
			provisional++
		}
	}
	if provisional == 0 {
		t.Fatal("no roll was provisional: the test shows nothing")
	}
	if d := l.AdmitAt(t0.Add(time.Duration(cfg.IdleCycles+3)*cfg.Cycle+time.Millisecond), "brand-new"); d.Reason == ReasonTableFull {
		t.Errorf("a newcomer is refused table_full: the plan still counts %d clients idle for %d windows", l.view.plan.n, cfg.IdleCycles+3)
	}
}

// Parameters are carried over one roll at most: a roll over a provisional
// re-plan of a plan read over the table (a newcomer late in the window)
// is provisional still, and carries them; a roll over a plan that carried
// them is planned in place.
func TestParametersAreCarriedOverOneRollAtMost(t *testing.T) {
	l, _, _, cfg := largeTable(t, planInPlaceMax)
	w1 := t0.Add(cfg.Cycle)
	l.AdmitAt(w1, "client-7")
	for at := w1.Add(PlanTick); l.view.plan.provisional; at = at.Add(PlanTick) {
		if at.Sub(w1) > cfg.Cycle/2 {
			t.Fatal("the plan was not read within half a window")
		}
		l.PlanAt(at)
	}
	l.AdmitAt(w1.Add(cfg.Cycle*9/10), "late-newcomer")
	if p := l.view.plan; !p.provisional || !p.replan || p.carried {
		t.Fatalf("the late newcomer's plan: %+v, want a provisional re-plan carrying nothing", p)
	}
	l.AdmitAt(w1.Add(cfg.Cycle), "client-7") // nobody ticked since
	if p := l.view.plan; !p.provisional || p.replan || !p.carried {
		t.Fatalf("the roll over it: %+v, want a provisional roll carrying its parameters", p)
	}
	at := w1.Add(cfg.Cycle)
	for l.view.plan.provisional && at.Sub(w1) < cfg.Cycle*3/2 {
		at = at.Add(PlanTick)
		l.PlanAt(at)
	}
	if p := l.view.plan; p.provisional {
		t.Fatalf("the provisional roll still provisional half a window on: %+v (its publisher should read it)", p)
	}
	l.AdmitAt(w1.Add(cfg.Cycle*19/10), "another-late-newcomer")
	l.AdmitAt(w1.Add(2*cfg.Cycle), "client-7")
	if p := l.view.plan; !p.provisional || p.replan {
		t.Fatalf("the roll after a plan read over the table: %+v, want a provisional roll", p)
	}
	l.AdmitAt(w1.Add(3*cfg.Cycle), "client-7") // nobody ticked since
	if p := l.view.plan; p.provisional {
		t.Fatalf("the roll over a plan that carried its parameters: %+v, want one planned in place", p)
	}
}
