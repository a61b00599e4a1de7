package engine

import (
	"fmt"
	"testing"
	"time"
)

// Clients far below their share (roomy) cost a worker fewer store
// operations: a chunk lease serves all their requests in a window, an
// unused chunk stays across ticks, and their demand is written by the
// closing writes, a bucket at a time, so the next plan still reads it
// exactly.
func TestRoomyClientsCostFewerStoreOps(t *testing.T) {
	for _, w := range []int{1, 2} {
		t.Run(fmt.Sprintf("W=%d", w), func(t *testing.T) {
			const clients, asks = 1000, 3
			workers, store, ids, start, cfg := lateDemandSetup(t, w, clients)
			store.ops.Store(0)
			// Each client asks asks times, spread over the window, each
			// time on the next worker; every worker ticks each second.
			const ticks = 10
			n := 0
			for tick := 0; tick < ticks; tick++ {
				for i := tick * clients * asks / ticks; i < (tick+1)*clients*asks/ticks; i++ {
					at := start.Add(time.Duration(i) * cfg.Cycle / (clients * asks))
					if d := workers[(i/clients)%w].AdmitAt(at, ids[i%clients]); !d.Allowed {
						t.Fatalf("request %d of %s refused: %+v", i/clients, ids[i%clients], d)
					}
					n++
				}
				for _, l := range workers {
					l.TickAt(start.Add(time.Duration(tick+1)*time.Second - time.Millisecond))
				}
			}
			perRequest := float64(store.ops.Load()) / float64(n)
			t.Logf("W=%d: %.2f store operations per request", w, perRequest)
			// A chunk is three operations for the window on each worker (a
			// bucket's get and set, and a plan read), and the budget's get
			// and set once per 32 chunks (the pool); the later requests
			// there write nothing until the window's last eighth: 1.1 a
			// request on one worker, 2.1 on two, and the closing writes
			// (two for each of 64 buckets), the late requests written at
			// once, the ticks and the plans. (Each request writing its
			// demand, and a chunk its budget, was 3.0 on one worker, 4.0
			// on two.)
			if most := float64(3*w)/asks + 0.5; perRequest > most {
				t.Errorf("%.2f store operations per request of a roomy client, want at most %.2f", perRequest, most)
			}
			for i, l := range workers {
				if len(l.view.dirty) != 0 {
					t.Errorf("worker %d: %d clients in the tick list after a tick, holding chunks and no demand to write", i, len(l.view.dirty))
				}
			}
			for _, id := range ids {
				_, e, found, err := workers[0].view.find(HashID(id))
				if err != nil || !found {
					t.Fatalf("%s: no entry (%v)", id, err)
				}
				if e.demand != asks {
					t.Fatalf("%s: demand written %d after the last tick, asked %d", id, e.demand, asks)
				}
			}
		})
	}
}

// A chunk a worker keeps for a roomy client strands at most that chunk
// when the client's traffic moves to another worker and uses up its share:
// the client is admitted its share less one chunk per worker it left. A
// client that used its share in the last window is not roomy: it loses
// nothing.
func TestKeptChunksStrandAtMostAChunkPerWorker(t *testing.T) {
	const w = 4
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busy=%v", busy), func(t *testing.T) {
			cfg := Defaults(8*leaseDivisor*leaseChunk, 10*time.Second)
			store := NewMemStore()
			workers := newWorkers(t, w, cfg, func() Store { return store })
			if err := workers[0].RegisterAt(t0, "a", "b", "c", "d"); err != nil {
				t.Fatal(err)
			}
			last := workers[w-1]
			if busy {
				send(last, t0.Add(time.Second), "a", int(cfg.Capacity))
			}
			start := t0.Add(cfg.Cycle)
			share := int64(0)
			// The client asks once on every worker, then only on the last
			// one, every worker ticking between requests, until refused.
			for i, l := range workers {
				d := l.AdmitAt(start.Add(time.Duration(i)*time.Millisecond), "a")
				if !d.Allowed {
					t.Fatalf("first request on worker %d refused: %+v", i, d)
				}
				share = d.Limit
			}
			if share < leaseDivisor*leaseChunk {
				t.Fatalf("share %d: the client is not roomy", share)
			}
			admitted := int64(w)
			for i := 0; i < int(share)*2; i++ {
				at := start.Add(time.Second + time.Duration(i)*time.Millisecond)
				for _, l := range workers {
					l.TickAt(at)
				}
				if !last.AdmitAt(at, "a").Allowed {
					break
				}
				admitted++
			}
			floor := share - (w-1)*leaseChunk
			if busy {
				floor = share
			}
			if admitted < floor || admitted > share {
				t.Fatalf("admitted %d of a share of %d, want at least %d", admitted, share, floor)
			}
			t.Logf("admitted %d of a share of %d with %d workers", admitted, share, w)
		})
	}
}

// A lease that is not a chunk goes back to the window budget on the next
// tick when unused, as before: under the fair policy and pacing, whose
// leases are exact, a refunded unit is not kept.
func TestRefundedUnitsAreReturnedWhereLeasesAreExact(t *testing.T) {
	for _, mode := range []string{"fair", "paced"} {
		t.Run(mode, func(t *testing.T) {
			cfg := Defaults(100_000, 10*time.Second)
			if mode == "fair" {
				cfg.MinCycle, cfg.Policy = time.Second, Fair{}
			} else {
				cfg.Pace, cfg.Burst = true, 1
			}
			l := newLimiter(t, cfg, NewMemStore())
			if err := l.RegisterAt(t0, "a", "b"); err != nil {
				t.Fatal(err)
			}
			start := t0.Add(cfg.Cycle)
			l.TickAt(start)
			if d := l.AdmitAt(start.Add(time.Millisecond), "a"); !d.Allowed {
				t.Fatalf("%+v", d)
			}
			l.Refund("a", 1)
			l.TickAt(start.Add(time.Second))
			l.TickAt(start.Add(2 * time.Second))
			if g := l.view.grantedIn(l.view.plan.window); g != 0 {
				t.Errorf("a refunded unit, unused, is still granted after two ticks: %d", g)
			}
		})
	}
}
