package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine/enginetest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testConfig() Config {
	cfg := Defaults(40, 10*time.Second)
	cfg.MinCycle = time.Second
	return cfg
}

func newLimiter(t *testing.T, cfg Config, store Store) *Limiter {
	t.Helper()
	l, err := New(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// send makes n attempts by client at times spread inside [at, at+span).
func send(l *Limiter, at time.Time, client string, n int) (admitted int, last Decision) {
	for i := 0; i < n; i++ {
		last = l.AdmitAt(at.Add(time.Duration(i)*time.Millisecond), client)
		if last.Allowed {
			admitted++
		}
	}
	return admitted, last
}

func shareOf(l *Limiter, client string) int64 { return l.Snapshot().Clients[HashID(client)] }

// The worked example, end to end through the state machine: four clients
// registered at t0, demand per cycle as attempts, rollover on the deadline.
func TestLimiterWorkedExample(t *testing.T) {
	l := newLimiter(t, testConfig(), NewMemStore())
	clients := []string{"A", "B", "C", "D"}
	if err := l.RegisterAt(t0, clients...); err != nil {
		t.Fatal(err)
	}
	demands := [][]int{{2, 15, 10, 10}, {3, 15, 50, 10}, {0, 15, 50, 5}}
	wantShares := [][]int64{{10, 10, 10, 10}, {5, 15, 10, 10}, {3, 11, 16, 10}, {1, 12, 22, 5}}
	for cycle, want := range wantShares {
		start := t0.Add(time.Duration(cycle) * 10 * time.Second)
		l.TickAt(start)
		for i, c := range clients {
			if got := shareOf(l, c); got != want[i] {
				t.Fatalf("cycle %d client %s share = %d, want %d", cycle+1, c, got, want[i])
			}
		}
		if cycle == len(demands) {
			break
		}
		for i, c := range clients {
			admitted, _ := send(l, start.Add(time.Second), c, demands[cycle][i])
			if want := min(int64(demands[cycle][i]), want[i]); int64(admitted) != want {
				t.Fatalf("cycle %d client %s admitted %d, want %d", cycle+1, c, admitted, want)
			}
		}
	}
}

func TestLimiterRejectionsCarryHeaders(t *testing.T) {
	l := newLimiter(t, testConfig(), NewMemStore())
	admitted, d := send(l, t0, "solo", 41)
	if admitted != 40 {
		t.Fatalf("admitted %d of 41, want the whole capacity 40", admitted)
	}
	want := Decision{Allowed: false, WouldReject: true, Reason: ReasonOverLimit, Limit: 40,
		Reset: 10*time.Second - 40*time.Millisecond, RetryAfter: 10*time.Second - 40*time.Millisecond, Plan: d.Plan, Window: d.Window}
	if d != want {
		t.Fatalf("decision = %+v\nwant       %+v", d, want)
	}
	ok := l.AdmitAt(t0.Add(10*time.Second), "solo")
	if !ok.Allowed || ok.Plan != d.Plan+1 || ok.Remaining != ok.Limit-1 {
		t.Fatalf("after the deadline: %+v, want admitted in the next cycle with remaining = limit-1", ok)
	}
}

func TestAnonymousIsRejectedWithoutState(t *testing.T) {
	store := enginetest.NewKeyCounter(NewMemStore())
	l := newLimiter(t, testConfig(), store)
	d := l.AdmitAt(t0, "")
	if d.Allowed || d.Reason != ReasonAnonymous {
		t.Fatalf("decision = %+v, want anonymous rejection", d)
	}
	if store.Keys() != 0 {
		t.Fatalf("anonymous request touched shared state (%d keys)", store.Keys())
	}
}

func TestNewcomerReplansTheRestOfTheWindow(t *testing.T) {
	l := newLimiter(t, testConfig(), NewMemStore())
	send(l, t0, "A", 5)
	first := l.Snapshot()
	d := l.AdmitAt(t0.Add(2*time.Second), "B") // after MinCycle
	if !d.Allowed || d.Plan != first.Plan+1 || d.Window != first.Window {
		t.Fatalf("newcomer: %+v, want admitted under a re-plan of the same window", d)
	}
	s := l.Snapshot()
	if !s.Early || !s.Deadline.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("snapshot %+v, want a re-plan that keeps the window's deadline", s)
	}
	// Both are new in this window, so both count as the default share 20.
	// A was granted 5 already: it may take 15 more; B takes 20; 5 + 15 +
	// 20 is the window's 40.
	if a, b := shareOf(l, "A"), shareOf(l, "B"); a != 20 || b != 20 {
		t.Fatalf("shares A=%d B=%d, want 20 and 20", a, b)
	}
	admitted, _ := send(l, t0.Add(3*time.Second), "A", 40)
	more, _ := send(l, t0.Add(4*time.Second), "B", 40)
	if total := 5 + admitted + 1 + more; total != 40 {
		t.Fatalf("the window admitted %d, want exactly its capacity 40", total)
	}
}

// allocateInOrder is Allocate over clients named in registration order,
// which is how the engine breaks rounding ties too.
func allocateInOrder(capacity int64, reservation float64, names []string, demand map[string]int64) map[string]int64 {
	ds := make([]int64, len(names))
	for i, c := range names {
		ds[i] = demand[c]
	}
	out := map[string]int64{}
	for i, s := range Allocate(capacity, reservation, ds) {
		out[names[i]] = s
	}
	return out
}

// A client that arrives mid-window has its first window's demand scaled to
// a full window, from its arrival.
func TestPartialFirstWindowIsScaled(t *testing.T) {
	cfg := testConfig()
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "A", "B", "C", "D"); err != nil {
		t.Fatal(err)
	}
	send(l, t0.Add(time.Millisecond), "A", 3)
	send(l, t0.Add(7500*time.Millisecond), "E", 3) // 3 in 2.5 s: 12 per 10 s
	l.TickAt(t0.Add(10 * time.Second))
	want := allocateInOrder(40, cfg.Reservation, []string{"A", "B", "C", "D", "E"}, map[string]int64{"A": 3, "E": 12})
	for c, share := range want {
		if got := shareOf(l, c); got != share {
			t.Fatalf("client %s share %d, want %d (all %v)", c, got, share, want)
		}
	}
}

