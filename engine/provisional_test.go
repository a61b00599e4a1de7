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
	if min := int(before.n) / (2 * sliceEntries); slices < min {
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
