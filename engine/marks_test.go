package engine

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

func TestBucketMarkNeverDeniesAHash(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 14, bucketSlots} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			var m bucketMark
			held := make([]uint64, n)
			for i := range held {
				held[i] = rng.Uint64()
				m.add(held[i])
			}
			for _, h := range held {
				if !m.mayHold(h) {
					t.Fatalf("held hash %x denied", h)
				}
			}
			denied := 0
			const probes = 10_000
			for i := 0; i < probes; i++ {
				if !m.mayHold(rng.Uint64()) {
					denied++
				}
			}
			// Three bits of 256 per hash: about 8% false "maybe" for a full
			// bucket of 48, far fewer for the usual handful.
			if denied < probes*4/5 {
				t.Fatalf("only %d of %d hashes not held were denied", denied, probes)
			}
		})
	}
}

// markTest is two workers over one counting store, a holding the table.
type markTest struct {
	store *countingStore
	a, b  *Limiter
}

func newMarkTest(t *testing.T, maxClients int, registered ...string) *markTest {
	t.Helper()
	cfg := testConfig()
	cfg.Capacity = 1000
	cfg.MaxClients = maxClients
	m := &markTest{store: &countingStore{Store: NewMemStore()}}
	m.a, m.b = newLimiter(t, cfg, m.store), newLimiter(t, cfg, m.store)
	if err := m.a.RegisterAt(t0, registered...); err != nil {
		t.Fatal(err)
	}
	return m
}

// admit sends one request of id to l and reports the store operations it
// cost.
func (m *markTest) admit(l *Limiter, at time.Time, id string) (Decision, int64) {
	before := m.store.ops.Load()
	d := l.AdmitAt(at, id)
	return d, m.store.ops.Load() - before
}

// flood sends ids prefix-0... to b, each once; all must be refused as
// table_full. It returns how many read or wrote shared state.
func (m *markTest) flood(t *testing.T, at time.Time, prefix string, n int) (touched int) {
	t.Helper()
	for i := 0; i < n; i++ {
		d, ops := m.admit(m.b, at, prefix+strconv.Itoa(i))
		if d.Allowed || d.Reason != ReasonTableFull {
			t.Fatalf("%s%d: %+v, want table_full", prefix, i, d)
		}
		if ops > 0 {
			touched++
		}
	}
	return touched
}

func ids(prefix string, n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = prefix + strconv.Itoa(i)
	}
	return s
}

// A table of MaxClients: the first refusal reads the newcomer's bucket
// and marks it; the rest read nothing, while clients the plan counts are
// still found by a worker that never saw them.
func TestFullTableRefusesFromMarks(t *testing.T) {
	clients := ids("client-", 8)
	m := newMarkTest(t, len(clients), clients...) // one bucket
	at := t0.Add(2 * time.Second)
	if touched := m.flood(t, at, "flood-", 200); touched > 10 {
		t.Fatalf("%d of 200 refusals read shared state; want the first and few false positives", touched)
	}
	for _, c := range clients {
		if d, _ := m.admit(m.b, at, c); !d.Allowed {
			t.Fatalf("b: %s, counted by the plan: %+v", c, d)
		}
	}
	// The next window's plan makes the mark stale: a refusal reads again.
	next := at.Add(10 * time.Second)
	for _, c := range clients {
		m.a.AdmitAt(next, c)
	}
	m.b.TickAt(next)
	if d, ops := m.admit(m.b, next, "flood-x"); ops == 0 || d.Reason != ReasonTableFull {
		t.Fatalf("first refusal under a new plan: %d operations, %+v", ops, d)
	}
}

