package wasmhost

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// BenchmarkScale runs the compiled plugin on scaleVMs VMs with 1k, 10k and
// 100k registered clients (max_clients set to that number, so the table is
// full) and measures what the newcomer rules bound:
//
//	known     a request from a registered client, rotating over all of them
//	newcomer  a request from an id never seen before (the table is full, so
//	          it is refused as table_full, or pending)
//	rollover  the plan of a new window: a tick of every VM, then the ticks
//	          of the VM that reads the plan in slices, every PlanTick,
//	          until it is read; max-ms/callback is the longest tick in
//	          wall time, max-cpu-ms/callback the longest in the CPU time of
//	          the thread that ran it (on Linux), and over-1ms-cpu the ticks
//	          over 1 ms of it per rollover: a virtual machine's wall time
//	          includes the hypervisor's other tenants (steal)
//
// known and newcomer time the same requests through the no-op module in the
// same run and report plugin/noop; a rollover has no no-op counterpart, so
// it reports its own time. Setting a host up registers every client through
// the newcomer path, once per client count. Keep the default -benchtime
// (1s): a fixed count such as 2000x asks for 2000 rollovers, which at
// O(clients) per rollover can take many minutes.
//
//	go test ./tools/wasmhost -run '^$' -bench BenchmarkScale
//	go test ./tools/wasmhost -run '^$' -bench 'BenchmarkScale/clients=10000$'
//
// A client count the plugin refuses as max_clients fails the benchmark with
// the plugin's error: it is a missing capability, not a skipped case.
func BenchmarkScale(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			h := scaleHost(b, n)
			noop := newHost(b, noopWasm, Options{VMs: scaleVMs})
			b.Run("known", func(b *testing.B) {
				benchOverNoop(b, h, noop, func(i int) [][2]string { return Request("/", scaleID(i%n)) })
			})
			next := 0 // ids stay unseen across the runs the testing package repeats with growing b.N
			b.Run("newcomer", func(b *testing.B) {
				base := next
				next += b.N
				refused := scaleRefusals(h)
				benchOverNoop(b, h, noop, func(i int) [][2]string { return Request("/", "never-"+strconv.Itoa(base+i)) })
				flushMetrics(b, h)
				if got := scaleRefusals(h) - refused; got != int64(b.N) {
					b.Fatalf("%d never-seen ids with the table full: %d refused as table_full or pending", b.N, got)
				}
			})
			b.Run("rollover", func(b *testing.B) {
				before := h.Metric(scalePrefix + "rollovers.deadline")
				normal := uint32(0) // (the filter's period: a VM reading a plan ticks faster)
				for i := range scaleVMs {
					normal = max(normal, h.VM(i).TickPeriod())
				}
				// (Locked, so that the thread's CPU time is the callbacks'.)
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var longest, longestCPU time.Duration
				callbacks, overCPU := 0, 0
				tick := func(i int) {
					c0, cpu := threadCPU()
					start := time.Now()
					if err := h.Tick(i); err != nil {
						b.Fatal(err)
					}
					longest = max(longest, time.Since(start))
					if c1, _ := threadCPU(); cpu {
						longestCPU = max(longestCPU, c1-c0)
						if c1-c0 > time.Millisecond {
							overCPU++
						}
					}
					callbacks++
				}
				b.ResetTimer()
				var reading time.Duration // the slices' ticks since the window opened
				for range b.N {
					h.Clock().Advance(scaleCycle - reading) // (each rollover at its window's start)
					reading = 0
					for i := range scaleVMs {
						tick(i)
					}
					// A VM that reads the plan in slices ticks every
					// engine.PlanTick until it is read.
					for rounds := 0; ; rounds++ {
						planning := false
						for i := range scaleVMs {
							if h.VM(i).TickPeriod() != normal {
								planning = true
								tick(i)
							}
						}
						if !planning {
							break
						}
						if rounds > 100_000 {
							b.Fatal("a plan still read in slices after 100,000 rounds")
						}
						h.Clock().Advance(engine.PlanTick)
						reading += engine.PlanTick
					}
				}
				b.StopTimer()
				flushMetrics(b, h)
				if got := h.Metric(scalePrefix + "rollovers.deadline"); got-before != int64(b.N) {
					b.Fatalf("%d ticks past a deadline made %d rollovers", b.N, got-before)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/rollover")
				b.ReportMetric(float64(longest.Nanoseconds())/1e6, "max-ms/callback")
				b.ReportMetric(float64(callbacks)/float64(b.N), "callbacks/rollover")
				if _, ok := threadCPU(); ok {
					b.ReportMetric(float64(longestCPU.Nanoseconds())/1e6, "max-cpu-ms/callback")
					b.ReportMetric(float64(overCPU)/float64(b.N), "over-1ms-cpu/rollover")
				}
			})
		})
	}
}

