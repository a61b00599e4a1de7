package wasmhost

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests prove the host on the noop plugin alone, before any test
// trusts it with the real one.

// sdkUnmodelled are the SDK's env imports this host leaves to stubs.
var sdkUnmodelled = map[string]bool{
	"proxy_register_shared_queue": true, "proxy_resolve_shared_queue": true,
	"proxy_dequeue_shared_queue": true, "proxy_enqueue_shared_queue": true,
	"proxy_set_buffer_bytes": true, "proxy_http_call": true, "proxy_call_foreign_function": true,
}

// checkImports fails for an import Envoy would not provide, and for an SDK
// import the host only stubs although a plugin of ours may need it.
func checkImports(t *testing.T, m *Module) {
	t.Helper()
	for _, imp := range m.Imports() {
		switch imp.Module {
		case "wasi_snapshot_preview1":
			if !EnvoyWASI[imp.Name] {
				t.Errorf("imports %v, which Envoy does not provide", imp)
			}
		case "env":
		default:
			t.Errorf("imports %v from an unknown module", imp)
		}
	}
	for _, imp := range m.Stubbed() {
		if !sdkUnmodelled[imp.Name] {
			t.Errorf("%v is only stubbed by the host", imp)
		}
	}
}

func TestNoopImportsSatisfied(t *testing.T) {
	checkImports(t, loadModule(t, noopWasm))
}

func TestNoopRequestsContinueOnEveryVM(t *testing.T) {
	h := newHost(t, noopWasm, Options{VMs: 3})
	for vm := 0; vm < h.VMs(); vm++ {
		r := h.Do(vm, Request("/x", "alice"))
		if !r.Continued() || r.Status != 200 || r.VM != vm {
			t.Fatalf("vm %d: %v", vm, r)
		}
		if !hasPair(r.Upstream, "x-client-id", "alice") {
			t.Fatalf("upstream request lost the client header: %v", r.Upstream)
		}
	}
	if calls := h.StubCalls(); len(calls) != 0 {
		t.Fatalf("noop called unimplemented imports: %v", calls)
	}
	// Separate instances: separate memories.
	if h.VM(0).mod.Memory() == h.VM(1).mod.Memory() {
		t.Fatal("two VMs share one linear memory")
	}
}

func TestNoopCounterSummedAcrossVMs(t *testing.T) {
	h := newHost(t, noopWasm, Options{VMs: 4, PluginConfig: []byte(`{"counter":"noop.requests"}`)})
	const n = 400
	var mu sync.Mutex
	perVM := map[int]int{}
	h.Drive(n, Seeded(4, 7), func(i int) [][2]string { return Request("/", "c"+strconv.Itoa(i%10)) },
		func(i int, r Result) {
			if !r.Continued() {
				t.Errorf("request %d: %v", i, r)
			}
			mu.Lock()
			perVM[r.VM]++
			mu.Unlock()
		})
	if len(perVM) != 4 {
		t.Fatalf("requests reached %d VMs, want 4: %v", len(perVM), perVM)
	}
	if got := h.Metric("noop.requests"); got != n {
		t.Fatalf("noop.requests = %d, want %d (per VM %v)", got, n, perVM)
	}
}

// Every VM increments one shared-data counter by CAS, concurrently. A lost
// update would show as a total below n; the final CAS shows the host's
// global counter advanced once per successful set and never on a mismatch.
func TestNoopSharedCounterByCAS(t *testing.T) {
	h := newHost(t, noopWasm, Options{VMs: 4, PluginConfig: []byte(`{"shared_counter":"noop.shared"}`)})
	const n = 400
	h.Drive(n, RoundRobin(4), func(int) [][2]string { return Request("/", "a") }, nil)
	v, cas, st := h.Shared().Get("noop.shared")
	if st != StatusOK || string(v) != strconv.Itoa(n) {
		t.Fatalf("shared counter = %q (%v), want %d", v, st, n)
	}
	// The canary created the key (CAS 1); the workers found it; then n sets.
	if cas != n+1 {
		t.Fatalf("cas = %d, want %d", cas, n+1)
	}
	for _, vm := range h.vms {
		for _, l := range vm.Logs() {
			t.Errorf("%s logged %q", vm.label(), l.Msg)
		}
	}
}

func TestNoopLocalReplyGoesThroughResponsePath(t *testing.T) {
	h := newHost(t, noopWasm, Options{VMs: 2, PluginConfig: []byte(`{"reject":"bad","echo":true}`)})
	r := h.Do(1, Request("/", "bad"))
	if !r.Local || r.Status != 418 || r.Body != "noop: rejected" || r.Upstream != nil {
		t.Fatalf("rejected request: %v", r)
	}
	if r.Header("x-noop-reason") != "rejected" {
		t.Fatalf("local reply lost its header: %v", r)
	}
	// Envoy runs the encoder filters on a local reply, this one included.
	if r.Header("x-noop-client") != "bad" {
		t.Fatalf("response path did not run on the local reply: %v", r)
	}
	ok := h.Do(1, Request("/", "good"))
	if !ok.Continued() || ok.Header("x-noop-client") != "good" || ok.Header("x-noop-reason") != "" {
		t.Fatalf("admitted request: %v", ok)
	}
}

