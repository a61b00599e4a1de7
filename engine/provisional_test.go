package engine

import (
	"strconv"
	"testing"
	"time"
)

// largeTable is a limit with more clients than a request plans over, and
// a history: the first tenth of them asked for four units in the first
// window, the rest for one.
func largeTable(t *testing.T) (*Limiter, *countingStore, Config) {
	t.Helper()
	cfg := Defaults(100_000, time.Second)
	cfg.MaxClients = 4 * planInPlaceMax
	store := &countingStore{Store: NewMemStore()}
	l, err := New(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
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
	return l, store, cfg
}

// A request that crosses into a new window over a large table publishes a
// provisional plan without reading the table; the next tick replaces it
// with the plan a tick would have made in the first place.
func TestLargeTableRollsProvisionallyOnRequest(t *testing.T) {
	l, store, cfg := largeTable(t)
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

	ref, _, _ := largeTable(t)
	ref.TickAt(next) // a tick plans the new window in place
	want := ref.view.plan
	if want.provisional {
		t.Fatal("a tick made a provisional plan")
	}

	l.TickAt(next.Add(time.Millisecond))
	got := l.view.plan
	if got.provisional || got.window != want.window {
		t.Fatalf("plan after the tick: %+v, want one computed over the table", got)
	}
	if got.params != want.params || got.n != want.n || got.spread != want.spread ||
		got.thrFrac != want.thrFrac || got.thrSince != want.thrSince || got.thrHash != want.thrHash {
		t.Errorf("the tick's plan differs from one planned in place:\n got %+v\nwant %+v", got, want)
	}
	if got.params == before.params {
		t.Error("the demand of the first window changed no parameter: the test shows nothing")
	}
}

