package engine_test

import (
	"fmt"
	"math/rand"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// reloadWatch counts what a reload must not cause: unreadable values and
// clock jumps (with exact clocks, nobody's clock runs ahead).
type reloadWatch struct {
	engine.NopObserver
	planResets, jumps atomic.Int64
}

func (w *reloadWatch) ValueReset(key string, _ error) {
	if strings.HasSuffix(key, "/p") {
		w.planResets.Add(1)
	}
}

func (w *reloadWatch) ClockJump(time.Duration) { w.jumps.Add(1) }

// A reload that changes the table (max_clients) or the windows (cycle)
// while the old config still serves, its clock a few milliseconds behind
// the new one's: no worker may panic, publish a plan the others cannot
// read, or jump its clock; and once the old config is gone the new one
// admits in every window with demand. (A worker once kept a client's
// bucket of the old table after adopting a plan of the new one, and
// indexed past the new table; a re-plan by the old config once paired the
// new config's window index with the old cycle.)
func TestReloadChangingTheTableOrWindows(t *testing.T) {
	cycles := []time.Duration{time.Second, 3 * time.Second, 10 * time.Second}
	tables := []int{1, 16, 1000}
	for seed := int64(0); seed < 200; seed++ {
		rng := rand.New(rand.NewSource(seed))
		cfg := func() engine.Config {
			c := engine.Defaults(int64(20+rng.Intn(80)), cycles[rng.Intn(len(cycles))])
			c.MaxClients = tables[rng.Intn(len(tables))]
			c.MinCycle = 50 * time.Millisecond
			if rng.Intn(2) == 0 {
				c.Policy = engine.Fair{}
			}
			return c
		}
		a, b := cfg(), cfg()
		lag := time.Duration(rng.Intn(4)) * time.Millisecond
		name := fmt.Sprintf("seed %d: %v/%d → %v/%d, old clock %v behind", seed, a.Cycle, a.MaxClients, b.Cycle, b.MaxClients, lag)
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s: panic %v", name, r)
				}
			}()
			store := engine.NewMemStore()
			watch := &reloadWatch{}
			old, now := newLimiterT(t, a, store, watch), newLimiterT(t, b, store, watch)
			ids := advClients("c", 6)
			reload := advEpoch.Add(time.Duration(rng.Intn(3000)) * time.Millisecond)
			drain := reload.Add(2 * max(a.Cycle, b.Cycle)) // then the old config is gone
			end := drain.Add(4 * b.Cycle)
			admitted, asked := map[int64]int{}, map[int64]int{}
			step := 7 * time.Millisecond
			for i, at := 0, advEpoch; at.Before(end); i, at = i+1, at.Add(step) {
				w, clock := now, at
				if at.Before(reload) || (at.Before(drain) && i%2 == 0) {
					w, clock = old, at.Add(-lag)
				}
				if i%15 == 0 {
					w.TickAt(clock)
				}
				d := w.AdmitAt(clock, ids[rng.Intn(len(ids))])
				if k, start, stop := engine.WindowAt(at, b.Cycle, 0); !start.Before(drain) && !stop.After(end) { // whole windows of the new config alone
					asked[k]++
					if d.Allowed {
						admitted[k]++
					}
				}
			}
			if n := watch.planResets.Load(); n > 0 {
				t.Errorf("%s: %d plans found unreadable", name, n)
			}
			if n := watch.jumps.Load(); n > 0 {
				t.Errorf("%s: %d clock jumps with exact clocks", name, n)
			}
			for k, n := range asked {
				if n > 0 && admitted[k] == 0 {
					t.Errorf("%s: window %d after the drain admitted none of %d requests", name, k, n)
				}
			}
		}()
	}
}

// A reload to a smaller table: the new config opens the next window while
// a worker of the old one, its clock a little behind, holds a client
// found in a bucket the new table does not have. It finds the client
// again in the new table; it must not index the old bucket in it.
func TestReloadShrinkingTheTableMidWindow(t *testing.T) {
	store := engine.NewMemStore()
	a := engine.Defaults(100, time.Second)
	a.MaxClients, a.Policy = 1000, engine.Fair{} // 64 buckets
	b := a
	b.MaxClients = 1 // one bucket
	old, fresh := newLimiterT(t, a, store, nil), newLimiterT(t, b, store, nil)
	const id = "client-b" // not in bucket 0 of the old table
	for i := 0; i < 5; i++ {
		old.AdmitAt(advEpoch.Add(time.Duration(100+i)*time.Millisecond), id)
	}
	if d := fresh.AdmitAt(advEpoch.Add(time.Second+time.Millisecond), id); !d.Allowed {
		t.Fatalf("the new config refused the client in the next window: %+v", d)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic: %v", r)
		}
	}()
	if d := old.AdmitAt(advEpoch.Add(time.Second-time.Millisecond), id); !d.Allowed {
		t.Errorf("the old config, 2 ms behind, refused the client: %+v", d)
	}
}

// newLimiterT is a limiter on store, observed by watch unless it is nil.
func newLimiterT(t *testing.T, cfg engine.Config, store engine.Store, watch *reloadWatch) *engine.Limiter {
	t.Helper()
	var opts []engine.Option
	if watch != nil {
		opts = append(opts, engine.WithObserver(watch))
	}
	l, err := engine.New(cfg, store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A worker of the old config re-plans the running window for a newcomer
// after a reload to a shorter cycle: the re-plan keeps the running
// window's index with its alignment, so every worker reads it.
func TestReplanOfTheOldConfigAfterACycleReload(t *testing.T) {
	store := engine.NewMemStore()
	watch := &reloadWatch{}
	a := engine.Defaults(100, 10*time.Second)
	a.MinCycle = time.Second
	b := engine.Defaults(100, time.Second)
	b.MinCycle = 100 * time.Millisecond
	old, fresh := newLimiterT(t, a, store, watch), newLimiterT(t, b, store, watch)
	start := time.Unix(1_700_000_000, 0) // a multiple of 10 s
	old.AdmitAt(start.Add(100*time.Millisecond), "c1")
	fresh.AdmitAt(start.Add(2*time.Second), "c1")    // the new config serves too
	d := old.AdmitAt(start.Add(3*time.Second), "c2") // a newcomer: the old config re-plans
	admitted := 0
	for i := 0; i < 200; i++ {
		at := start.Add(3*time.Second + time.Duration(i+1)*5*time.Millisecond)
		w := old
		if i%2 == 1 {
			w = fresh
		}
		if w.AdmitAt(at, "c2").Allowed {
			admitted++
		}
	}
	if n := watch.planResets.Load(); n > 0 {
		t.Errorf("%d plans found unreadable after the old config's re-plan (its first answer %+v)", n, d)
	}
	if admitted == 0 {
		t.Error("the newcomer was never admitted in the running window")
	}
}
