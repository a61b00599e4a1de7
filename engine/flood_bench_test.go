package engine

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkDistinctIDs is the hostile shape: a stream of ever-new ids
// (100k distinct, one request each) against a table of 10,000, mixed with
// requests of a known client, at 10 µs per request of virtual time. It
// times both kinds in the same run, in alternating batches, and reports
// the cost of a flood request and of a known-client request, and their
// ratio: the flood must not slow the known client down, and must itself
// cost O(1).
func BenchmarkDistinctIDs(b *testing.B) {
	cfg := Defaults(1_000_000, time.Second)
	cfg.MaxClients = 10000
	store := &countingStore{Store: NewMemStore()}
	l, _ := New(cfg, store)
	if err := l.RegisterAt(t0, "steady"); err != nil {
		b.Fatal(err)
	}
	ids := make([]string, 100000)
	for i := range ids {
		ids[i] = "id-" + strconv.Itoa(i)
	}
	const batch = 256
	var known, flood time.Duration
	var nKnown, nFlood, floodOps int64
	now := t0.Add(time.Second)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 2 * batch {
		start := time.Now()
		for j := 0; j < batch; j++ {
			now = now.Add(10 * time.Microsecond)
			l.AdmitAt(now, "steady")
		}
		known += time.Since(start)
		nKnown += batch
		ops := store.ops.Load()
		start = time.Now()
		for j := 0; j < batch; j++ {
			now = now.Add(10 * time.Microsecond)
			l.AdmitAt(now, ids[(i/2+j)%len(ids)])
		}
		flood += time.Since(start)
		floodOps += store.ops.Load() - ops
		nFlood += batch
	}
	b.StopTimer()
	b.ReportMetric(float64(known)/float64(nKnown), "ns/known")
	b.ReportMetric(float64(flood)/float64(nFlood), "ns/flood")
	b.ReportMetric(float64(floodOps)/float64(nFlood), "store-ops/flood")
	b.ReportMetric(float64(l.ActiveClients()), "counted")
}