const (
	scaleVMs    = 4
	scaleCycle  = 10 * time.Second
	scalePrefix = "borrowcycle.default."
)

func scaleID(i int) string { return "client-" + strconv.Itoa(i) }

// flushMetrics ticks every VM without moving the clock: the plugin counts in
// the VM and hands its counters to the host on tick.
func flushMetrics(b *testing.B, h *Host) {
	b.Helper()
	if err := h.TickAll(); err != nil {
		b.Fatal(err)
	}
}

// scaleRefusals counts the requests refused as newcomers so far.
func scaleRefusals(h *Host) int64 {
	return h.Metric(scalePrefix+"requests_rejected.table_full") + h.Metric(scalePrefix+"requests_rejected.pending")
}

// scaleHost starts the plugin with max_clients n and registers n clients,
// sending a request from every client not yet admitted, then letting
// min_cycle pass so the re-plan that registers the newcomers can happen,
// until all are admitted. idle_cycles is high so that the rollover
// benchmark's windows without requests forget nobody.
func scaleHost(b testing.TB, n int) *Host { return scaleHostWithin(b, n, 20) }

// scaleHostWithin is scaleHost, failing when a client is still not
// admitted after passes rounds of requests.
func scaleHostWithin(b testing.TB, n, passes int) *Host {
	b.Helper()
	raw, err := json.Marshal(map[string]any{"capacity": 1 << 40, "cycle": scaleCycle.String(),
		"min_cycle": "100ms", "max_clients": n, "idle_cycles": 10_000})
	if err != nil {
		b.Fatal(err)
	}
	h, err := New(context.Background(), loadModule(b, pluginWasm), Options{VMs: scaleVMs, PluginConfig: raw})
	if err != nil {
		b.Fatalf("the plugin refuses max_clients %d, so %d clients cannot be measured: %v", n, n, err)
	}
	b.Cleanup(func() { h.Close(context.Background()) })
	waiting := make([]int, n)
	for i := range waiting {
		waiting[i] = i
	}
	for pass := 0; len(waiting) > 0; pass++ {
		if pass == passes {
			b.Fatalf("%d of %d clients still not admitted after %d passes", len(waiting), n, pass)
		}
		admitted := make([]bool, len(waiting))
		h.Drive(len(waiting), RoundRobin(scaleVMs), func(i int) [][2]string { return Request("/", scaleID(waiting[i])) },
			func(i int, r Result) {
				if r.Err != nil {
					b.Errorf("register %s: %v", scaleID(waiting[i]), r.Err)
				}
				admitted[i] = r.Continued()
			})
		var left []int
		for i, ok := range admitted {
			if !ok {
				left = append(left, waiting[i])
			}
		}
		waiting = left
		h.Clock().Advance(200 * time.Millisecond)
		if err := h.TickAll(); err != nil {
			b.Fatal(err)
		}
	}
	if got := h.Metric(scalePrefix + "clients_active"); got != int64(n) {
		b.Logf("clients_active gauge %d after registering %d", got, n)
	}
	return h
}

// benchOverNoop times b.N requests through the plugin host, then the same
// requests through the no-op host, and reports both and their ratio.
func benchOverNoop(b *testing.B, plugin, noop *Host, req func(i int) [][2]string) {
	b.Helper()
	reqs := make([][][2]string, b.N)
	for i := range reqs {
		reqs[i] = req(i)
	}
	get := func(i int) [][2]string { return reqs[i] }
	b.ResetTimer()
	start := time.Now()
	plugin.Drive(b.N, RoundRobin(scaleVMs), get, nil)
	tPlugin := time.Since(start)
	b.StopTimer()
	start = time.Now()
	noop.Drive(b.N, RoundRobin(scaleVMs), get, nil)
	tNoop := time.Since(start)
	b.ReportMetric(float64(tPlugin.Nanoseconds())/float64(b.N), "plugin-ns/req")
	b.ReportMetric(float64(tNoop.Nanoseconds())/float64(b.N), "noop-ns/req")
	b.ReportMetric(float64(tPlugin)/float64(tNoop), "plugin/noop")
}
