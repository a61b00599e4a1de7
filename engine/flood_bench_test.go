package engine

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkDistinctIDs is the hostile shape: a stream of ever-new ids
// (100k distinct) mixed with a steady client, at 1 ms per request of
// virtual time, with the default table of 1000 clients.
func BenchmarkDistinctIDs(b *testing.B) {
	cfg := Defaults(1000, 10*time.Second)
	l, _ := New(cfg, NewMemStore())
	ids := make([]string, 100000)
	for i := range ids {
		ids[i] = "id-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		if i%2 == 0 {
			l.AdmitAt(now, "steady")
		} else {
			l.AdmitAt(now, ids[(i/2)%len(ids)])
		}
	}
}
