//go:build !wasm

// The SDK's host emulator (proxytest) builds only natively.

package host

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/plugin/filter"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// Every plugin test runs under two runners: "go" runs this package's code
// natively inside proxytest, and "wasm" runs the compiled module
// (build/borrowcycle.wasm) on wazero through proxytest.NewWasmVMContext, the
// binary Envoy loads. proxytest has one global host, so no test is parallel.

const wasmPath = "../../../build/borrowcycle.wasm"

var runners = []string{"go", "wasm"}

var wasmBytes = sync.OnceValues(func() ([]byte, error) { return os.ReadFile(wasmPath) })

// eachRunner runs f under both runners.
func eachRunner(t *testing.T, f func(t *testing.T, runner string)) {
	t.Helper()
	for _, r := range runners {
		t.Run(r, func(t *testing.T) { f(t, r) })
	}
}

// newVM returns the VM context of a runner for a plugin configuration.
// A missing module fails the test: skipping would let the binary Envoy runs
// go untested.
//
// Compiling the module takes wazero about a second, and fifteen under the
// race detector, so wasm tests share one VM, the way Envoy keeps a VM across
// plugin reconfigurations. The exception is a limit name already started
// in the shared VM: the VM keeps the metric ids it defined for that name
// (Envoy's ids live as long as the VM), but every test has a fresh host
// whose ids start over, so such a test gets a fresh VM. Tests use distinct
// names to stay fast; correctness does not depend on it.
func newVM(t testing.TB, runner, pluginConfig string) types.VMContext {
	t.Helper()
	if runner == "go" {
		return &vmContext{}
	}
	if shared.vm != nil && !shared.started[limitName(pluginConfig)] {
		return shared.vm
	}
	wasm, err := wasmBytes()
	if err != nil {
		t.Fatalf("reading %s: %v (run make build)", wasmPath, err)
	}
	vm, err := proxytest.NewWasmVMContext(wasm)
	if err != nil {
		t.Fatalf("loading %s: %v", wasmPath, err)
	}
	if shared.vm != nil {
		_ = shared.vm.Close()
	}
	shared.vm, shared.started = vm, map[string]bool{}
	return vm
}

// shared is the wasm VM that tests reuse, and the limit names whose
// plugins started in it.
var shared struct {
	vm      proxytest.WasmVMContext
	started map[string]bool
}

// markStarted records that a plugin with this configuration started in the
// VM of the runner.
func markStarted(runner, pluginConfig string) {
	if runner == "wasm" && shared.started != nil {
		shared.started[limitName(pluginConfig)] = true
	}
}

// limitName is the "name" field of a plugin configuration, or its default.
func limitName(pluginConfig string) string {
	var c struct {
		Name *string `json:"name"`
	}
	if json.Unmarshal([]byte(pluginConfig), &c) != nil || c.Name == nil {
		return filter.DefaultName
	}
	return *c.Name
}

// clockPath is the host property the tests' VM configuration points the
// plugin's clock at.
var clockPath = []string{"test", "now"}

const testVMConfig = `{"test_support": {"clock_property": "test.now", "zero_cas": true}}`

// t0 is where every test's clock starts.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// hostActive is set while a test's host is registered with the SDK.
var hostActive bool

type host struct {
	proxytest.HostEmulator
	t   testing.TB
	now time.Time
}

// newHost starts a VM with the test clock at t0 and the plugin
// configuration pluginConfig, without starting the plugin.
func newHost(t testing.TB, runner, pluginConfig string) *host {
	t.Helper()
	opt := proxytest.NewEmulatorOption().
		WithVMContext(newVM(t, runner, pluginConfig)).
		WithVMConfiguration([]byte(testVMConfig)).
		WithPluginConfiguration([]byte(pluginConfig)).
		WithProperty(clockPath, []byte(strconv.FormatInt(t0.UnixNano(), 10)))
	if hostActive {
		// NewHostEmulator would block forever on the SDK's global host lock.
		t.Fatal("a proxytest host is already active: start each host in its own subtest")
	}
	emu, reset := proxytest.NewHostEmulator(opt)
	hostActive = true
	t.Cleanup(func() { reset(); hostActive = false })
	h := &host{HostEmulator: emu, t: t, now: t0}
	if !h.StartVM() {
		t.Fatal("OnVMStart failed")
	}
	return h
}

