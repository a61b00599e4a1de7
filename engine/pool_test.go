package engine

import (
	"strings"
	"testing"
	"time"
)

// budgetOps counts the operations on the window budget's key.
type budgetOps struct {
	Store
	n int
}

func (s *budgetOps) Get(k string) ([]byte, uint32, error) {
	if strings.HasSuffix(k, "/w") {
		s.n++
	}
	return s.Store.Get(k)
}

func (s *budgetOps) Set(k string, v []byte, c uint32) error {
	if strings.HasSuffix(k, "/w") {
		s.n++
	}
	return s.Store.Set(k, v, c)
}

// A worker takes a pool chunk from the window budget beside a roomy
// client's lease, and the next chunks come from it: eight leases of eight
// units cost one budget get and set, not eight.
func TestAPoolServesRoomyChunks(t *testing.T) {
	cfg := Defaults(1<<30, 10*time.Second)
	cfg.MaxClients = 1000
	store := &budgetOps{Store: NewMemStore()}
	l := newLimiter(t, cfg, store)
	ids := clientIDs(1000)
	if err := l.RegisterAt(t0, ids...); err != nil {
		t.Fatal(err)
	}
	start := t0.Add(cfg.Cycle)
	l.TickAt(start)
	store.n = 0
	for i, id := range ids {
		if d := l.AdmitAt(start.Add(time.Duration(i)*time.Millisecond), id); !d.Allowed {
			t.Fatalf("%s refused: %+v", id, d)
		}
	}
	// 1,000 chunks of 8 units, with a pool chunk of 64 beside every
	// eighth: 125 takes, and the first that finds no room seen yet.
	if most := 2 * (len(ids)*leaseChunk/poolChunk + 2); store.n > most {
		t.Errorf("%d budget operations for %d chunk leases, want at most %d", store.n, len(ids), most)
	}
	t.Logf("%d budget operations for %d chunk leases", store.n, len(ids))
}

// A pool not drawn from since the last tick goes back to the window
// budget; the budget then holds exactly what the entries were granted.
func TestAnUnusedPoolGoesBack(t *testing.T) {
	cfg := Defaults(1<<30, 10*time.Second)
	l := newLimiter(t, cfg, NewMemStore())
	ids, start := pooled(t, l)
	l.TickAt(start.Add(time.Second)) // (drawn from since the tick before)
	l.TickAt(start.Add(2 * time.Second))
	if l.view.pool.units != 0 {
		t.Fatalf("%d units still pooled after a tick that found it unused", l.view.pool.units)
	}
	var granted int64
	for _, id := range ids {
		granted += entryOf(t, l, id).granted
	}
	if got := l.view.grantedIn(l.view.plan.window); got != granted {
		t.Errorf("budget granted %d, the entries %d", got, granted)
	}
}

// A pool of a window that is over is forgotten: given to the next
// window's budget, its units would be taken off that window's grants.
func TestAPoolDoesNotOutliveItsWindow(t *testing.T) {
	cfg := Defaults(1<<30, 10*time.Second)
	store := NewMemStore()
	a, b := newLimiter(t, cfg, store), newLimiter(t, cfg, store)
	ids, start := pooled(t, a)
	next := start.Add(cfg.Cycle)
	for _, id := range ids {
		send(b, next, id, 1)
	}
	before := b.view.grantedIn(b.view.plan.window)
	a.TickAt(next.Add(time.Second))
	a.TickAt(next.Add(2 * time.Second))
	if got := b.view.grantedIn(b.view.plan.window); got != before {
		t.Errorf("the next window's budget went from %d to %d granted when the old pool was returned", before, got)
	}
}

// With little left in the window budget, no pool is taken: the units stay
// where any client can have them.
func TestNoPoolWhenTheBudgetIsShort(t *testing.T) {
	cfg := Defaults(poolRoom, 10*time.Second)
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "a", "b"); err != nil {
		t.Fatal(err)
	}
	start := t0.Add(cfg.Cycle)
	l.TickAt(start)
	send(l, start, "a", 1)
	send(l, start, "b", 1)
	send(l, start, "a", leaseChunk+1)
	if l.view.pool.units != 0 {
		t.Errorf("%d units pooled out of a budget of %d", l.view.pool.units, cfg.Capacity)
	}
}

// pooled registers 20 clients far below their share on l and sends each
// one request at the start of a window, so that l takes a pool.
func pooled(t *testing.T, l *Limiter) ([]string, time.Time) {
	t.Helper()
	ids := clientIDs(20)
	if err := l.RegisterAt(t0, ids...); err != nil {
		t.Fatal(err)
	}
	start := t0.Add(l.cfg.Cycle)
	l.TickAt(start)
	for _, id := range ids {
		send(l, start, id, 1)
	}
	if l.view.pool.units == 0 {
		t.Fatal("no pool taken")
	}
	return ids, start
}