func TestMinCycleHoldsNewcomersPending(t *testing.T) {
	l := newLimiter(t, testConfig(), NewMemStore())
	send(l, t0, "A", 1)
	d := l.AdmitAt(t0.Add(300*time.Millisecond), "B")
	if d.Allowed || d.Reason != ReasonPending || d.RetryAfter != 700*time.Millisecond {
		t.Fatalf("decision = %+v, want pending with retry-after 700ms", d)
	}
	before := l.Snapshot().Plan
	// A flood of new ids inside MinCycle causes no rollover at all.
	for i := 0; i < 100; i++ {
		l.AdmitAt(t0.Add(400*time.Millisecond), fmt.Sprintf("flood-%d", i))
	}
	if got := l.Snapshot().Plan; got != before {
		t.Fatalf("cycle moved from %d to %d during MinCycle", before, got)
	}
	d = l.AdmitAt(t0.Add(time.Second), "B")
	if !d.Allowed || d.Plan != before+1 {
		t.Fatalf("after MinCycle: %+v, want B admitted under the re-plan", d)
	}
	// B asked again (proven); the 100 one-shot ids did not: the re-plan
	// counts B alone, and the ids hold no table room.
	if got, pending := l.ActiveClients(), l.Snapshot().Pending; got != 2 || pending != 0 {
		t.Fatalf("active clients %d, pending %d; want A and B counted, the 100 one-shot ids not", got, pending)
	}
	if s := l.Snapshot(); !s.Deadline.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("the re-plan moved the deadline to %v", s.Deadline)
	}
}

// hookStore runs hook once, after the first write of key watch that
// follows arming: another worker acting between two store operations of
// a request.
type hookStore struct {
	Store
	watch string
	hook  func()
}

func (s *hookStore) Set(key string, v []byte, cas uint32) error {
	err := s.Store.Set(key, v, cas)
	if hook := s.hook; err == nil && hook != nil && key == s.watch {
		s.hook = nil
		hook()
	}
	return err
}

// A newcomer's request makes a plan that counts it (promoted), and before
// its entry is written under that plan, another worker's re-plan, made for
// another newcomer, counts that one instead. The first newcomer's entry is
// left unproven, and the worker that served it still holds its state: its
// next request proves it, there as on any worker, and the re-plan that
// counts it follows. (When that worker read the entry as pending under its
// state, the client, keeping to one connection, was told pending in every
// window.)
func TestANewcomerWhosePromotionIsLostAsksAgainAndIsCounted(t *testing.T) {
	cfg := Defaults(10, 5*time.Second)
	cfg.Policy = Fair{}
	cfg.MinCycle = 500 * time.Millisecond
	store := &hookStore{Store: NewMemStore()}
	w1, w2 := newLimiter(t, cfg, store), newLimiter(t, cfg, store)
	start := t0.Add(20 * time.Millisecond)
	var b Decision
	store.watch = w1.view.planKey
	store.hook = func() { b = w2.AdmitAt(start, "B") }
	a := w1.AdmitAt(start, "A")
	if !b.Allowed || a.Allowed || a.Reason != ReasonPending {
		t.Fatalf("A %+v, B %+v: want B admitted, and A pending, its promotion lost to B's re-plan", a, b)
	}
	if _, e, found, err := w1.view.find(clientHash("A")); err != nil || !found || !waitingUnproven(&e) {
		t.Fatalf("A's entry %+v (found %t, %v): want it unproven", e, found, err)
	}
	// A asks again, on the same worker, at what Retry-After says in whole
	// seconds (as the header does), through the next two windows.
	at := start
	var asked []Reason
	for len(asked) < 12 {
		at = at.Add(max(a.RetryAfter.Round(time.Second), time.Second))
		a = w1.AdmitAt(at, "A")
		asked = append(asked, a.Reason)
	}
	if asked[0] == ReasonPending {
		t.Fatalf("A's answers, asking again at Retry-After: %v; want its first retry to prove it and a re-plan to count it", asked)
	}
	// Counted: in a later window it has its share.
	if d := w1.AdmitAt(at.Add(cfg.Cycle), "A"); !d.Allowed || d.Limit == 0 {
		t.Fatalf("A in a later window: %+v, want admitted from a share", d)
	}
}

