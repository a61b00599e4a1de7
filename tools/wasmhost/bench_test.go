package wasmhost

import (
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// Benchmarks (see README for the commands):
//
//	BenchmarkRequests        requests/s through 1 and 4 VMs, noop and plugin
//	BenchmarkPluginOverNoop  the same, both modules in one run, with the ratio
//	BenchmarkMemory          linear memory per VM after -wasmhost.requests
//	                         requests over -wasmhost.ids distinct client ids

var (
	memRequests = flag.Int("wasmhost.requests", 1_000_000, "requests sent by BenchmarkMemory")
	memIDs      = flag.Int("wasmhost.ids", 100_000, "distinct client ids in BenchmarkMemory")
)

// benchClients is how many client ids the throughput benchmarks rotate.
const benchClients = 100

// benchConfig never rejects a registered client: the benchmarks measure the
// admitted path, which is most of a healthy proxy's traffic.
func benchConfig(module string) []byte {
	if module == noopWasm {
		return nil
	}
	raw, _ := json.Marshal(map[string]any{"capacity": 1 << 40, "cycle": "1s", "min_cycle": "100ms"})
	return raw
}

func benchRequests() [][][2]string {
	reqs := make([][][2]string, benchClients)
	for i := range reqs {
		reqs[i] = Request("/bench", "client-"+strconv.Itoa(i))
	}
	return reqs
}

// warmHost starts a host and registers every benchmark client, moving the
// clock past the newcomers' minimum cycle so none is pending.
func warmHost(b *testing.B, module string, vms int) *Host {
	h := newHost(b, module, Options{VMs: vms, PluginConfig: benchConfig(module)})
	reqs := benchRequests()
	for round := 0; round < 3; round++ {
		h.DriveAll(reqs, RoundRobin(vms))
		h.Clock().Advance(200 * time.Millisecond)
		if err := h.TickAll(); err != nil {
			b.Fatal(err)
		}
	}
	for _, r := range h.DriveAll(reqs, RoundRobin(vms)) {
		if !r.Continued() {
			b.Fatalf("warm-up left a client rejected: %v", r)
		}
	}
	return h
}

// driveTimed sends n requests through h and returns the wall time taken.
func driveTimed(h *Host, n int) time.Duration {
	reqs := benchRequests()
	start := time.Now()
	h.Drive(n, RoundRobin(h.VMs()), func(i int) [][2]string { return reqs[i%len(reqs)] }, nil)
	return time.Since(start)
}

func BenchmarkRequests(b *testing.B) {
	for _, module := range []string{noopWasm, pluginWasm} {
		for _, vms := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/%dvm", module, vms), func(b *testing.B) {
				h := warmHost(b, module, vms)
				b.ReportAllocs()
				b.ResetTimer()
				elapsed := driveTimed(h, b.N)
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
			})
		}
	}
}

// BenchmarkPluginOverNoop times the same number of requests through the
// noop and the plugin, one after the other in one process, and reports the
// plugin's cost as a multiple of the noop's.
func BenchmarkPluginOverNoop(b *testing.B) {
	for _, vms := range []int{1, 4} {
		b.Run(fmt.Sprintf("%dvm", vms), func(b *testing.B) {
			noop, plugin := warmHost(b, noopWasm, vms), warmHost(b, pluginWasm, vms)
			b.ResetTimer()
			tNoop := driveTimed(noop, b.N)
			tPlugin := driveTimed(plugin, b.N)
			b.ReportMetric(float64(tNoop.Nanoseconds())/float64(b.N), "noop-ns/req")
			b.ReportMetric(float64(tPlugin.Nanoseconds())/float64(b.N), "plugin-ns/req")
			b.ReportMetric(float64(tPlugin)/float64(tNoop), "plugin/noop")
		})
	}
}

// BenchmarkMemory sends -wasmhost.requests requests from -wasmhost.ids
// distinct clients (uniformly, from a fixed seed) through 4 VMs, moving the
// clock 100 ms and ticking every VM after each 10,000 requests, and reports
// the linear memory of the VMs. Memory never shrinks, so this is the peak.
// Run it with -benchtime=1x: one iteration is the whole scenario.
func BenchmarkMemory(b *testing.B) {
	for _, module := range []string{noopWasm, pluginWasm} {
		b.Run(module, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				// The default client table (1000): memory is bounded by it,
				// whatever the number of distinct ids.
				raw, _ := json.Marshal(map[string]any{"capacity": 1 << 20, "cycle": "1s", "min_cycle": "100ms"})
				if module == noopWasm {
					raw = nil
				}
				h := newHost(b, module, Options{VMs: 4, PluginConfig: raw})
				sendManyClients(b, h, *memRequests, *memIDs)
				var maxPages, sum uint32
				for _, p := range h.MemoryPages() {
					maxPages, sum = max(maxPages, p), sum+p
				}
				b.ReportMetric(float64(maxPages)/16, "max-MiB/vm")
				b.ReportMetric(float64(sum)/16/float64(h.VMs()), "mean-MiB/vm")
			}
		})
	}
}

func sendManyClients(b *testing.B, h *Host, n, ids int) {
	const batch = 10_000
	for done := 0; done < n; done += batch {
		h.Drive(min(batch, n-done), Seeded(h.VMs(), uint64(done)), func(i int) [][2]string {
			id := splitmix64(uint64(done+i)) % uint64(ids)
			return Request("/", "id-"+strconv.FormatUint(id, 10))
		}, func(i int, r Result) {
			if r.Err != nil {
				b.Errorf("request %d: %v", done+i, r.Err)
			}
		})
		h.Clock().Advance(100 * time.Millisecond)
		if err := h.TickAll(); err != nil {
			b.Fatal(err)
		}
	}
}
