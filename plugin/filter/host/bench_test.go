//go:build !wasm

package host

import (
	"io"
	"log"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// Benchmarks of the compiled module on wazero, through the SDK's emulator:
//
//	make build
//	go test -run='^$' -bench=PerRequest -benchtime=200000x ./plugin/filter/host/
//	go test -run='^$' -bench=Memory -benchtime=1x ./plugin/filter/host/
//
// The emulator's own Go code runs in every host call, for both modules, so
// the per-request ratio understates the plugin's share of a real Envoy's
// cost. Allocation figures are the test process's (emulator and wazero),
// not the guest's.

const noopPath = "../../../build/noop.wasm"

// benchConfig, unclosed so that variants can add fields (benchWith),
// admits every request (the share is far above what the
// benchmark sends), so the figure is the admitted path with its response
// headers, the common case. The emulator's clock advances 1ms per read,
// about one read per request, so a one-minute cycle is some 60k requests:
// each of the 100 clients sends ~600 per cycle, and the rollover at each
// deadline is part of the cost. min_cycle = cycle keeps newcomers from
// ending cycles early: the clients all join at the first deadline.
const benchConfig = `{"capacity": 1000000000, "cycle": "1m", "min_cycle": "1m", "name": "bench"`

// benchWith is benchConfig with more fields ("" for none), closed.
func benchWith(fields string) string {
	if fields == "" {
		return benchConfig + "}"
	}
	return benchConfig + ", " + fields + "}"
}

const benchClients = 100

// benchHost starts the module at path in a fresh VM. The host is released
// at the end of the benchmark, or earlier by release (the SDK allows one
// host at a time).
func benchHost(b *testing.B, path, vmConfig, pluginConfig string) (h proxytest.HostEmulator, release func()) {
	b.Helper()
	// The emulator prints every guest log line; that would be measured.
	log.SetOutput(io.Discard)
	b.Cleanup(func() { log.SetOutput(os.Stderr) })
	wasm, err := os.ReadFile(path)
	if err != nil {
		b.Fatalf("reading %s: %v (run make build)", path, err)
	}
	vm, err := proxytest.NewWasmVMContext(wasm)
	if err != nil {
		b.Fatalf("loading %s: %v", path, err)
	}
	b.Cleanup(func() { _ = vm.Close() })
	opt := proxytest.NewEmulatorOption().WithVMContext(vm).
		WithVMConfiguration([]byte(vmConfig)).WithPluginConfiguration([]byte(pluginConfig))
	h, reset := proxytest.NewHostEmulator(opt)
	release = sync.OnceFunc(reset)
	b.Cleanup(release)
	if !bool(h.StartVM()) || !bool(h.StartPlugin()) {
		b.Fatalf("%s did not start: %q", path, h.GetErrorLogs())
	}
	return h, release
}

// vmConfigFor is the VM configuration of the module at path: the emulator
// hands out CAS 0, which Borrowcycle refuses without zero_cas.
func vmConfigFor(path string) string {
	if path == wasmPath {
		return `{"test_support": {"zero_cas": true}}`
	}
	return ""
}

func clientHeaders(n int) [][][2]string {
	hs := make([][][2]string, n)
	for i := range hs {
		hs[i] = [][2]string{{":method", "GET"}, {":path", "/"}, {"x-client-id", "client-" + strconv.Itoa(i)}}
	}
	return hs
}

var upstreamResponse = [][2]string{{":status", "200"}, {"content-length", "0"}}

// serve sends n requests, each on a new stream as Envoy does, round robin
// over headers, and returns how many were admitted.
func serve(h proxytest.HostEmulator, headers [][][2]string, n int) int {
	admitted := 0
	for i := 0; i < n; i++ {
		id := h.InitializeHttpContext()
		if h.CallOnRequestHeaders(id, headers[i%len(headers)], true) == types.ActionContinue {
			h.CallOnResponseHeaders(id, upstreamResponse, false)
			admitted++
		}
		h.CompleteHttpContext(id)
	}
	return admitted
}

// warm registers every client and runs the VM past its first allocations.
func warm(b *testing.B, h proxytest.HostEmulator, headers [][][2]string) {
	b.Helper()
	for round := 0; round < 1000; round++ {
		if serve(h, headers, len(headers)) == len(headers) {
			serve(h, headers, 10*len(headers))
			return
		}
	}
	b.Fatal("clients never all admitted during warm-up")
}

// perRequest serves b.N requests on a warmed-up host and returns the time.
// Only the requests run with the benchmark timer on, and only when timed.
func perRequest(b *testing.B, path, config string, timed bool) time.Duration {
	b.StopTimer()
	headers := clientHeaders(benchClients)
	h, release := benchHost(b, path, vmConfigFor(path), config)
	defer release()
	warm(b, h, headers)
	if timed {
		b.StartTimer()
	}
	start := time.Now()
	got := serve(h, headers, b.N)
	elapsed := time.Since(start)
	b.StopTimer()
	if got != b.N {
		b.Fatalf("%d of %d requests admitted", got, b.N)
	}
	return elapsed
}

// BenchmarkPerRequest is the cost of one request (request headers, response
// headers, stream end) for the no-op module and for Borrowcycle in its
// default configuration and with fewer headers; "ratio" is Borrowcycle's
// time per request over the no-op module's, measured back to back in the
// same benchmark so that both see the same machine load.
func BenchmarkPerRequest(b *testing.B) {
	variants := []struct{ name, config string }{
		{"default", benchWith("")},
		{"ietf", benchWith(`"rate_limit_headers": "ietf"`)},
		{"no_headers_on_allowed", benchWith(`"headers_on_allowed": false`)},
		// The request ("GET /") is decided by the last of four limits: the
		// host reads :path and :method, and matching tries every rule.
		{"fourth_of_four_limits", `{"capacity": 1000000000, "cycle": "1m", "min_cycle": "1m", "limits": [
			{"name": "health", "unlimited": true, "match": {"path_exact": "/healthz"}},
			{"name": "search", "match": {"path_prefix": "/search", "methods": ["GET", "HEAD"]}},
			{"name": "export", "cost": 5, "match": {"path_prefix": "/export"}},
			{"name": "bench"}]}`},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			noop := perRequest(b, noopPath, "", false)
			bc := perRequest(b, wasmPath, v.config, true) // ns/op and allocs are Borrowcycle's
			b.ReportMetric(float64(noop.Nanoseconds())/float64(b.N), "noop-ns/req")
			b.ReportMetric(float64(bc.Nanoseconds())/float64(b.N), "borrowcycle-ns/req")
			b.ReportMetric(float64(bc)/float64(noop), "ratio")
		})
	}
}