// Clients that each ask once every 25 s, on 10 s windows: a newcomer's
// first request leaves an unproven entry, and its next, two or three
// windows later, proves it from that entry. 2,000 of them, as many as
// max_clients, asking in turn: in their third round most are admitted, in
// their fourth nearly all, and from their sixth all. (When a newcomer took the place of an unproven
// entry of an earlier window before a place never used, 70% of them were
// still pending in their eighth round.)
func TestClientsAskingLessThanOnceAWindowAreCounted(t *testing.T) {
	const n = 2000
	cfg := Defaults(1<<40, 10*time.Second)
	cfg.MaxClients = n
	l := newLimiter(t, cfg, NewMemStore())
	step := 25 * time.Second / n
	now := t0
	for round := 0; round < 8; round++ {
		admitted := 0
		for i := 0; i < n; i++ {
			if l.AdmitAt(now, fmt.Sprintf("light-%d", i)).Allowed {
				admitted++
			}
			if now = now.Add(step); i%100 == 0 {
				l.TickAt(now)
			}
		}
		switch {
		case round == 2 && admitted < n*80/100:
			t.Errorf("round %d: %d of %d admitted, want at least 80%%", round, admitted, n)
		case (round == 3 || round == 4) && admitted < n*98/100:
			t.Errorf("round %d: %d of %d admitted, want at least 98%%", round, admitted, n)
		case round > 4 && admitted != n:
			t.Errorf("round %d: %d of %d admitted, want all", round, admitted, n)
		}
	}
}

func TestTableFullNeverEvictsActiveClients(t *testing.T) {
	cfg := testConfig()
	cfg.MaxClients = 3
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "A", "B", "C"); err != nil {
		t.Fatal(err)
	}
	d := l.AdmitAt(t0.Add(5*time.Second), "D")
	if d.Allowed || d.Reason != ReasonTableFull {
		t.Fatalf("decision = %+v, want table_full", d)
	}
	for _, c := range []string{"A", "B", "C"} {
		if !l.AdmitAt(t0.Add(5*time.Second), c).Allowed {
			t.Fatalf("registered client %s was not served after a table_full", c)
		}
	}
}

func TestIdleClientsAreForgotten(t *testing.T) {
	cfg := testConfig()
	cfg.IdleCycles = 2
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "busy", "idle"); err != nil {
		t.Fatal(err)
	}
	for c := 0; c < 3; c++ {
		at := t0.Add(time.Duration(c) * 10 * time.Second)
		l.TickAt(at)
		send(l, at.Add(time.Second), "busy", 1)
	}
	l.TickAt(t0.Add(30 * time.Second))
	s := l.Snapshot()
	if _, ok := s.Clients[HashID("idle")]; ok || s.Clients[HashID("busy")] != 40 {
		t.Fatalf("clients %v, want idle forgotten and busy holding all 40", s.Clients)
	}
}

func TestLongGapForgetsTheSilent(t *testing.T) {
	cfg := testConfig()
	l := newLimiter(t, cfg, NewMemStore())
	send(l, t0, "A", 1)
	send(l, t0.Add(time.Second), "B", 1) // a re-plan: plan 2 with A and B
	// An hour without requests or ticks (a clock jump looks the same): the
	// rollover ages clients silent in cycle 2 by every full cycle that
	// passed, and keeps B, which sent in it.
	l.AdmitAt(t0.Add(time.Hour), "B")
	s := l.Snapshot()
	if _, ok := s.Clients[HashID("A")]; ok {
		t.Fatal("A, silent for an hour, is still registered")
	}
	if s.Clients[HashID("B")] != cfg.Capacity {
		t.Fatalf("clients %v, want B alone with the whole capacity", s.Clients)
	}
}

