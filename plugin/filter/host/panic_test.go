//go:build !wasm

package host

import (
	"strconv"
	"strings"
	"testing"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/borrowcycle/borrowcycle/plugin/filter"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// A panic cannot be provoked through the ABI, so this test runs natively
// only: it swaps in a limiter whose store panics, the stand-in for any bug
// below the callback.

type capturingVM struct {
	*vmContext
	plugin *pluginContext
}

func (v *capturingVM) NewPluginContext(id uint32) types.PluginContext {
	v.plugin = v.vmContext.NewPluginContext(id).(*pluginContext)
	return v.plugin
}

type panickingStore struct{}

func (panickingStore) Get(string) ([]byte, uint32, error) { panic("store exploded") }
func (panickingStore) Set(string, []byte, uint32) error   { panic("store exploded") }

func TestPanicIsRecoveredAndAppliesFailureMode(t *testing.T) {
	for _, deny := range []bool{false, true} {
		t.Run("failure_mode_deny="+strconv.FormatBool(deny), func(t *testing.T) {
			vm := &capturingVM{vmContext: &vmContext{}}
			config := `{"capacity": 10, "cycle": "10s", "failure_mode_deny": ` + strconv.FormatBool(deny) + `}`
			emu, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().
				WithVMContext(vm).WithPluginConfiguration([]byte(config)))
			defer reset()
			if !bool(emu.StartVM()) || !bool(emu.StartPlugin()) {
				t.Fatalf("start failed: %q", emu.GetErrorLogs())
			}
			p := vm.plugin
			f, err := filter.New(*p.filter.Settings(), panickingStore{}, engine.SystemClock{}, func(int, int) engine.Observer { return &observer{m: p.metrics} })
			if err != nil {
				t.Fatal(err)
			}
			p.filter = f
			h := &host{HostEmulator: emu, t: t}
			r := h.from("alice")
			if deny {
				if r.local == nil || r.headers["x-borrowcycle-reason"] != "store_failure" {
					t.Fatalf("deny mode after a panic: %+v, want a store_failure reply", r.headers)
				}
			} else if !r.admitted() {
				t.Fatalf("admit mode after a panic: rejected with %+v", r.headers)
			}
			// The tick hands the request's panic to the host, then panics
			// itself; that one is counted at the next tick.
			h.flushMetrics()
			if got := h.counter("borrowcycle.default.panics"); got != 1 {
				t.Errorf("panics = %d, want 1", got)
			}
			logs := h.logsContaining("panic in OnHttpRequestHeaders")
			if len(logs) != 1 || !strings.Contains(logs[0], "store exploded") {
				t.Errorf("panic logs = %q", logs)
			}
			emu.Tick() // the tick path must survive the same panic
			if got := h.counter("borrowcycle.default.panics"); got != 2 {
				t.Errorf("panics after a panicking tick = %d, want 2", got)
			}
		})
	}
}