func TestNoopSeesHostClockAndProperties(t *testing.T) {
	start := time.Date(2031, 2, 3, 4, 5, 6, 7, time.UTC)
	h := newHost(t, noopWasm, Options{
		VMs:          2,
		Clock:        NewClock(start),
		PluginConfig: []byte(`{"echo":true,"property":"plugin.answer"}`),
	})
	r := h.Do(0, Request("/", "a"))
	if r.Header("x-noop-time") != strconv.FormatInt(start.UnixNano(), 10) {
		t.Fatalf("guest time %s, want %d", r.Header("x-noop-time"), start.UnixNano())
	}
	if !strings.Contains(r.Header("x-noop-property-error"), "not found") {
		t.Fatalf("unset property: %v", r)
	}
	h.Clock().Advance(1500 * time.Millisecond)
	h.SetProperty("plugin.answer", "42")
	r = h.Do(1, Request("/", "a"))
	if want := start.Add(1500 * time.Millisecond).UnixNano(); r.Header("x-noop-time") != strconv.FormatInt(want, 10) {
		t.Fatalf("guest time after advance %s, want %d", r.Header("x-noop-time"), want)
	}
	if r.Header("x-noop-property") != "42" {
		t.Fatalf("property: %v", r)
	}
}

func TestNoopClockProperty(t *testing.T) {
	h := newHost(t, noopWasm, Options{VMs: 1, ClockProperty: "test.now",
		PluginConfig: []byte(`{"echo":true,"property":"test.now"}`)})
	h.Clock().Advance(time.Minute)
	r := h.Do(0, Request("/", "a"))
	if r.Header("x-noop-property") != strconv.FormatInt(h.Clock().Now().UnixNano(), 10) {
		t.Fatalf("clock property %q, want %d", r.Header("x-noop-property"), h.Clock().Now().UnixNano())
	}
}

func TestNoopCanaryFailureFailsStart(t *testing.T) {
	var mu sync.Mutex
	var seen []int
	_, err := New(context.Background(), loadModule(t, noopWasm), Options{
		VMs:          2,
		PluginConfig: []byte(`{"fail":"on purpose"}`),
		LogSink:      func(vm, _ int, _ string) { mu.Lock(); seen = append(seen, vm); mu.Unlock() },
	})
	if err == nil {
		t.Fatal("start succeeded with a failing configure")
	}
	for _, want := range []string{"canary", "proxy_on_configure returned false", "noop: invalid configuration: fail: on purpose"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// The canary stops start-up: no worker VM ever ran.
	if len(seen) != 1 || seen[0] != -1 {
		t.Errorf("log lines came from VMs %v, want only the canary (-1)", seen)
	}
}

func TestNoopTicksPerVM(t *testing.T) {
	h := newHost(t, noopWasm, Options{VMs: 3, PluginConfig: []byte(`{"tick_ms":250}`)})
	for vm := 0; vm < 3; vm++ {
		if p := h.VM(vm).TickPeriod(); p != 250 {
			t.Fatalf("vm %d tick period %d, want 250", vm, p)
		}
	}
	if err := h.Tick(2); err != nil {
		t.Fatal(err)
	}
	if err := h.TickAll(); err != nil {
		t.Fatal(err)
	}
	if got := h.Metric("noop.ticks"); got != 4 {
		t.Fatalf("noop.ticks = %d, want 4", got)
	}
	quiet := newHost(t, noopWasm, Options{VMs: 1})
	if err := quiet.Tick(0); err == nil {
		t.Fatal("ticked a VM that set no tick period")
	}
}

// A VM that panics is lost, as in Envoy, and the others carry on.
func TestNoopTrappedVMIsIsolated(t *testing.T) {
	h := newHost(t, noopWasm, Options{VMs: 3, PluginConfig: []byte(`{"counter":"noop.requests"}`)})
	// An unknown context id makes the SDK panic inside the guest.
	if _, err := h.VM(1).Call("proxy_on_request_headers", 9999, 0, 1); err == nil {
		t.Fatal("garbage context id did not fail the call")
	}
	if !strings.Contains(h.VM(1).Stderr(), "invalid context") {
		t.Fatalf("guest stderr does not show the panic: %q", h.VM(1).Stderr())
	}
	if r := h.Do(1, Request("/", "a")); r.Err == nil || h.VM(1).Failure() == nil {
		t.Fatalf("failed VM still served: %v", r)
	}
	served := driveAroundTrap(t, h, 60, func(r Result) bool {
		if !r.Continued() {
			t.Errorf("a healthy VM did not continue: %v", r)
		}
		return true
	})
	if served != 40 || h.Metric("noop.requests") != 40 {
		t.Fatalf("healthy VMs served %d, counter %d", served, h.Metric("noop.requests"))
	}
}

func hasPair(pairs [][2]string, k, v string) bool {
	for _, p := range pairs {
		if p[0] == k && p[1] == v {
			return true
		}
	}
	return false
}