// BenchmarkMemory1MRequests100kClients reports the VM's linear memory after
// a million requests from 100k distinct ids with the default max_clients,
// read in the guest with the memory.size instruction (the emulator does not
// expose the module's memory).
//
// One stream is reused for every request: the SDK keeps each stream's
// context until proxy_on_delete, which Envoy sends at the end of a stream
// and the emulator never does, so fresh streams would measure the
// emulator's leak, a million contexts, instead of the plugin.
func BenchmarkMemory1MRequests100kClients(b *testing.B) {
	const requests, clients = 1_000_000, 100_000
	headers := clientHeaders(clients)
	for i := 0; i < b.N; i++ {
		h, release := benchHost(b, wasmPath, `{"test_support": {"memory_property": "bench.memory", "zero_cas": true}}`, `{"capacity": 100000, "cycle": "10s", "name": "mem"}`)
		startMiB := memoryMiB(b, h)
		stream := h.InitializeHttpContext()
		admitted := 0
		for r := 0; r < requests; r++ {
			if h.CallOnRequestHeaders(stream, headers[r%clients], true) == types.ActionContinue {
				h.CallOnResponseHeaders(stream, upstreamResponse, false)
				admitted++
			}
			if r%1000 == 0 {
				h.Tick() // Envoy ticks each worker several times a second
			}
			if r == requests/2 {
				b.ReportMetric(memoryMiB(b, h), "MiB-after-500k")
			}
		}
		b.ReportMetric(startMiB, "MiB-at-start")
		b.ReportMetric(memoryMiB(b, h), "MiB-after-1M")
		b.ReportMetric(float64(admitted), "admitted")
		release()
	}
}

