package engine

import (
	"testing"
	"time"
)

// lateDemandSetup registers clients roomy under a large capacity, on w
// workers over one store, and returns the measured window's start, after
// every worker has read its plan.
func lateDemandSetup(t *testing.T, w, clients int) ([]*Limiter, *countingStore, []string, time.Time, Config) {
	t.Helper()
	cfg := Defaults(1<<30, 10*time.Second)
	cfg.MaxClients = clients
	store := &countingStore{Store: NewMemStore()}
	workers := newWorkers(t, w, cfg, func() Store { return store })
	ids := clientIDs(clients)
	if err := workers[0].RegisterAt(t0, ids...); err != nil {
		t.Fatal(err)
	}
	start := t0.Add(cfg.Cycle)
	for _, l := range workers {
		l.TickAt(start)
	}
	return workers, store, ids, start, cfg
}

// entryOf reads client id's entry from the store.
func entryOf(t *testing.T, l *Limiter, id string) entry {
	t.Helper()
	l.view.forgetRead()
	_, e, found, err := l.view.find(HashID(id))
	if err != nil || !found {
		t.Fatalf("%s: no entry (%v)", id, err)
	}
	return e
}

// A roomy client's requests after its lease make no store operation
// before the window's last eighth; the host is asked for fast ticks there
// (Planning), and each of them writes a bounded number of buckets, the
// last one before the window ends. Every request is then in its entry.
func TestClosingWritesAreBoundedAndComplete(t *testing.T) {
	const clients, asks = 4000, 3
	workers, store, ids, start, cfg := lateDemandSetup(t, 2, clients)
	for a := 0; a < asks; a++ {
		for i, id := range ids {
			at := start.Add(time.Duration(a)*2*time.Second + time.Duration(i)*time.Microsecond)
			before := store.ops.Load()
			if d := workers[(a+i)%2].AdmitAt(at, id); !d.Allowed {
				t.Fatalf("%s refused: %+v", id, d)
			}
			// Each worker leases a chunk on a client's first request
			// there (a = 0 and 1); the third writes nothing.
			if ops := store.ops.Load() - before; a == 2 && ops != 0 {
				t.Fatalf("request %d of %s: %d store operations, want none", a, id, ops)
			}
		}
	}
	closing := start.Add(cfg.Cycle - cfg.Cycle/closingDivisor)
	for _, l := range workers {
		l.TickAt(closing)
		if !l.Planning() {
			t.Fatal("no fast ticks asked for in the window's last eighth with demand to write")
		}
	}
	_, end := planWindow(&workers[0].view.plan, &workers[0].cfg)
	for i, l := range workers {
		calls, most := 0, int64(0)
		for at := closing.Add(PlanTick); l.Planning(); at = at.Add(PlanTick) {
			if at.UnixNano() >= end {
				t.Fatalf("worker %d: demand still to write at the window's end", i)
			}
			before := store.ops.Load()
			l.PlanAt(at)
			most = max(most, store.ops.Load()-before)
			calls++
		}
		// A bucket's get and set, and a plan read to notice changes.
		if limit := int64(2*minClosingWork + 1); most > limit {
			t.Errorf("worker %d: a closing write made %d store operations, want at most %d", i, most, limit)
		}
		t.Logf("worker %d: %d calls, at most %d store operations each", i, calls, most)
	}
	for _, id := range ids {
		if e := entryOf(t, workers[0], id); e.demand != asks {
			t.Fatalf("%s: demand %d in its entry, asked %d", id, e.demand, asks)
		}
	}
}