// A bucket whose places for newcomers are taken: once marked, a flood of
// one-shot ids reads nothing, and a newcomer waiting there can still prove
// itself on another worker; then nobody is refused from the mark while it
// waits for the re-plan that counts it.
func TestWaitingFullBucketRefusesFromMarks(t *testing.T) {
	m := newMarkTest(t, 1000, "steady")  // 64 buckets
	at := t0.Add(100 * time.Millisecond) // no re-plan before MinCycle
	// Fill one bucket's places for newcomers through a.
	home := m.a.view.home(clientHash("w-0"))
	var waiting []string
	for i := 0; len(waiting) < maxWaitingPerBucket; i++ {
		id := "w-" + strconv.Itoa(i)
		if m.a.view.home(clientHash(id)) != home {
			continue
		}
		if d := m.a.AdmitAt(at, id); d.Reason != ReasonPending {
			t.Fatalf("a: %s: %+v, want pending", id, d)
		}
		waiting = append(waiting, id)
	}
	var flood []string
	for i := 0; len(flood) < 100; i++ {
		if id := "f-" + strconv.Itoa(i); m.b.view.home(clientHash(id)) == home {
			flood = append(flood, id)
		}
	}
	touched := 0
	for _, id := range flood {
		d, ops := m.admit(m.b, at, id)
		if d.Allowed || d.Reason != ReasonTableFull {
			t.Fatalf("b: %s: %+v, want table_full", id, d)
		}
		if ops > 0 {
			touched++
		}
	}
	if touched > 5 {
		t.Fatalf("%d of %d refusals in a marked bucket read shared state", touched, len(flood))
	}
	// A waiting newcomer asks again at b: found and proven, not refused.
	if d, _ := m.admit(m.b, at, waiting[0]); d.Reason != ReasonPending {
		t.Fatalf("b: %s asking again: %+v, want pending", waiting[0], d)
	}
	if m.b.view.plan.pending != 1 {
		t.Fatalf("pending = %d after a proof, want 1", m.b.view.plan.pending)
	}
	for i := 0; ; i++ {
		if id := "g-" + strconv.Itoa(i); m.b.view.home(clientHash(id)) == home {
			if d, ops := m.admit(m.b, at, id); ops == 0 {
				t.Fatalf("b: %s in the marked bucket while a client waits read nothing: %+v", id, d)
			}
			break
		}
	}
}

// The re-plan a flood causes every MinCycle promotes one newcomer and
// frees no bucket's places: marks outlive it. A re-plan that counts a
// proven newcomer freed a place: marks made before it are dropped.
func TestMarksOutliveReplansThatFreeNoPlace(t *testing.T) {
	m := newMarkTest(t, 1000, "steady")
	at := t0.Add(100 * time.Millisecond)
	home := m.a.view.home(clientHash("w-0"))
	inHome := func(prefix string, n int) []string {
		var out []string
		for i := 0; len(out) < n; i++ {
			if id := prefix + strconv.Itoa(i); m.a.view.home(clientHash(id)) == home {
				out = append(out, id)
			}
		}
		return out
	}
	waiting := inHome("w-", maxWaitingPerBucket)
	for _, id := range waiting {
		if d := m.a.AdmitAt(at, id); d.Reason != ReasonPending {
			t.Fatalf("a: %s: %+v, want pending", id, d)
		}
	}
	refusedFromMark := func(ids []string, when time.Time) int {
		touched := 0
		for _, id := range ids {
			d, ops := m.admit(m.b, when, id)
			if d.Reason != ReasonTableFull {
				t.Fatalf("b: %s: %+v, want table_full", id, d)
			}
			if ops > 0 {
				touched++
			}
		}
		return touched
	}
	if touched := refusedFromMark(inHome("f-", 50), at); touched > 3 {
		t.Fatalf("%d of 50 refusals read before the re-plan", touched)
	}
	// A newcomer elsewhere, past MinCycle: a re-plan promotes it.
	later := t0.Add(1500 * time.Millisecond)
	var elsewhere string
	for i := 0; elsewhere == ""; i++ {
		if id := "n-" + strconv.Itoa(i); m.a.view.home(clientHash(id)) != home {
			elsewhere = id
		}
	}
	before := m.a.view.plan
	if d := m.a.AdmitAt(later, elsewhere); !d.Allowed {
		t.Fatalf("a: %s past MinCycle: %+v, want admitted by a re-plan", elsewhere, d)
	}
	if p := m.a.view.plan; p.id != before.id+1 || p.n != before.n+1 {
		t.Fatalf("plan %d (n %d) after %d (n %d): want one re-plan counting one more", p.id, p.n, before.id, before.n)
	}
	m.b.TickAt(later)
	// (Not even the first: the mark made before the re-plan still holds.)
	if touched := refusedFromMark(inHome("g-", 50), later); touched > 0 {
		t.Fatalf("%d of 50 refusals read after a re-plan that freed no place", touched)
	}
	// One of the bucket's newcomers proves itself; the next re-plan counts
	// it, and its place is free again.
	if d := m.a.AdmitAt(later, waiting[0]); d.Reason != ReasonPending {
		t.Fatalf("a: %s asking again: %+v, want pending", waiting[0], d)
	}
	last := t0.Add(2600 * time.Millisecond)
	m.a.TickAt(last)
	m.b.TickAt(last)
	if p := m.b.view.plan; p.pending != 0 || p.id != before.id+2 {
		t.Fatalf("b's view: plan %d pending %d, want the re-plan that counted the proof", p.id, p.pending)
	}
	next := inHome("h-", 1)[0]
	if d, ops := m.admit(m.b, last, next); ops == 0 || d.Reason != ReasonPending {
		t.Fatalf("b: %s after a re-plan that freed a place: %d operations, %+v; want a read and a place", next, ops, d)
	}
}