// memoryMiB ticks the plugin, which writes its linear memory size to the
// property named by the VM configuration, and reads it.
func memoryMiB(b *testing.B, h proxytest.HostEmulator) float64 {
	b.Helper()
	h.Tick()
	raw, err := h.GetProperty([]string{"bench", "memory"})
	if err != nil {
		b.Fatalf("reading the memory property: %v", err)
	}
	n, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil || n == 0 {
		b.Fatalf("memory property %q", raw)
	}
	return float64(n) / (1 << 20)
}

// BenchmarkHeldRequest is the cost of holding a request (max_wait) against
// admitting it at once, on the compiled module:
//
//	go test -run='^$' -bench=HeldRequest -benchtime=20000x ./plugin/filter/host/
//
// A paced limit gives its one client a unit a millisecond, on a clock the
// benchmark moves. Each round, two milliseconds long, sends a request that
// takes the unit of its first millisecond, then a second one: "admitted"
// sends it a millisecond later, when its unit has come; "held" sends it at
// once, so that it is held, and lets the tick admit it a millisecond
// later. Both rounds tick once; "ratio" is held over admitted, measured
// back to back.
func BenchmarkHeldRequest(b *testing.B) {
	config := `{"capacity": 1000000, "cycle": "1000s", "burst": 0, "max_wait": "1s", "name": "held"}`
	round := func(held bool, n int) time.Duration {
		h, release := benchHost(b, wasmPath, `{"test_support": {"clock_property": "bench.now", "zero_cas": true}}`, config)
		defer release()
		headers := [][2]string{{":method", "GET"}, {":path", "/"}, {"x-client-id", "held-client"}}
		// A millisecond into a window: the client's first unit has come.
		now := time.Unix(1767225000, int64(time.Millisecond))
		set := func(t time.Time) {
			if err := h.SetProperty([]string{"bench", "now"}, []byte(strconv.FormatInt(t.UnixNano(), 10))); err != nil {
				b.Fatal(err)
			}
		}
		send := func() (uint32, types.Action) {
			id := h.InitializeHttpContext()
			return id, h.CallOnRequestHeaders(id, headers, true)
		}
		admitted, delayed := 0, 0
		start := time.Now()
		for i := 0; i < n; i++ {
			set(now)
			if id, a := send(); a == types.ActionContinue {
				admitted++
				h.CallOnResponseHeaders(id, upstreamResponse, false)
				h.CompleteHttpContext(id)
			}
			var id uint32
			var a types.Action
			if held {
				id, a = send()
				now = now.Add(time.Millisecond)
				set(now)
				h.Tick()
				if a == types.ActionPause && h.GetCurrentHttpStreamAction(id) == types.ActionContinue {
					delayed++
				}
			} else {
				now = now.Add(time.Millisecond)
				set(now)
				id, a = send()
				h.Tick()
				if a == types.ActionContinue {
					admitted++
				}
			}
			h.CallOnResponseHeaders(id, upstreamResponse, false)
			h.CompleteHttpContext(id)
			now = now.Add(time.Millisecond) // the next round's first unit
		}
		elapsed := time.Since(start)
		if want := 2 * n; admitted+delayed != want || (held && delayed != n) {
			b.Fatalf("held=%t: %d admitted at once and %d after a hold, want %d in all", held, admitted, delayed, want)
		}
		return elapsed
	}
	b.StopTimer()
	round(false, 1000) // each in a fresh VM: warm both up first
	round(true, 1000)
	base := round(false, b.N)
	b.StartTimer()
	withHold := round(true, b.N)
	b.StopTimer()
	b.ReportMetric(float64(base.Nanoseconds())/float64(b.N), "admitted-ns/round")
	b.ReportMetric(float64(withHold.Nanoseconds())/float64(b.N), "held-ns/round")
	b.ReportMetric(float64(withHold)/float64(base), "ratio")
}