// In the last eighth, a request whose bucket the closing writes have
// written writes its demand at once: nothing waits for a write that has
// passed. One that comes before its bucket's write waits for it.
func TestALateRequestIsWrittenOnce(t *testing.T) {
	workers, _, ids, start, cfg := lateDemandSetup(t, 1, 2000)
	l := workers[0]
	for _, id := range ids {
		send(l, start.Add(time.Second), id, 2)
	}
	closing := start.Add(cfg.Cycle - cfg.Cycle/closingDivisor)
	l.TickAt(closing)
	send(l, closing.Add(time.Millisecond), ids[0], 1) // its bucket may be written or not
	for at := closing.Add(PlanTick); l.Planning(); at = at.Add(PlanTick) {
		l.PlanAt(at)
	}
	for _, id := range ids[:5] {
		send(l, closing.Add(time.Second), id, 1)
	}
	// No tick after these: each was written on its request.
	for i, id := range ids[:5] {
		want := int64(3)
		if i == 0 {
			want = 4
		}
		if e := entryOf(t, l, id); e.demand != want {
			t.Errorf("%s: demand %d in its entry, asked %d", id, e.demand, want)
		}
	}
}

// A roomy client spends its lease under a later plan of the same window
// (here a re-plan for a newcomer) without a store operation, and its entry
// never counts more granted than its share.
func TestALeaseOutlivesAReplan(t *testing.T) {
	cfg := Defaults(1<<20, 10*time.Second)
	cfg.MinCycle = time.Second
	store := &countingStore{Store: NewMemStore()}
	l := newLimiter(t, cfg, store)
	if err := l.RegisterAt(t0, "a", "b"); err != nil {
		t.Fatal(err)
	}
	start := t0.Add(cfg.Cycle)
	if d := l.AdmitAt(start, "a"); !d.Allowed {
		t.Fatalf("a refused: %+v", d)
	}
	before := l.view.plan.id
	// A newcomer, proven by asking again, and counted by a re-plan.
	for i := 0; i < 3 && l.view.plan.id == before; i++ {
		at := start.Add(time.Duration(2+i) * time.Second)
		l.AdmitAt(at, "new")
		l.AdmitAt(at, "new")
		l.TickAt(at.Add(time.Millisecond))
	}
	if l.view.plan.id == before {
		t.Fatal("no re-plan for the newcomer")
	}
	ops := store.ops.Load()
	if d := l.AdmitAt(start.Add(5*time.Second), "a"); !d.Allowed {
		t.Fatalf("a refused after the re-plan: %+v", d)
	}
	if got := store.ops.Load() - ops; got != 0 {
		t.Errorf("%d store operations for a request from a lease after a re-plan, want none", got)
	}
	l.TickAt(start.Add(cfg.Cycle - time.Millisecond))
	for l.Planning() {
		l.PlanAt(start.Add(cfg.Cycle - time.Millisecond))
	}
	if e := entryOf(t, l, "a"); e.granted > e.share || e.demand != 2 {
		t.Errorf("a's entry: granted %d, share %d, demand %d (asked 2)", e.granted, e.share, e.demand)
	}
}

// A clock that jumps plans the next window at once (flush): the demand
// listed for the closing writes is written first, whatever the time.
func TestAJumpWritesTheListedDemand(t *testing.T) {
	l, _, start := roomyAsked3(t)
	l.TickAt(start.Add(2 * time.Second))
	window := l.view.plan.window
	// The clock steps back 15s and stays behind until the worker jumps.
	back := start.Add(2*time.Second - 15*time.Second)
	for at := back; l.view.plan.window == window && at.Before(back.Add(30*time.Second)); at = at.Add(500 * time.Millisecond) {
		l.TickAt(at)
	}
	if l.view.plan.window == window {
		t.Fatal("no jump")
	}
	if e := entryOf(t, l, "a"); e.demand != 3 && e.lastDemand != 3 {
		t.Errorf("a's demand %d (last %d) after the jump, asked 3", e.demand, e.lastDemand)
	}
}