func TestPassthroughAdmitsButReports(t *testing.T) {
	cfg := testConfig()
	cfg.Passthrough = true
	l := newLimiter(t, cfg, NewMemStore())
	admitted, d := send(l, t0, "A", 60)
	if admitted != 60 || !d.WouldReject || d.Reason != ReasonOverLimit {
		t.Fatalf("admitted %d, last %+v; want 60 admitted and the last would-reject over_limit", admitted, d)
	}
	if d := l.AdmitAt(t0, ""); !d.Allowed || d.Reason != ReasonAnonymous {
		t.Fatalf("anonymous in passthrough: %+v", d)
	}
}

func TestClockStepsBack(t *testing.T) {
	l := newLimiter(t, testConfig(), NewMemStore())
	admitted, _ := send(l, t0, "A", 20)
	// A small step back (workers reading the clock a little apart) is
	// absorbed into the running cycle: still capped by the same share.
	more, _ := send(l, t0.Add(-2*time.Second), "A", 40)
	if admitted+more != 40 {
		t.Fatalf("admitted %d across a small step back, want the share 40", admitted+more)
	}
	// A step back of more than a cycle never opens a window again: the
	// request counts in the newest window (spent), and is told to come back
	// when the worker may jump (Cycle + MinCycle).
	c := l.Snapshot().Plan
	cfg := testConfig()
	back := t0.Add(-time.Hour)
	d := l.AdmitAt(back, "A")
	if d.Allowed || d.Plan != c || d.RetryAfter > cfg.Cycle+cfg.MinCycle {
		t.Fatalf("after a large step back: %+v, want over_limit in the spent window, retry within %s", d, cfg.Cycle+cfg.MinCycle)
	}
	// The window does not move for Cycle + MinCycle of the stepped clock:
	// the worker opens a new window after it, under a new plan.
	d = l.AdmitAt(back.Add(cfg.Cycle+cfg.MinCycle), "A")
	if !d.Allowed || d.Plan <= c || d.Window <= l.Snapshot().Window-1 {
		t.Fatalf("after Cycle+MinCycle behind: %+v, want a fresh window under a new plan", d)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	base := testConfig()
	tests := []struct {
		field string
		edit  func(*Config)
	}{
		{"capacity", func(c *Config) { c.Capacity = 0 }},
		{"capacity", func(c *Config) { c.Capacity = MaxCapacity + 1 }},
		{"cycle", func(c *Config) { c.Cycle = 0 }},
		{"cycle", func(c *Config) { c.Cycle = MaxCycle + time.Second }},
		{"cycle", func(c *Config) { c.Cycle = time.Millisecond - 1 }},
		{"window_offset", func(c *Config) { c.WindowOffset = -7 * time.Hour }},
		{"window_offset", func(c *Config) { c.WindowOffset = c.Cycle }},
		{"reservation", func(c *Config) { c.Reservation = 1.5 }},
		{"reservation", func(c *Config) { c.Reservation = -0.1 }},
		{"max_clients", func(c *Config) { c.MaxClients = 0 }},
		{"idle_cycles", func(c *Config) { c.IdleCycles = 0 }},
		{"min_cycle", func(c *Config) { c.MinCycle = 0 }},
		{"min_cycle", func(c *Config) { c.MinCycle = c.Cycle + 1 }},
		{"cas_retries", func(c *Config) { c.CASRetries = 0 }},
		{"key_prefix", func(c *Config) { c.KeyPrefix = "" }},
	}
	for _, tt := range tests {
		cfg := base
		tt.edit(&cfg)
		_, err := New(cfg, NewMemStore())
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("config %+v: error %v, want one naming %q", cfg, err, tt.field)
		}
	}
	if _, err := New(base, nil); err == nil {
		t.Errorf("nil store accepted")
	}
}

func TestKeySetIsBounded(t *testing.T) {
	cfg := testConfig()
	cfg.MaxClients = 50
	store := enginetest.NewKeyCounter(NewMemStore())
	l := newLimiter(t, cfg, store)
	for i := 0; i < 2000; i++ {
		at := t0.Add(time.Duration(i) * 50 * time.Millisecond)
		l.AdmitAt(at, fmt.Sprintf("id-%d", i))
		l.AdmitAt(at, "steady")
	}
	if got := store.Keys(); got > cfg.MaxClients+1 {
		t.Fatalf("store holds %d keys, want at most max_clients+1 = %d", got, cfg.MaxClients+1)
	}
}