// startHost is newHost followed by a plugin start that must succeed.
func startHost(t testing.TB, runner, pluginConfig string) *host {
	t.Helper()
	h := newHost(t, runner, pluginConfig)
	markStarted(runner, pluginConfig) // before: a failed start may have defined some
	if !h.StartPlugin() {
		t.Fatalf("OnPluginStart failed for %s; error logs: %q", pluginConfig, h.GetErrorLogs())
	}
	return h
}

// advance moves the plugin's clock.
func (h *host) advance(d time.Duration) { h.setNow(h.now.Add(d)) }

func (h *host) setNow(now time.Time) {
	h.t.Helper()
	h.now = now
	if err := h.SetProperty(clockPath, []byte(strconv.FormatInt(now.UnixNano(), 10))); err != nil {
		h.t.Fatalf("setting the clock: %v", err)
	}
}

// result is what a client sees of one request.
type result struct {
	action  types.Action
	local   *proxytest.LocalHttpResponse // nil when the request went upstream
	headers map[string]string            // response headers, upstream or local
}

func (r result) admitted() bool { return r.action == types.ActionContinue && r.local == nil }

// request sends one request with the given headers; an admitted one gets a
// 200 from "upstream", whose headers the plugin may extend.
func (h *host) request(headers ...[2]string) result {
	h.t.Helper()
	id := h.InitializeHttpContext()
	all := append([][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "test"}}, headers...)
	res := result{action: h.CallOnRequestHeaders(id, all, true)}
	res.local = h.GetSentLocalResponse(id)
	var resp [][2]string
	if res.local != nil {
		resp = res.local.Headers
	} else {
		h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
		resp = h.GetCurrentResponseHeaders(id)
	}
	// The emulator keeps header values as the plugin passed them, aliasing
	// buffers the plugin reuses for the next request (Envoy copies them);
	// so the result takes its own copies.
	res.headers = make(map[string]string, len(resp))
	for _, kv := range resp {
		if _, dup := res.headers[kv[0]]; dup {
			h.t.Errorf("header %q appears twice in %v", kv[0], resp)
		}
		res.headers[strings.Clone(kv[0])] = strings.Clone(kv[1])
	}
	h.CompleteHttpContext(id)
	return res
}

// from sends one request as client id.
func (h *host) from(id string) result {
	h.t.Helper()
	return h.request([2]string{"x-client-id", id})
}

// admittedOf sends n requests as client id and returns how many were admitted.
func (h *host) admittedOf(id string, n int) int {
	h.t.Helper()
	admitted := 0
	for i := 0; i < n; i++ {
		if h.from(id).admitted() {
			admitted++
		}
	}
	return admitted
}

// flushMetrics ticks the plugin, which hands the host every count made
// before the tick: counters lag by one tick (docs/contract.md, Metrics).
func (h *host) flushMetrics() { h.Tick() }

func (h *host) counter(name string) uint64 {
	h.t.Helper()
	v, err := h.GetCounterMetric(name)
	return h.metric(name, v, err)
}

func (h *host) gauge(name string) uint64 {
	h.t.Helper()
	v, err := h.GetGaugeMetric(name)
	return h.metric(name, v, err)
}

func (h *host) metric(name string, v uint64, err error) uint64 {
	h.t.Helper()
	if err != nil {
		h.t.Fatalf("metric %s: %v", name, err)
	}
	return v
}

// checkCounters compares the counters prefix+name with want.
func (h *host) checkCounters(prefix string, want map[string]uint64) {
	h.t.Helper()
	for name, w := range want {
		if got := h.counter(prefix + name); got != w {
			h.t.Errorf("%s = %d, want %d", name, got, w)
		}
	}
}

// logsContaining returns the logs of every level that contain s.
func (h *host) logsContaining(s string) []string {
	var out []string
	for _, logs := range [][]string{h.GetTraceLogs(), h.GetDebugLogs(), h.GetInfoLogs(), h.GetWarnLogs(), h.GetErrorLogs(), h.GetCriticalLogs()} {
		for _, l := range logs {
			if strings.Contains(l, s) {
				out = append(out, l)
			}
		}
	}
	return out
}