// A newcomer seen once proves itself by the demand it writes, which
// re-plans within the window read: its demand is not left for the closing
// writes, and a re-plan long after it arrived still counts it.
func TestAOneShotIDProvesItselfAtOnce(t *testing.T) {
	cfg := Defaults(1<<20, time.Hour) // MinCycle: 1 min by default
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "a", "b"); err != nil {
		t.Fatal(err)
	}
	start := t0.Add(cfg.Cycle)
	l.TickAt(start)
	if d := l.AdmitAt(start.Add(5*time.Minute), "n"); !d.Allowed {
		t.Fatalf("n not admitted at once: %+v", d)
	}
	for i := 0; i < 5; i++ {
		if d := l.AdmitAt(start.Add(6*time.Minute+time.Duration(i)*time.Second), "n"); !d.Allowed {
			t.Fatalf("n refused: %+v", d)
		}
	}
	l.TickAt(start.Add(7 * time.Minute))
	e := entryOf(t, l, "n")
	t.Logf("n after 6 requests and a tick: tries %d demand %d share %d", e.tries, e.demand, e.share)
	// A re-plan for another newcomer, 25 minutes after n arrived.
	for i := 0; i < 3; i++ {
		at := start.Add(30*time.Minute + time.Duration(i)*2*time.Minute)
		l.AdmitAt(at, "m")
		l.AdmitAt(at.Add(time.Second), "m")
		l.TickAt(at.Add(2 * time.Second))
	}
	s := l.Snapshot()
	share, counted := s.Clients[HashID("n")]
	t.Logf("after the re-plan (plan %d): n counted %v share %d; a's share %d", s.Plan, counted, share, s.Clients[HashID("a")])
	if e.tries != 2 {
		t.Errorf("n asked 6 times: tries %d in its entry, want 2 (proven)", e.tries)
	}
	if !counted {
		t.Errorf("n, asking all along, is not counted by the re-plan")
	}
}

// A bucket the closing writes have written is written at once from then,
// even when the clock steps back out of the last eighth: a list nobody
// reads again would lose the demand.
func TestAStepBackAfterTheClosingWritesLosesNothing(t *testing.T) {
	l, cfg, start := roomyAsked3(t)
	closing := start.Add(cfg.Cycle - cfg.Cycle/closingDivisor)
	l.TickAt(closing)
	for at := closing.Add(PlanTick); l.Planning(); at = at.Add(PlanTick) {
		l.PlanAt(at)
	}
	if e := entryOf(t, l, "a"); e.demand != 3 {
		t.Fatalf("a's demand %d after the closing writes, want 3", e.demand)
	}
	// The clock steps back 11s (over maxLag, 10s), and a asks once.
	if d := l.AdmitAt(closing.Add(-11*time.Second), "a"); !d.Allowed {
		t.Fatalf("a refused: %+v", d)
	}
	// The clock is right again; ticks come every PlanTick to the end.
	_, end := planWindow(&l.view.plan, &l.cfg)
	for at := closing.Add(time.Second); at.UnixNano() < end; at = at.Add(100 * time.Millisecond) {
		l.TickAt(at)
		for l.Planning() {
			l.PlanAt(at)
		}
	}
	if e := entryOf(t, l, "a"); e.demand != 4 {
		t.Errorf("a's demand %d at the window's end, asked 4", e.demand)
	}
	l.TickAt(time.Unix(0, end).Add(time.Millisecond)) // the roll (flush)
	if e := entryOf(t, l, "a"); e.demand != 4 && e.lastDemand != 4 {
		t.Errorf("a's demand %d (last %d) after the roll, asked 4", e.demand, e.lastDemand)
	}
}

// roomyAsked3 starts a worker whose clients a and b are far below their
// share, a window in which a has asked 3 times, its demand waiting.
func roomyAsked3(t *testing.T) (*Limiter, Config, time.Time) {
	t.Helper()
	cfg := Defaults(1<<20, 10*time.Second)
	cfg.MinCycle = time.Second
	cfg.MaxClients = 16
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "a", "b"); err != nil {
		t.Fatal(err)
	}
	start := t0.Add(cfg.Cycle)
	l.TickAt(start)
	send(l, start.Add(time.Second), "a", 3)
	if !l.view.waits(l.view.client(HashID("a"))) {
		t.Fatal("a's demand does not wait")
	}
	return l, cfg, start
}
