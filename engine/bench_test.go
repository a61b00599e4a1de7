package engine

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// Benchmarks. `make bench` runs them; docs/benchmarks.md reports the figures.
//
// The anchor is golang.org/x/time/rate's Limiter.AllowN, a well-known
// in-process limiter: the admission path of a Borrowcycle worker should cost
// about the same, since it too decides from local state on the common path.

// countingStore counts store operations, to report shared-data touches per
// admitted request.
type countingStore struct {
	Store
	ops  atomic.Int64 // gets and sets
	sets atomic.Int64
}

func (s *countingStore) Get(k string) ([]byte, uint32, error) { s.ops.Add(1); return s.Store.Get(k) }
func (s *countingStore) Set(k string, v []byte, c uint32) error {
	s.ops.Add(1)
	s.sets.Add(1)
	return s.Store.Set(k, v, c)
}

// benchConfig admits every request in the benchmark, so the hot path is the
// admission path, not rejection.
func benchConfig(clients int) Config {
	cfg := Defaults(1<<40, time.Hour)
	cfg.MaxClients = max(clients, 1)
	return cfg
}

// anchorLimiter never runs dry in a benchmark, without rate.Inf's shortcut.
func anchorLimiter() *rate.Limiter { return rate.NewLimiter(rate.Limit(1e12), 1<<30) }

// BenchmarkRateAllowN is the anchor: rate's explicit-time twin, like
// AdmitAt, so neither side reads the clock.
func BenchmarkRateAllowN(b *testing.B) {
	lim := anchorLimiter()
	now := t0
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		lim.AllowN(now, 1)
	}
}

// BenchmarkAdmit runs the seed policy (leases batched) and the fair one,
// whose leases are exact: one store round trip per admitted request, and
// paced, one more for the pace key.
func BenchmarkAdmit(b *testing.B) {
	for _, tc := range []struct {
		policy  Policy
		clients int
		paced   bool
	}{{nil, 1, false}, {nil, 100, false}, {Fair{}, 1, false}, {Fair{}, 100, false}, {Fair{}, 1, true}} {
		name := fmt.Sprintf("clients=%d", tc.clients)
		if tc.paced {
			name = "paced/" + name
		}
		if tc.policy != nil {
			name = tc.policy.Name() + "/" + name
		}
		clients := tc.clients
		b.Run(name, func(b *testing.B) {
			store := &countingStore{Store: NewMemStore()}
			cfg := benchConfig(clients)
			if tc.policy != nil {
				cfg.Policy = tc.policy
			}
			cfg.Pace, cfg.Burst = tc.paced, 1 // burst 1: the clock stands still here
			l, _ := New(cfg, store)
			ids := clientIDs(clients)
			if err := l.RegisterAt(t0, ids...); err != nil {
				b.Fatal(err)
			}
			now := t0.Add(time.Second)
			store.ops.Store(0)
			b.ReportAllocs()
			b.ResetTimer()
			admitted := 0
			for i := 0; i < b.N; i++ {
				if l.AdmitAt(now, ids[i%clients]).Allowed {
					admitted++
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(store.ops.Load())/float64(max(admitted, 1)), "store-ops/admit")
		})
	}
}

// BenchmarkAdmitVsRate times both limiters in one run and reports the
// ratio, so the figure does not depend on comparing separate runs.
func BenchmarkAdmitVsRate(b *testing.B) {
	lim := anchorLimiter()
	l, _ := New(benchConfig(1), NewMemStore())
	now := t0.Add(time.Second)
	l.AdmitAt(now, "c")
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		lim.AllowN(now, 1)
	}
	rateTime := time.Since(start)
	start = time.Now()
	for i := 0; i < b.N; i++ {
		l.AdmitAt(now, "c")
	}
	admitTime := time.Since(start)
	b.ReportMetric(float64(admitTime)/float64(max(rateTime, 1)), "x-rate.AllowN")
}

// BenchmarkWorkers is ns per decision with W workers (goroutines, each with
// its own Limiter) over one shared store, and store operations per admitted
// request: the cost of keeping one limit for the whole process.
func BenchmarkWorkers(b *testing.B) {
	for _, w := range []int{1, 4} {
		b.Run(fmt.Sprintf("W=%d", w), func(b *testing.B) {
			const clients = 16
			store := &countingStore{Store: NewMemStore()}
			cfg := benchConfig(clients)
			cfg.Capacity = 1 << 30
			ids := clientIDs(clients)
			workers := make([]*Limiter, w)
			for i := range workers {
				workers[i], _ = New(cfg, store)
			}
			if err := workers[0].RegisterAt(t0, ids...); err != nil {
				b.Fatal(err)
			}
			now := t0.Add(time.Second)
			store.ops.Store(0)
			var admitted atomic.Int64
			per := b.N / w
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for i := range workers {
				wg.Add(1)
				go func(l *Limiter, offset int) {
					defer wg.Done()
					n := int64(0)
					for j := 0; j < per; j++ {
						if l.AdmitAt(now, ids[(j+offset)%clients]).Allowed {
							n++
						}
					}
					admitted.Add(n)
				}(workers[i], i)
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(store.ops.Load())/float64(max(admitted.Load(), 1)), "store-ops/admit")
		})
	}
}

// BenchmarkRollover is the cost of planning a new window with n clients
// counted, on one worker: the tick that rolls (a provisional plan over a
// table larger than planInPlaceMax), then the slices PlanAt reads, one
// every PlanTick, until the plan read over every client is published.
// ms/plan is all of it; max-ms/callback the longest single call, the
// stall a worker's requests may see.
func BenchmarkRollover(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			cfg := Defaults(1_000_000, time.Second)
			cfg.MaxClients = n
			cfg.IdleCycles = MaxIdleCycles // idle but counted: every plan reads them all
			store := NewMemStore()
			l, err := New(cfg, store)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.RegisterAt(t0, clientIDs(n)...); err != nil {
				b.Fatal(err)
			}
			if got := l.ActiveClients(); got != n {
				b.Fatalf("%d clients counted, want %d", got, n)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			var longest time.Duration
			timed := func(call func()) {
				start := time.Now()
				call()
				longest = max(longest, time.Since(start))
			}
			callbacks := 0
			for i := 0; i < b.N; i++ {
				at := t0.Add(time.Duration(i+1) * cfg.Cycle)
				window := l.view.plan.window
				timed(func() { l.TickAt(at) })
				callbacks++
				for l.view.plan.provisional {
					at = at.Add(PlanTick)
					timed(func() { l.PlanAt(at) })
					callbacks++
				}
				if l.view.plan.window != window+1 || l.view.plan.provisional {
					b.Fatalf("tick %d made no plan", i)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/plan")
			b.ReportMetric(float64(longest.Nanoseconds())/1e6, "max-ms/callback")
			b.ReportMetric(float64(callbacks)/float64(b.N), "callbacks/plan")
			if used := processCPU() - cpu; used > 0 { // 0 where the platform cannot tell (wasip1)
				b.ReportMetric(float64(used)/float64(b.N)/1e6, "cpu-ms/op")
			}
		})
	}
}

func clientIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "client-" + strconv.Itoa(i)
	}
	return ids
}
