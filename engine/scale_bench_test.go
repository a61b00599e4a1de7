package engine

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkScale is the shape of bench-envoy's scale rows in the engine:
// n registered clients, each id repeating in rotation, at 30,000 requests
// per second of virtual time on one worker, with a tick every
// housekeeping period (cycle/10, at most 1 s) and, while the worker asks
// for them (Planning), a PlanAt every PlanTick, as a host does. Capacity is unlimited, so
// every request is admitted. It reports store operations per request and
// the slowest request and tick (the one that plans a window is among
// them): the stall a request queued behind it would see.
func BenchmarkScale(b *testing.B) {
	for _, tc := range []struct {
		clients int
		cycle   time.Duration
	}{{50, 10 * time.Second}, {10_000, 10 * time.Second}, {100_000, 10 * time.Second}, {10_000, time.Second}} {
		b.Run(fmt.Sprintf("clients=%d/cycle=%s", tc.clients, tc.cycle), func(b *testing.B) {
			cfg := Defaults(1<<40, tc.cycle)
			cfg.MaxClients = tc.clients
			store := &countingStore{Store: NewMemStore()}
			l, err := New(cfg, store)
			if err != nil {
				b.Fatal(err)
			}
			ids := clientIDs(tc.clients)
			if err := l.RegisterAt(t0, ids...); err != nil {
				b.Fatal(err)
			}
			const step = time.Second / 30_000
			tick := min(tc.cycle/10, time.Second)
			now := t0.Add(time.Second)
			nextTick, nextPlan := now.Add(tick), now
			// Warm up for two windows, so that every client is counted and
			// has asked in the window before.
			for i := 0; now.Before(t0.Add(2*tc.cycle + time.Second)); i++ {
				now = now.Add(step)
				l.AdmitAt(now, ids[i%len(ids)])
				if !now.Before(nextTick) {
					l.TickAt(now)
					nextTick = nextTick.Add(tick)
				}
				if l.Planning() && !now.Before(nextPlan) {
					l.PlanAt(now)
					nextPlan = now.Add(PlanTick)
				}
			}
			store.ops.Store(0)
			var slowest, slowestTick time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now = now.Add(step)
				start := time.Now()
				if !l.AdmitAt(now, ids[i%len(ids)]).Allowed {
					b.Fatalf("request %d refused", i)
				}
				slowest = max(slowest, time.Since(start))
				if !now.Before(nextTick) {
					start := time.Now()
					l.TickAt(now)
					slowestTick = max(slowestTick, time.Since(start))
					nextTick = nextTick.Add(tick)
				}
				if l.Planning() && !now.Before(nextPlan) {
					start := time.Now()
					l.PlanAt(now)
					slowestTick = max(slowestTick, time.Since(start))
					nextPlan = now.Add(PlanTick)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(store.ops.Load())/float64(b.N), "store-ops/req")
			b.ReportMetric(float64(slowest.Microseconds())/1000, "slowest-req-ms")
			b.ReportMetric(float64(slowestTick.Microseconds())/1000, "slowest-tick-ms")
		})
	}
}