// Re-plans for newcomers, MinCycle apart, do not age quiet clients: only
// whole windows of silence count towards IdleCycles.
func TestReplansDoNotAgeQuietClients(t *testing.T) {
	cfg := testConfig()
	cfg.IdleCycles = 2
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "quiet", "busy"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		at := t0.Add(time.Duration(i) * 1100 * time.Millisecond)
		if d := l.AdmitAt(at, fmt.Sprintf("new-%d", i)); !d.Allowed || !l.Snapshot().Early {
			t.Fatalf("newcomer %d: %+v, want admitted by a re-plan", i, d)
		}
	}
	l.TickAt(t0.Add(20 * time.Second)) // quiet in windows 1 and 2 after arriving in 0
	if _, ok := l.Snapshot().Clients[HashID("quiet")]; !ok {
		t.Fatal("five re-plans and two quiet windows made a client forgotten")
	}
	l.TickAt(t0.Add(30 * time.Second))
	if _, ok := l.Snapshot().Clients[HashID("quiet")]; ok {
		t.Fatal("quiet client still counted after more than two idle windows")
	}
}

func TestFirstClientNeverWaits(t *testing.T) {
	l := newLimiter(t, testConfig(), NewMemStore())
	if d := l.AdmitAt(t0.Add(5*time.Second), "first"); !d.Allowed || d.Limit != 40 {
		t.Fatalf("first client: %+v, want admitted with the whole capacity", d)
	}
}

// Old and new configs share the keys during a reconfiguration. A worker
// whose table is smaller than the header it reads must neither panic nor
// exceed its own bound; the new config takes over at its first request.
func TestReconfigurationToASmallerTable(t *testing.T) {
	store := enginetest.NewKeyCounter(NewMemStore())
	big := testConfig()
	big.MaxClients = 20
	old := newLimiter(t, big, store)
	ids := make([]string, 10)
	for i := range ids {
		ids[i] = fmt.Sprintf("c%d", i)
	}
	if err := old.RegisterAt(t0, ids...); err != nil {
		t.Fatal(err)
	}
	small := testConfig()
	small.MaxClients = 3
	small.Capacity = 30
	cur := newLimiter(t, small, store)
	// Within the running cycle the new config honours it (seeing only the
	// part that fits its table); at the deadline it takes over.
	for _, at := range []time.Time{t0.Add(time.Second), t0.Add(11 * time.Second)} {
		for _, id := range ids {
			cur.AdmitAt(at, id)
			cur.TickAt(at)
		}
	}
	s := cur.Snapshot()
	if len(s.Clients) > 3 {
		t.Fatalf("the new config tracks %d clients, want at most its max_clients 3", len(s.Clients))
	}
	var sum int64
	for _, share := range s.Clients {
		sum += share
	}
	if sum != 30 {
		t.Fatalf("shares sum to %d under the new config, want its capacity 30", sum)
	}
	// The old config's worker keeps working on the same keys too.
	old.AdmitAt(t0.Add(12*time.Second), "c9")
	old.TickAt(t0.Add(12 * time.Second))
}

// Two live configs of one limit (old and new during a reconfiguration)
// must not roll each other's cycles over: a client alternating between
// them stays within one cycle's share.
func TestOverlappingConfigsKeepTheCap(t *testing.T) {
	store := enginetest.NewKeyCounter(NewMemStore())
	a := testConfig()
	b := testConfig()
	b.Capacity = 41
	la, lb := newLimiter(t, a, store), newLimiter(t, b, store)
	admitted := 0
	for i := 0; i < 400; i++ {
		l := la
		if i%2 == 1 {
			l = lb
		}
		if l.AdmitAt(t0.Add(time.Duration(i)*time.Millisecond), "X").Allowed {
			admitted++
		}
	}
	if admitted > 41 {
		t.Fatalf("a client alternating between two configs got %d in 0.4 s, want at most one cycle's share (≤ 41)", admitted)
	}
}

// An entry naming a plan that does not exist (a bad writer) makes its
// client over limit for the window, never fail open, and the next plan
// resets its bucket: the client comes back as a newcomer.
func TestFutureEntryIsRepairedNotFailedOpen(t *testing.T) {
	store := enginetest.NewKeyCounter(NewMemStore())
	cfg := testConfig()
	l := newLimiter(t, cfg, store)
	if err := l.RegisterAt(t0, "X"); err != nil {
		t.Fatal(err)
	}
	key := l.view.key(l.view.home(HashID("X")))
	bogus := appendBucket(nil, &bucketVal{entries: []entry{{hash: HashID("X"), plan: 1 << 40, share: 40, window: l.view.plan.window, active: l.view.plan.window}}})
	if err := store.Set(key, bogus, 0); err != nil {
		t.Fatal(err)
	}
	d := l.AdmitAt(t0.Add(time.Second), "X")
	if d.Allowed || d.Reason != ReasonOverLimit {
		t.Fatalf("decision on a future-stamped entry = %+v, want over_limit", d)
	}
	if d := l.AdmitAt(t0.Add(10*time.Second), "X"); !d.Allowed {
		t.Fatalf("after the next window's plan: %+v, want the bucket reset and X admitted", d)
	}
}

