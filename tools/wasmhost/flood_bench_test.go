package wasmhost

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkFlood is bench-envoy's flood variant without Envoy: ids from a
// set of 100,000, each seen once in a while, against max_clients 10,000,
// beside the 50 known clients of the other benchmarks. It times flood
// requests and known-client requests in alternating slices through the same
// VMs, with the clock moving 100 µs per request (10,000 req/s) and every VM
// ticking each 100 ms of it, as in a loaded Envoy, and reports the cost of a
// flood request over a known client's ("flood/known", in CPU time). The
// target is a flood at ≥ 0.8 of the known clients' throughput, that is
// flood/known ≤ 1.25; the figure that counts is bench-envoy's, this one
// catches a change that makes a newcomer dearer.
//
//	go test ./tools/wasmhost -run '^$' -bench BenchmarkFlood
func BenchmarkFlood(b *testing.B) {
	for _, vms := range []int{1, 4} {
		b.Run(strconv.Itoa(vms)+"vm", func(b *testing.B) {
			v := benchVariant{"flood", map[string]any{"capacity": 1 << 40, "cycle": "10s", "min_cycle": "1s", "max_clients": floodTable}, true}
			h := warmHost(b, pluginWasm, vms, v)
			known := benchRequests()
			next := 0
			flood := func(int) [][2]string {
				next++
				return Request("/bench", "flood-"+strconv.Itoa(next%floodIDs))
			}
			// One pass over the flood's ids first, so that the timed part
			// meets a table in its steady state, not an empty one.
			driveFlood(b, h, floodIDs, flood)
			var tKnown, tFlood cost
			b.ResetTimer()
			const slices = 10
			for i := 0; i < slices; i++ {
				n := b.N/slices + boolInt(i < b.N%slices)
				tKnown = tKnown.plus(measureDriven(b, h, n, func(i int) [][2]string { return known[i%len(known)] }))
				tFlood = tFlood.plus(measureDriven(b, h, n, flood))
			}
			b.StopTimer()
			b.ReportMetric(float64(tKnown.cpu.Nanoseconds())/float64(b.N), "known-cpu-ns/req")
			b.ReportMetric(float64(tFlood.cpu.Nanoseconds())/float64(b.N), "flood-cpu-ns/req")
			b.ReportMetric(float64(tFlood.cpu)/float64(tKnown.cpu), "flood/known")
		})
	}
}

const (
	floodIDs   = 100_000
	floodTable = 10_000
	// floodStep is the virtual time between requests, and floodTickEvery
	// the requests between ticks of every VM (100 ms at floodStep).
	floodStep      = 100 * time.Microsecond
	floodTickEvery = 1000
)

// measureDriven drives n requests with the clock moving as in driveFlood
// and returns their cost.
func measureDriven(b *testing.B, h *Host, n int, req func(i int) [][2]string) cost {
	w0, c0 := time.Now(), processCPU()
	driveFlood(b, h, n, req)
	return cost{wall: time.Since(w0), cpu: processCPU() - c0}
}

// driveFlood sends n requests round-robin over the VMs in chunks of
// floodTickEvery, moving the clock floodStep per request and ticking every
// VM after each chunk.
func driveFlood(b *testing.B, h *Host, n int, req func(i int) [][2]string) {
	for sent := 0; sent < n; {
		k := min(floodTickEvery, n-sent)
		h.Drive(k, RoundRobin(h.VMs()), req, nil)
		sent += k
		h.Clock().Advance(time.Duration(k) * floodStep)
		if err := h.TickAll(); err != nil {
			b.Fatal(err)
		}
	}
}
