package wasmhost

import (
	"encoding/json"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Benchmarks (docs/benchmarks.md gives the commands):
//
//	BenchmarkRequests        requests/s through 1 and 4 VMs, noop and plugin
//	BenchmarkPluginOverNoop  the plugin's cost per request as a multiple of
//	                         the noop's, both timed in one run, for the
//	                         default configuration, no headers on admitted
//	                         responses, and the reject path
//	BenchmarkMemory          linear memory per VM after -wasmhost.requests
//	                         requests over -wasmhost.ids distinct client ids

var (
	memRequests = flag.Int("wasmhost.requests", 1_000_000, "requests sent by BenchmarkMemory")
	memIDs      = flag.Int("wasmhost.ids", 100_000, "distinct client ids in BenchmarkMemory")
)

// benchClients is how many client ids the throughput benchmarks rotate.
const benchClients = 100

// benchVariant is a plugin configuration the benchmarks time, and whether
// its requests are admitted once the clients are registered.
type benchVariant struct {
	name   string
	config map[string]any
	admit  bool
}

// benchVariants: the default configuration never rejects a registered
// client (the admitted path, most of a healthy proxy's traffic); the same
// without headers on admitted responses; and a share of one request per
// hour-long cycle, so that every timed request is an over_limit reply.
var benchVariants = []benchVariant{
	{"default", map[string]any{"capacity": 1 << 40, "cycle": "1s", "min_cycle": "100ms"}, true},
	{"no_headers", map[string]any{"capacity": 1 << 40, "cycle": "1s", "min_cycle": "100ms", "headers_on_allowed": false}, true},
	{"reject", map[string]any{"capacity": benchClients, "cycle": "1h", "min_cycle": "100ms"}, false},
}

// benchConfig is the configuration of a module; the noop takes none.
func benchConfig(module string, v benchVariant) []byte {
	if module == noopWasm {
		return nil
	}
	raw, _ := json.Marshal(v.config)
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
// clock past the newcomers' minimum cycle (up to 1 s) so none is pending; then every
// request must get the variant's answer (the noop admits all).
func warmHost(b *testing.B, module string, vms int, v benchVariant) *Host {
	h := newHost(b, module, Options{VMs: vms, PluginConfig: benchConfig(module, v)})
	reqs := benchRequests()
	for round := 0; round < 6; round++ {
		h.DriveAll(reqs, RoundRobin(vms))
		h.Clock().Advance(200 * time.Millisecond)
		if err := h.TickAll(); err != nil {
			b.Fatal(err)
		}
	}
	admit := v.admit || module == noopWasm
	for _, r := range h.DriveAll(reqs, RoundRobin(vms)) {
		if r.Continued() != admit {
			b.Fatalf("after warm-up, %s %s answered %v", module, v.name, r)
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
				h := warmHost(b, module, vms, benchVariants[0])
				b.ReportAllocs()
				b.ResetTimer()
				elapsed := driveTimed(h, b.N)
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
			})
		}
	}
}

// BenchmarkPluginOverNoop times the same number of requests through the
// noop and the plugin, in alternating slices in one process, and reports
// the plugin's cost as a multiple of the noop's ("plugin/noop", in CPU
// time, which other processes on the machine inflate less than wall time)
// and the host calls each makes per request: a change that adds host
// calls or work per request shows up here without Envoy. The noop admits every
// request, so for the reject variant the ratio compares a 429 with an
// admitted request, which must not cost more.
func BenchmarkPluginOverNoop(b *testing.B) {
	for _, v := range benchVariants {
		for _, vms := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/%dvm", v.name, vms), func(b *testing.B) {
				noop, plugin := warmHost(b, noopWasm, vms, v), warmHost(b, pluginWasm, vms, v)
				noopCalls, pluginCalls := noop.HostCalls(), plugin.HostCalls()
				b.ResetTimer()
				tNoop, tPlugin := timeInterleaved(noop, plugin, b.N)
				b.ReportMetric(float64(tNoop.cpu.Nanoseconds())/float64(b.N), "noop-cpu-ns/req")
				b.ReportMetric(float64(tPlugin.cpu.Nanoseconds())/float64(b.N), "plugin-cpu-ns/req")
				b.ReportMetric(float64(tPlugin.cpu)/float64(tNoop.cpu), "plugin/noop")
				b.ReportMetric(float64(tPlugin.wall)/float64(tNoop.wall), "plugin/noop-wall")
				b.ReportMetric(callsPerRequest(noop, noopCalls, b.N), "noop-calls/req")
				b.ReportMetric(callsPerRequest(plugin, pluginCalls, b.N), "plugin-calls/req")
				if testing.Verbose() {
					b.Logf("plugin host calls per request: %s", callBreakdown(plugin, pluginCalls, b.N))
				}
			})
		}
	}
}

// cost is the time some requests took.
type cost struct{ wall, cpu time.Duration }

// timeInterleaved sends n requests through each host, in ten alternating
// slices so that both see the same machine load, and returns each one's
// wall and process CPU time.
func timeInterleaved(a, b *Host, n int) (ca, cb cost) {
	const slices = 10
	for i := 0; i < slices; i++ {
		k := n/slices + boolInt(i < n%slices)
		ca = ca.plus(measure(a, k))
		cb = cb.plus(measure(b, k))
	}
	return ca, cb
}

func measure(h *Host, n int) cost {
	w0, c0 := time.Now(), processCPU()
	driveTimed(h, n)
	return cost{wall: time.Since(w0), cpu: processCPU() - c0}
}

func (c cost) plus(d cost) cost { return cost{c.wall + d.wall, c.cpu + d.cpu} }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// callsPerRequest is the host calls h's VMs made since before, per request.
func callsPerRequest(h *Host, before map[string]uint64, n int) float64 {
	var total uint64
	for name, c := range h.HostCalls() {
		total += c - before[name]
	}
	return float64(total) / float64(n)
}

// callBreakdown lists the host calls since before per request, by name.
func callBreakdown(h *Host, before map[string]uint64, n int) string {
	var parts []string
	for name, c := range h.HostCalls() {
		if d := c - before[name]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s=%.3f", name, float64(d)/float64(n)))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
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