// Under a steady stream of newcomers every rollover is early, yet a silent
// client still ages by the time that passes and is forgotten.
func TestSilentClientsAgeUnderChurn(t *testing.T) {
	cfg := testConfig() // cycle 10 s, idle_cycles 3
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "silent", "busy"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 12; i++ { // a newcomer every 5 s, for 60 s
		at := t0.Add(time.Duration(i) * 5 * time.Second)
		send(l, at, "busy", 1)
		l.AdmitAt(at.Add(time.Millisecond), fmt.Sprintf("new-%d", i))
	}
	if _, ok := l.Snapshot().Clients[HashID("silent")]; ok {
		t.Fatal("a client silent for 60 s (6 cycles) is still registered under churn")
	}
	if _, ok := l.Snapshot().Clients[HashID("busy")]; !ok {
		t.Fatal("the busy client was forgotten")
	}
}

// A plan that decodes but cannot be right (a capacity of 0) is treated as
// unreadable and replaced by a plan whose id is above every id in use,
// rather than locking clients out.
func TestImpossiblePlanIsReset(t *testing.T) {
	store := enginetest.NewKeyCounter(NewMemStore())
	cfg := testConfig()
	bogus := appendPlan(nil, &plan{id: 7, roll: 7, window: windowIndex(t0.UnixNano(), &cfg), capacity: 0, buckets: 128, n: 1, scale: 1})
	if err := store.Set(recordKey(&cfg, "p"), bogus, 0); err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, cfg, store)
	d := l.AdmitAt(t0.Add(time.Second), "real")
	if !d.Allowed {
		t.Fatalf("a real client behind an impossible plan: %+v", d)
	}
	if d.Plan < planResetJump {
		t.Fatalf("plan id %d after a reset, want a jump of at least %d", d.Plan, planResetJump)
	}
}

// A corrupt slot makes its client over limit without re-reading (and
// re-reporting) the slot on every request.
func TestCorruptSlotRejectsLocally(t *testing.T) {
	store := &countingStore{Store: NewMemStore()}
	cfg := testConfig()
	resets := &resetCounter{}
	l, _ := New(cfg, store, WithObserver(resets))
	if err := l.RegisterAt(t0, "X"); err != nil {
		t.Fatal(err)
	}
	if err := store.Set(l.view.key(l.view.home(HashID("X"))), []byte("garbage"), 0); err != nil {
		t.Fatal(err)
	}
	store.ops.Store(0)
	admitted, _ := send(l, t0.Add(time.Second), "X", 1000)
	if admitted != 0 {
		t.Fatalf("admitted %d from a corrupt bucket, want 0 until the roller resets it", admitted)
	}
	// Written-back demand grows geometrically (1/16 steps), so 1000
	// attempts re-read the slot about 16·ln(1000)+16 ≈ 127 times, not 1000.
	if resets.n > 127 || store.ops.Load() > 2*127 {
		t.Fatalf("1000 rejections made %d resets and %d store ops, want at most 16·ln(1000)+16", resets.n, store.ops.Load())
	}
	if d := l.AdmitAt(t0.Add(10*time.Second), "X"); !d.Allowed {
		t.Fatalf("after the rollover: %+v, want the slot reset", d)
	}
}

type resetCounter struct {
	NopObserver
	n int
}

func (r *resetCounter) ValueReset(string, error) { r.n++ }

