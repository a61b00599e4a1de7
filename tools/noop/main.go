// Command noop is a proxy-wasm HTTP filter that reads the client id the way
// Borrowcycle does (the default client header, filter.ClientID) and lets
// every request through. Built exactly like the real plugin, it is the
// baseline for the per-request cost of Borrowcycle (tools/wasmhost benchmarks)
// and the guest with which tools/wasmhost proves its own host functions.
//
// With an empty plugin configuration a request costs one header read. The
// optional JSON configuration switches on single host calls, each one there
// so a host test can watch it cross the ABI:
//
//	{"counter": "name"}        counter metric incremented once per request
//	{"shared_counter": "key"}  shared-data value incremented per request by CAS
//	{"echo": true}             response headers x-noop-client and x-noop-time
//	{"property": "a.b"}        with echo: x-noop-property from get_property
//	{"reject": "id"}           that client id gets a local 418 reply
//	{"tick_ms": 100}           tick period; each tick increments "noop.ticks"
//	{"fail": "reason"}         OnPluginStart logs an error and fails
//
// and one mode makes, per request, the host calls Borrowcycle's default
// configuration makes, with fixed values and none of its logic, so that
// bench-envoy can show what those calls alone cost in Envoy:
//
//	{"mimic": "allowed"}   the request's header map (the client id header's
//	                       duplicate check reads it whole), a wall-clock read
//	                       and the access-log property on the request, three
//	                       x-ratelimit headers on the response
//	{"mimic": "rejected"}  the header map, the clock read and the property, then a 429 local
//	                       reply with the six headers and the body of an
//	                       over_limit rejection
package main

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/borrowcycle/borrowcycle/plugin/filter"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// main is never called in a c-shared wasip1 module; init registers the VM.
func main() {}

func init() { proxywasm.SetVMContext(&vmContext{}) }

type config struct {
	Counter       string `json:"counter"`
	SharedCounter string `json:"shared_counter"`
	Echo          bool   `json:"echo"`
	Property      string `json:"property"`
	Reject        string `json:"reject"`
	TickMS        uint32 `json:"tick_ms"`
	Fail          string `json:"fail"`
	Mimic         string `json:"mimic"`
}

type vmContext struct{ types.DefaultVMContext }

func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type pluginContext struct {
	types.DefaultPluginContext
	cfg      config
	requests proxywasm.MetricCounter
	ticks    proxywasm.MetricCounter
}

func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	if err := p.configure(); err != nil {
		proxywasm.LogErrorf("noop: invalid configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	return types.OnPluginStartStatusOK
}

func (p *pluginContext) configure() error {
	raw, err := proxywasm.GetPluginConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		return err
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &p.cfg); err != nil {
			return err
		}
	}
	if p.cfg.Fail != "" {
		return errors.New("fail: " + p.cfg.Fail)
	}
	if m := p.cfg.Mimic; m != "" && m != mimicAllowed && m != mimicRejected {
		return errors.New(`mimic: want "allowed" or "rejected", got ` + strconv.Quote(m))
	}
	if p.cfg.Counter != "" {
		p.requests = proxywasm.DefineCounterMetric(p.cfg.Counter)
	}
	if p.cfg.SharedCounter != "" {
		// Create the key once, at start-up: VMs start one after the other,
		// whereas a set on a missing key during requests could race (it
		// succeeds whatever the CAS) and lose an increment.
		if _, _, err := proxywasm.GetSharedData(p.cfg.SharedCounter); errors.Is(err, types.ErrorStatusNotFound) {
			if err := proxywasm.SetSharedData(p.cfg.SharedCounter, []byte("0"), 0); err != nil {
				return err
			}
		}
	}
	if p.cfg.TickMS > 0 {
		p.ticks = proxywasm.DefineCounterMetric("noop.ticks")
		return proxywasm.SetTickPeriodMilliSeconds(p.cfg.TickMS)
	}
	return nil
}

func (p *pluginContext) OnTick() { p.ticks.Increment(1) }

func (p *pluginContext) NewHttpContext(uint32) types.HttpContext {
	return &httpContext{plugin: p}
}

type httpContext struct {
	types.DefaultHttpContext
	plugin *pluginContext
	client string
}

func (h *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	// A missing or invalid id is an ordinary request for the baseline.
	value, err := proxywasm.GetHttpRequestHeader(filter.DefaultClientHeader)
	h.client, _ = filter.ClientID(value, err == nil, filter.DefaultMaxClientIDBytes)
	cfg := &h.plugin.cfg
	if cfg.Counter != "" {
		h.plugin.requests.Increment(1)
	}
	if cfg.SharedCounter != "" {
		incrementShared(cfg.SharedCounter)
	}
	if cfg.Mimic != "" {
		return mimicRequest(cfg.Mimic)
	}
	if cfg.Reject != "" && h.client == cfg.Reject {
		_ = proxywasm.SendHttpResponse(418, [][2]string{{"x-noop-reason", "rejected"}}, []byte("noop: rejected"), -1)
		return types.ActionPause
	}
	return types.ActionContinue
}

func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	cfg := &h.plugin.cfg
	if cfg.Mimic == mimicAllowed {
		mimicResponse()
		return types.ActionContinue
	}
	if !cfg.Echo {
		return types.ActionContinue
	}
	_ = proxywasm.AddHttpResponseHeader("x-noop-client", h.client)
	_ = proxywasm.AddHttpResponseHeader("x-noop-time", strconv.FormatInt(time.Now().UnixNano(), 10))
	if cfg.Property != "" {
		v, err := proxywasm.GetProperty(strings.Split(cfg.Property, "."))
		if err != nil {
			_ = proxywasm.AddHttpResponseHeader("x-noop-property-error", err.Error())
		} else {
			_ = proxywasm.AddHttpResponseHeader("x-noop-property", string(v))
		}
	}
	return types.ActionContinue
}

// incrementShared adds one to a decimal counter in shared data with a CAS
// loop, the way a plugin shares state between Envoy's workers.
func incrementShared(key string) {
	for {
		v, cas, err := proxywasm.GetSharedData(key)
		if err != nil {
			proxywasm.LogErrorf("noop: get %s: %v", key, err)
			return
		}
		n, _ := strconv.ParseUint(string(v), 10, 64)
		err = proxywasm.SetSharedData(key, strconv.AppendUint(nil, n+1, 10), cas)
		if !errors.Is(err, types.ErrorStatusCasMismatch) {
			if err != nil {
				proxywasm.LogErrorf("noop: set %s: %v", key, err)
			}
			return
		}
	}
}
