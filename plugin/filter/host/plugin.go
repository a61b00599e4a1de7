// Package host is the proxy-wasm adapter of package filter: the VM, plugin
// and HTTP contexts Envoy calls, and every host call the filter needs
// (headers, local replies, shared data as the engine's Store, metrics,
// ticks, logs). It holds no rule of its own: each callback reads what the
// host has, asks the filter, and carries out the plan. Each callback
// recovers panics at one boundary (guard.go), where they are counted.
package host

import (
	"errors"
	"fmt"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/borrowcycle/borrowcycle/plugin/filter"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// NewVMContext returns the root context of a Borrowcycle VM, for
// proxywasm.SetVMContext.
func NewVMContext() types.VMContext { return &vmContext{} }

// vmContext is one Wasm VM: in Envoy, one per worker thread (and the main
// thread) for each vm_id and code.
type vmContext struct {
	types.DefaultVMContext
	test testSupport
	// metrics are defined once per VM and limit name, and reused when the
	// plugin is reconfigured without a new VM.
	metrics map[string]*metrics
}

// OnVMStart implements types.VMContext.
func (v *vmContext) OnVMStart(size int) (status types.OnVMStartStatus) {
	defer guard(nil, "OnVMStart", func() { status = types.OnVMStartStatusFailed })
	v.test = testSupport{}
	if size == 0 {
		return types.OnVMStartStatusOK
	}
	data, err := proxywasm.GetVMConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		proxywasm.LogErrorf("borrowcycle: reading the VM configuration: %v", err)
		return types.OnVMStartStatusFailed
	}
	if v.test, err = parseVMConfig(data); err != nil {
		proxywasm.LogErrorf("borrowcycle: invalid VM configuration: %v", err)
		return types.OnVMStartStatusFailed
	}
	return types.OnVMStartStatusOK
}

// NewPluginContext implements types.VMContext.
func (v *vmContext) NewPluginContext(uint32) types.PluginContext {
	return &pluginContext{vm: v}
}

// metricsFor returns the metrics of the limit name, defining them on first
// use in this VM.
func (v *vmContext) metricsFor(name string) *metrics {
	m, ok := v.metrics[name]
	if !ok {
		m = defineMetrics(name)
		if v.metrics == nil {
			v.metrics = make(map[string]*metrics)
		}
		v.metrics[name] = m
	}
	return m
}

// pluginContext is one plugin configuration in one VM.
type pluginContext struct {
	types.DefaultPluginContext
	vm      *vmContext
	filter  *filter.Filter
	metrics *metrics
	replier replier
}

// OnPluginStart implements types.PluginContext.
func (p *pluginContext) OnPluginStart(int) (status types.OnPluginStartStatus) {
	defer guard(p, "OnPluginStart", func() { status = types.OnPluginStartStatusFailed })
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		proxywasm.LogErrorf("borrowcycle: reading the plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	cfg, err := filter.ParseConfig(data)
	if err != nil {
		proxywasm.LogError("borrowcycle: invalid configuration: " + err.Error())
		return types.OnPluginStartStatusFailed
	}
	if err := p.start(cfg); err != nil {
		proxywasm.LogErrorf("borrowcycle: start: %v", err)
		return types.OnPluginStartStatusFailed
	}
	proxywasm.LogInfo(p.filter.Summary())
	return types.OnPluginStartStatusOK
}

// start builds the filter for a valid configuration.
func (p *pluginContext) start(cfg filter.Config) error {
	m := p.vm.metricsFor(cfg.Name)
	store := &sharedStore{zeroCAS: p.vm.test.ZeroCAS}
	f, err := filter.New(cfg, store, p.vm.test.clock(), &observer{m: m})
	if err != nil {
		return err
	}
	if err := proxywasm.SetTickPeriodMilliSeconds(uint32(cfg.TickPeriod().Milliseconds())); err != nil {
		return fmt.Errorf("setting the tick period: %w", err)
	}
	p.filter, p.metrics = f, m
	return nil
}

// OnTick implements types.PluginContext.
func (p *pluginContext) OnTick() {
	defer guard(p, "OnTick", nil)
	if p.filter == nil {
		return
	}
	// Counters first: a tick that panics below must not hold them back.
	p.metrics.flush()
	p.metrics.setActive(p.filter.Tick())
	p.vm.test.reportMemory()
}

// NewHttpContext implements types.PluginContext.
func (p *pluginContext) NewHttpContext(uint32) types.HttpContext {
	return &httpContext{plugin: p}
}

// httpContext is one HTTP stream.
type httpContext struct {
	types.DefaultHttpContext
	plugin *pluginContext
	stream
}

// stream is what a stream remembers between its request and its response.
type stream struct {
	decision engine.Decision
	decided  bool // decision holds this stream's admission
	replied  bool // this filter sent a local reply, headers included
}

// OnHttpRequestHeaders implements types.HttpContext: it admits or rejects
// the request.
func (h *httpContext) OnHttpRequestHeaders(int, bool) (action types.Action) {
	f := h.plugin.filter
	if f == nil {
		return types.ActionContinue // not started: Envoy would not run the filter
	}
	defer guard(h.plugin, "OnHttpRequestHeaders", func() { action = h.failSafe() })
	value, err := proxywasm.GetHttpRequestHeader(f.Config().ClientHeader)
	d := f.Decide(value, err == nil)
	h.plugin.metrics.count(d)
	return h.carryOut(d)
}

// carryOut records the decision for the response and sends the local
// reply of a rejection. If the host refuses the reply, the request
// continues, because a paused stream without a reply would hang.
func (h *httpContext) carryOut(d engine.Decision) types.Action {
	h.stream = stream{decision: d, decided: true}
	if d.Allowed {
		return types.ActionContinue
	}
	if err := h.plugin.replier.send(h.plugin.filter.Reply(d)); err != nil {
		proxywasm.LogWarnf("borrowcycle: sending the %s reply: %v", d.Reason, err)
		return types.ActionContinue
	}
	h.replied = true
	return types.ActionPause
}

// failSafe applies the failure mode after a panic in the request path. An
// admitted request gets no headers: the decision knows no share. It runs
// outside the callback's guard, so it has its own.
func (h *httpContext) failSafe() (action types.Action) {
	d := h.plugin.filter.FailSafe()
	if d.Allowed {
		h.stream = stream{}
		return types.ActionContinue
	}
	defer guard(h.plugin, "OnHttpRequestHeaders reply", func() { action = types.ActionContinue })
	return h.carryOut(d)
}

// OnHttpResponseHeaders implements types.HttpContext: it adds the
// rate-limit and debug headers to responses that came from upstream.
func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	// A local reply already carries its headers; Envoy may run the encoder
	// path for it, and adding them again would duplicate them.
	if h.replied || !h.decided {
		return types.ActionContinue
	}
	defer guard(h.plugin, "OnHttpResponseHeaders", nil)
	for _, kv := range h.plugin.filter.ResponseHeaders(h.decision) {
		// A refused header only loses information; the response goes on.
		_ = proxywasm.AddHttpResponseHeader(kv[0], kv[1])
	}
	return types.ActionContinue
}