// The worked example of docs/contract.md: capacity 40, four clients with
// the shares 5/15/10/10 of the seed's worked example (second window), and a
// fifth that first asks 0.5 s into it (within min_cycle: pending), and
// again 4 s into it, when 20 units of the window are used: proven, it is
// counted at the default share.
func TestContractWorkedExample(t *testing.T) {
	l := newLimiter(t, testConfig(), NewMemStore())
	clients := []string{"A", "B", "C", "D"}
	if err := l.RegisterAt(t0, clients...); err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{2, 15, 10, 10} { // window 1's demand
		send(l, t0.Add(time.Second), clients[i], n)
	}
	w2 := t0.Add(10 * time.Second)
	l.TickAt(w2)
	for i, want := range []int64{5, 15, 10, 10} {
		if got := shareOf(l, clients[i]); got != want {
			t.Fatalf("window 2: %s share %d, want %d", clients[i], got, want)
		}
	}
	for i, n := range []int{2, 9, 5, 4} { // 20 of the 40 used by 4 s
		if admitted, _ := send(l, w2.Add(100*time.Millisecond), clients[i], n); admitted != n {
			t.Fatalf("%s admitted %d of %d within its share", clients[i], admitted, n)
		}
	}
	if d := l.AdmitAt(w2.Add(500*time.Millisecond), "E"); d.Allowed || d.Reason != ReasonPending || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("E within min_cycle: %+v, want pending for 500ms", d)
	}
	d := l.AdmitAt(w2.Add(4*time.Second), "E")
	if !d.Allowed || d.Limit != 8 {
		t.Fatalf("E: %+v, want admitted with a share of 8", d)
	}
	for i, want := range []int64{2, 12, 9, 9, 8} {
		if c := append(clients, "E")[i]; shareOf(l, c) != want {
			t.Fatalf("after the re-plan: %s share %d, want %d", c, shareOf(l, c), want)
		}
	}
	total := 20 + 1
	for _, c := range append(clients, "E") {
		admitted, _ := send(l, w2.Add(5*time.Second), c, 20)
		total += admitted
	}
	if total != 40 {
		t.Fatalf("window 2 admitted %d, want exactly 40", total)
	}

	// The variant: E's first request comes 4 s in, when a re-plan is
	// allowed. It is admitted at once, counted at the 1 unit it asked for.
	l = newLimiter(t, testConfig(), NewMemStore())
	if err := l.RegisterAt(t0, clients...); err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{2, 15, 10, 10} {
		send(l, t0.Add(time.Second), clients[i], n)
	}
	l.TickAt(w2)
	for i, n := range []int{2, 9, 5, 4} {
		send(l, w2.Add(time.Second), clients[i], n)
	}
	if d := l.AdmitAt(w2.Add(4*time.Second), "E"); !d.Allowed || d.Limit != 2 {
		t.Fatalf("unproven E: %+v, want admitted at once with a share of 2", d)
	}
	for i, want := range []int64{3, 15, 10, 10, 2} {
		if c := append(clients, "E")[i]; shareOf(l, c) != want {
			t.Fatalf("after the re-plan for unproven E: %s share %d, want %d", c, shareOf(l, c), want)
		}
	}
}

// A proven newcomer waiting in the last place of the table is registered
// by its own request once MinCycle has passed, without waiting for a tick;
// a newcomer proving itself after it is refused.
func TestPendingInTheLastPlaceIsRegistered(t *testing.T) {
	cfg := testConfig()
	cfg.MaxClients = 2
	l := newLimiter(t, cfg, NewMemStore())
	send(l, t0, "a", 1)
	if d := l.AdmitAt(t0.Add(100*time.Millisecond), "b"); d.Reason != ReasonPending {
		t.Fatalf("b: %+v, want pending", d)
	}
	if d := l.AdmitAt(t0.Add(200*time.Millisecond), "c"); d.Reason != ReasonPending {
		t.Fatalf("c: %+v, want pending (unproven newcomers hold no table room)", d)
	}
	if d := l.AdmitAt(t0.Add(300*time.Millisecond), "b"); d.Reason != ReasonPending {
		t.Fatalf("b again: %+v, want pending (proven: it takes the last place)", d)
	}
	if d := l.AdmitAt(t0.Add(400*time.Millisecond), "c"); d.Reason != ReasonTableFull {
		t.Fatalf("c again: %+v, want table_full", d)
	}
	if d := l.AdmitAt(t0.Add(1100*time.Millisecond), "b"); !d.Allowed {
		t.Fatalf("b after MinCycle: %+v, want admitted", d)
	}
}

// TestFreshWorkersReplaceAnUnreadableStore: when every shared value is
// unreadable (an upgrade that changed the records' format, say) and every
// worker is new (a reload starts new VMs), the first worker that asks
// replaces the plan, and admissions resume by the next window. A plan id of
// 0, what a worker that never read a plan holds, must not read as "no plan
// to replace".
func TestFreshWorkersReplaceAnUnreadableStore(t *testing.T) {
	const capacity = 100
	cfg := Defaults(capacity, time.Second)
	store := NewMemStore()
	old := newLimiter(t, cfg, store)
	for i := 0; i < 50; i++ {
		old.AdmitAt(t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("c%d", i%5))
	}
	keys := []string{old.view.planKey, old.view.budgetKey}
	for b := 0; b < old.view.nb; b++ {
		keys = append(keys, old.view.key(b))
	}
	unreadable := 0
	for _, k := range keys {
		raw, cas, err := store.Get(k)
		if err != nil {
			continue
		}
		raw[len(raw)/2] ^= 1
		if err := store.Set(k, raw, cas); err != nil {
			t.Fatal(err)
		}
		unreadable++
	}
	if unreadable < 3 {
		t.Fatalf("set-up: %d values written by the old worker; want the plan, the budget and a bucket", unreadable)
	}

	workers := []*Limiter{newLimiter(t, cfg, store), newLimiter(t, cfg, store)}
	from := t0.Add(time.Second)
	k0, _, _ := WindowAt(from, cfg.Cycle, 0)
	admitted := map[int64]int{}
	for i := 0; i < 3000; i++ { // three windows, a request a millisecond
		now := from.Add(time.Duration(i) * time.Millisecond)
		w := workers[i%len(workers)]
		if i%100 < len(workers) {
			w.TickAt(now)
		}
		if w.AdmitAt(now, fmt.Sprintf("c%d", i%5)).Allowed {
			k, _, _ := WindowAt(now, cfg.Cycle, 0)
			admitted[k]++
		}
	}
	t.Logf("admitted per window after the values became unreadable: %d, %d, %d", admitted[k0], admitted[k0+1], admitted[k0+2])
	for k, n := range admitted {
		if n > capacity {
			t.Errorf("window %d admitted %d, over the capacity %d", k, n, capacity)
		}
	}
	if admitted[k0+1] == 0 || admitted[k0+2] == 0 {
		t.Errorf("admitted %d and %d in the two windows after the first; want admissions to resume by the next window", admitted[k0+1], admitted[k0+2])
	}
}

