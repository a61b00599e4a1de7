package wasmhost

import (
	"fmt"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// BenchmarkSteady is bench-envoy's scale rows in the wazero host, without
// Envoy's noise: n registered clients on scaleVMs VMs, each id asking in
// turn at 40,000 requests per second of the host's clock, every VM ticked
// each housekeeping period and, while it asks for them (Planning), every
// engine.PlanTick. It runs two windows, then times the next two: ns/op is
// a request's cost there, ticks included, and at 10k and 100k clients is
// to be read against the 50-client row of the same run.
//
//	go test ./tools/wasmhost -run '^$' -bench BenchmarkSteady -benchtime 1x
//
// (Each run times 800,000 requests whatever b.N is: keep -benchtime 1x.)
func BenchmarkSteady(b *testing.B) {
	for _, n := range []int{50, 10_000, 100_000} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			h := scaleHost(b, n)
			normal := h.VM(0).TickPeriod()
			k := 0
			// drive sends d of the clock's worth of requests, in batches
			// of step, ticking as a host would between them.
			drive := func(d time.Duration) int {
				const batch = 1000
				step := 25 * time.Millisecond // a batch at 40,000 per second
				next := h.Clock().Now().Add(time.Duration(normal) * time.Millisecond)
				sent := 0
				for el := time.Duration(0); el < d; el += step {
					h.Drive(batch, RoundRobin(scaleVMs), func(i int) [][2]string { return Request("/", scaleID((k+i)%n)) }, nil)
					k += batch
					sent += batch
					for range step / engine.PlanTick {
						h.Clock().Advance(engine.PlanTick)
						for i := range scaleVMs {
							if h.VM(i).TickPeriod() != normal {
								if err := h.Tick(i); err != nil {
									b.Fatal(err)
								}
							}
						}
					}
					if !h.Clock().Now().Before(next) {
						if err := h.TickAll(); err != nil {
							b.Fatal(err)
						}
						next = next.Add(time.Duration(normal) * time.Millisecond)
					}
				}
				return sent
			}
			drive(2 * scaleCycle)
			b.ResetTimer()
			sent := 0
			for range b.N {
				sent += drive(2 * scaleCycle)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(sent), "ns/req")
		})
	}
}
