package engine

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// aheadWindow has every client ask asks times in the window from start on
// worker l, in turn, and then lets the closing writes run as a host would
// (PlanAt every PlanTick while Planning). It reports how many requests made
// a store operation.
func aheadWindow(t *testing.T, l *Limiter, store *countingStore, ids []string, asks int, start time.Time, cfg Config) (withOps int) {
	t.Helper()
	for a := 0; a < asks; a++ {
		for i, id := range ids {
			at := start.Add(time.Duration(a)*2*time.Second + time.Duration(i)*time.Microsecond)
			before := store.ops.Load()
			if d := l.AdmitAt(at, id); !d.Allowed {
				t.Fatalf("%s refused: %+v", id, d)
			}
			if store.ops.Load() != before {
				withOps++
			}
		}
	}
	closing := start.Add(cfg.Cycle - cfg.Cycle/closingDivisor)
	l.TickAt(closing)
	for at := closing.Add(PlanTick); l.Planning(); at = at.Add(PlanTick) {
		l.PlanAt(at)
	}
	return withOps
}

// A client that asked on a worker in the window before gets its lease of
// the new window in the write of the first of its bucket's clients to ask:
// its own first request then makes no store operation. Its demand is still
// written, by the closing writes.
func TestLeasesAheadSpareAClientsFirstRequest(t *testing.T) {
	const clients, asks = 4000, 2
	workers, store, ids, start, cfg := lateDemandSetup(t, 1, clients)
	l := workers[0]
	aheadWindow(t, l, store, ids, asks, start, cfg)
	next := start.Add(cfg.Cycle)
	withOps := aheadWindow(t, l, store, ids, asks, next, cfg)
	// One write per bucket, and one for the pool now and then, against one
	// per client without leases ahead.
	if buckets := l.view.nb; withOps > 2*buckets {
		t.Errorf("%d of %d clients' requests made store operations in their second window, want at most %d (twice the %d buckets)", withOps, clients, 2*buckets, buckets)
	}
	for _, id := range ids {
		if e := entryOf(t, l, id); e.demand != asks {
			t.Fatalf("%s: demand %d in its entry, asked %d", id, e.demand, asks)
		}
	}
}

// A client that did not ask in the window before gets no lease ahead: its
// entry is left as it was when its bucket is written for another client.
// (It asked in the first window, so the second leased it ahead; it did not
// use that lease.)
func TestNoLeaseAheadForAQuietClient(t *testing.T) {
	workers, store, ids, start, cfg := lateDemandSetup(t, 1, 64)
	l := workers[0]
	aheadWindow(t, l, store, ids, 1, start, cfg)
	quiet, others := ids[0], ids[1:]
	next := start.Add(cfg.Cycle)
	aheadWindow(t, l, store, others, 1, next, cfg)
	before := entryOf(t, l, quiet)
	aheadWindow(t, l, store, others, 1, next.Add(cfg.Cycle), cfg)
	if after := entryOf(t, l, quiet); after != before {
		t.Fatalf("the quiet client's entry changed from %+v to %+v", before, after)
	}
}

// Workers that lease ahead, each for the clients it saw, keep both
// invariants while the clients move between workers at random, a few of
// them asking far more than their share: no client admits more than its
// entry granted it in the window, and the light clients, whose leases
// ahead sit on workers they may not come back to, are refused nothing.
// (Run with -race: the workers share the store concurrently.)
func TestLeasesAheadKeepBothInvariants(t *testing.T) {
	const w, clients, heavy = 8, 3000, 10
	cfg := Defaults(clients*300, 10*time.Second)
	cfg.MaxClients = clients
	store := NewMemStore()
	workers := newWorkers(t, w, cfg, func() Store { return store })
	ids := clientIDs(clients)
	if err := workers[0].RegisterAt(t0, ids...); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	var outs []outcome
	for k := 1; k <= 4; k++ {
		start := t0.Add(time.Duration(k) * cfg.Cycle)
		from := len(outs)
		for step := 0; step < 4; step++ {
			at := start.Add(time.Duration(step) * cfg.Cycle / 4)
			demand := map[string]int{}
			for i, id := range ids {
				switch {
				case i < heavy:
					demand[id] = 200
				case rng.IntN(3) > 0:
					demand[id] = 1 + rng.IntN(3)
				}
			}
			outs = append(outs, runCycle(workers, spread(rng, demand, w), at)...)
			tick := at.Add(time.Second)
			for _, l := range workers {
				l.TickAt(tick)
				for at := tick.Add(PlanTick); l.Planning(); at = at.Add(PlanTick) {
					l.PlanAt(at)
				}
			}
		}
		// Every unit admitted was granted in its client's entry: a lease
		// ahead is units the entry counts, not more.
		admitted := map[string]int64{}
		for _, o := range outs[from:] {
			if o.d.Allowed {
				admitted[o.client]++
			}
		}
		window, _, _ := WindowAt(start, cfg.Cycle, cfg.WindowOffset)
		for id, n := range admitted {
			if e := entryOf(t, workers[0], id); e.window != window || e.granted < n {
				t.Fatalf("window %d: %s admitted %d, its entry of window %d granted %d", k, id, n, e.window, e.granted)
			}
		}
	}
	checkOutcomes(t, cfg, outs)
	for _, o := range outs {
		if !o.d.Allowed && !slices.Contains(ids[:heavy], o.client) {
			t.Fatalf("light client %s refused at %v: %+v", o.client, o.at.Sub(t0), o.d)
		}
	}
}