// A roll that reads the plan, then finds a budget written under a plan
// another worker published between the two reads, reads both again: the
// budget is not corrupt, and nothing is reported as unreadable.
func TestRollAfterAPlanPublishedBetweenItsReads(t *testing.T) {
	store := &interposingStore{Store: NewMemStore()}
	cfg := testConfig()
	resets := &resetCounter{}
	a, _ := New(cfg, store, WithObserver(resets))
	b, _ := New(cfg, store, WithObserver(resets))
	if err := a.RegisterAt(t0, "X", "Y"); err != nil {
		t.Fatal(err)
	}
	send(a, t0.Add(time.Second), "X", 5)
	b.AdmitAt(t0.Add(time.Second), "Y")
	next := t0.Add(10 * time.Second)
	// a's roll reads the plan; before its read of the budget, b rolls
	// and takes a unit (it writes the budget under its plan).
	store.after, store.before, store.hook = a.view.planKey, a.view.budgetKey, func() { b.AdmitAt(next, "Y") }
	if d := a.AdmitAt(next, "X"); !d.Allowed {
		t.Fatalf("X after the roll: %+v", d)
	}
	if store.hook != nil {
		t.Fatal("the interposed roll never ran: the test shows nothing")
	}
	if resets.n != 0 {
		t.Fatalf("%d values reported unreadable, want none", resets.n)
	}
	if a.view.plan.id != b.view.plan.id {
		t.Fatalf("a holds plan %d, b published %d: one roll per window", a.view.plan.id, b.view.plan.id)
	}
}

// interposingStore runs hook once, just before the first Get of key
// before that follows a Get of key after.
type interposingStore struct {
	Store
	after, before string
	hook          func()
	armed         bool
}

func (s *interposingStore) Get(k string) ([]byte, uint32, error) {
	switch h := s.hook; {
	case h != nil && k == s.after:
		s.armed = true
	case h != nil && s.armed && k == s.before:
		s.hook = nil
		h()
	}
	return s.Store.Get(k)
}

// A newcomer's demand in its first window counts each of its requests
// once: told to wait at its first request (1 unit), it proves itself with
// a second (5 units) that a re-plan counts at once: 6. Refused table_full
// at its first, only its proving request is known: 5, not that request
// twice.
func TestNewcomerDemandCountsEachAskOnce(t *testing.T) {
	for _, c := range []struct {
		name  string
		flood bool // one-shot ids fill the newcomers' places first
		first Reason
		want  int64
	}{
		{"told to wait, then proven", false, ReasonPending, 6},
		{"refused table_full, then proven", true, ReasonTableFull, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.MaxClients = 20
			l := newLimiter(t, cfg, NewMemStore())
			if err := l.RegisterAt(t0, "A"); err != nil {
				t.Fatal(err)
			}
			at := t0.Add(500 * time.Millisecond)
			for i := 0; c.flood && i < 200; i++ {
				l.AdmitAt(at, fmt.Sprintf("once-%d", i))
			}
			if d := l.AdmitNAt(at, "genuine", 1); d.Reason != c.first {
				t.Fatalf("first request: %+v, want %s", d, c.first)
			}
			if d := l.AdmitNAt(at.Add(1500*time.Millisecond), "genuine", 5); !d.Allowed {
				t.Fatalf("proving request, a re-plan due: %+v", d)
			}
			l.TickAt(at.Add(1600 * time.Millisecond)) // writes the demand back
			_, e, found, err := l.view.find(HashID("genuine"))
			if err != nil || !found || e.demand != c.want {
				t.Fatalf("entry found %v (%v): demand %d, want %d", found, err, e.demand, c.want)
			}
		})
	}
}
