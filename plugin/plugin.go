package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// Tick period bounds. Ticks roll cycles over on time and hand back unused
// leases; a tenth of a cycle keeps both prompt, and the bounds keep short
// cycles from ticking wastefully and long ones from sitting on leases.
const (
	minTickPeriod = 100 * time.Millisecond
	maxTickPeriod = time.Second
)

// vmContext is one Wasm VM: in Envoy, one per worker thread (and the main
// thread) for each vm_id and code.
type vmContext struct {
	types.DefaultVMContext
	vm vmConfig
	// metrics are defined once per VM and limit name, and reused when the
	// plugin is reconfigured without a new VM.
	metrics map[string]*metrics
}

// vmConfig is the VM configuration, test-only (docs/contract.md): production
// leaves it empty.
type vmConfig struct {
	// ClockProperty makes "now" the host property at this dotted path
	// (decimal Unix nanoseconds), for hosts whose clock is fake.
	ClockProperty string `json:"clock_property"`
	// MemoryProperty makes every tick write the VM's linear memory size in
	// bytes to the host property at this dotted path, for benchmarks that
	// cannot see the guest's memory from the host.
	MemoryProperty string `json:"memory_property"`
}

// OnVMStart implements types.VMContext.
func (v *vmContext) OnVMStart(size int) (status types.OnVMStartStatus) {
	defer func() {
		if r := recover(); r != nil {
			proxywasm.LogErrorf("borrowcycle: panic in OnVMStart: %v", r)
			status = types.OnVMStartStatusFailed
		}
	}()
	v.vm = vmConfig{}
	if size == 0 {
		return types.OnVMStartStatusOK
	}
	data, err := proxywasm.GetVMConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		proxywasm.LogErrorf("borrowcycle: reading the VM configuration: %v", err)
		return types.OnVMStartStatusFailed
	}
	if v.vm, err = parseVMConfig(data); err != nil {
		proxywasm.LogErrorf("borrowcycle: invalid VM configuration: %v", err)
		return types.OnVMStartStatusFailed
	}
	return types.OnVMStartStatusOK
}

func parseVMConfig(data []byte) (vmConfig, error) {
	var c vmConfig
	if len(bytes.TrimSpace(data)) == 0 {
		return c, nil
	}
	// Not json.Decoder with DisallowUnknownFields: see decodeStrict on
	// fd_read. Unknown fields are found by decoding into a map as well.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return vmConfig{}, err
	}
	for name := range fields {
		if name != "clock_property" && name != "memory_property" {
			return vmConfig{}, fmt.Errorf("unknown field %q", name)
		}
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return vmConfig{}, err
	}
	return c, nil
}

// NewPluginContext implements types.VMContext.
func (v *vmContext) NewPluginContext(uint32) types.PluginContext {
	return &pluginContext{vm: v}
}

// metricsFor returns the metrics of the limit name, defining them on first
// use in this VM.
func (v *vmContext) metricsFor(name string) (*metrics, error) {
	if m, ok := v.metrics[name]; ok {
		return m, nil
	}
	m, err := defineMetrics(name)
	if err != nil {
		return nil, err
	}
	if v.metrics == nil {
		v.metrics = make(map[string]*metrics)
	}
	v.metrics[name] = m
	return m, nil
}

// pluginContext is one plugin configuration in one VM: it owns the
// limiter, which is this worker's view of the limit.
type pluginContext struct {
	types.DefaultPluginContext
	vm        *vmContext
	cfg       pluginConfig
	clock     engine.Clock
	limiter   *engine.Limiter
	metrics   *metrics
	responder *responder
	memPath   []string
}

// OnPluginStart implements types.PluginContext.
func (p *pluginContext) OnPluginStart(int) (status types.OnPluginStartStatus) {
	defer func() {
		if r := recover(); r != nil {
			proxywasm.LogErrorf("borrowcycle: panic in OnPluginStart: %v", r)
			status = types.OnPluginStartStatusFailed
		}
	}()
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		proxywasm.LogErrorf("borrowcycle: reading the plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	cfg, err := parseConfig(data)
	if err != nil {
		proxywasm.LogError("borrowcycle: invalid configuration: " + err.Error())
		return types.OnPluginStartStatusFailed
	}
	if err := p.start(cfg); err != nil {
		proxywasm.LogErrorf("borrowcycle: start: %v", err)
		return types.OnPluginStartStatusFailed
	}
	proxywasm.LogInfo(summary(&cfg))
	return types.OnPluginStartStatusOK
}

// start builds the limiter for a valid configuration.
func (p *pluginContext) start(cfg pluginConfig) error {
	m, err := p.vm.metricsFor(cfg.Name)
	if err != nil {
		return err
	}
	p.clock = engine.SystemClock{}
	if path := p.vm.vm.ClockProperty; path != "" {
		p.clock = &propertyClock{path: strings.Split(path, ".")}
	}
	if path := p.vm.vm.MemoryProperty; path != "" {
		p.memPath = strings.Split(path, ".")
	}
	l, err := engine.New(cfg.Engine, &sharedStore{}, engine.WithClock(p.clock), engine.WithObserver(&observer{m: m}))
	if err != nil {
		return err
	}
	if err := proxywasm.SetTickPeriodMilliSeconds(uint32(tickPeriod(cfg.Engine.Cycle).Milliseconds())); err != nil {
		return fmt.Errorf("setting the tick period: %w", err)
	}
	p.cfg, p.metrics, p.limiter, p.responder = cfg, m, l, newResponder(&cfg)
	return nil
}

func tickPeriod(cycle time.Duration) time.Duration {
	return min(max(cycle/10, minTickPeriod), maxTickPeriod)
}

// summary is the one info line that says what this plugin enforces.
func summary(c *pluginConfig) string {
	mode := "enforce"
	if c.Passthrough {
		mode = "passthrough"
	}
	e := &c.Engine
	return fmt.Sprintf("borrowcycle: limit %q: capacity %d per %s, reservation %g, client header %q, mode %s, "+
		"max_clients %d, idle_cycles %d, min_cycle %s, failure_mode_deny %t, headers %s (on allowed: %t), "+
		"status %d, max_client_id_bytes %d, debug_headers %t",
		c.Name, e.Capacity, e.Cycle, e.Reservation, c.ClientHeader, mode,
		e.MaxClients, e.IdleCycles, e.MinCycle, e.FailureModeDeny, c.RateLimitHeaders, c.HeadersOnAllowed,
		c.StatusCode, c.MaxClientIDBytes, c.DebugHeaders)
}

// OnTick implements types.PluginContext.
func (p *pluginContext) OnTick() {
	defer p.recoverPanic("OnTick")
	if p.limiter == nil {
		return
	}
	p.limiter.TickAt(p.clock.Now())
	p.metrics.setActive(p.limiter.ActiveClients())
	if p.memPath != nil {
		_ = proxywasm.SetProperty(p.memPath, strconv.AppendUint(nil, linearMemoryBytes(), 10))
	}
}

// recoverPanic is deferred by every callback that has no decision to make:
// it logs the panic and counts it. It must be deferred directly.
func (p *pluginContext) recoverPanic(callback string) {
	if r := recover(); r != nil {
		p.notePanic(callback, r)
	}
}

func (p *pluginContext) notePanic(callback string, r any) {
	proxywasm.LogErrorf("borrowcycle: panic in %s: %v", callback, r)
	if p.metrics != nil {
		inc(p.metrics.panics)
	}
}

// NewHttpContext implements types.PluginContext.
func (p *pluginContext) NewHttpContext(uint32) types.HttpContext {
	return &httpContext{plugin: p}
}

// httpContext is one HTTP stream.
type httpContext struct {
	types.DefaultHttpContext
	plugin   *pluginContext
	decision engine.Decision
	decided  bool // decision holds this stream's admission
	replied  bool // this filter sent a local reply, headers included
}

// OnHttpRequestHeaders implements types.HttpContext: it admits or rejects
// the request.
func (h *httpContext) OnHttpRequestHeaders(int, bool) (action types.Action) {
	p := h.plugin
	h.decided, h.replied = false, false // the SDK's emulator may reuse a context
	if p.limiter == nil {
		return types.ActionContinue // not started: Envoy would not run the filter
	}
	defer func() {
		if r := recover(); r != nil {
			p.notePanic("OnHttpRequestHeaders", r)
			action = h.failSafe()
		}
	}()
	value, err := proxywasm.GetHttpRequestHeader(p.cfg.ClientHeader)
	id, _ := clientID(value, err == nil, p.cfg.MaxClientIDBytes)
	// An empty id is anonymous to the engine too, which applies the mode
	// (passthrough admits) and counts nothing.
	d := p.limiter.AdmitAt(p.clock.Now(), id)
	h.decision, h.decided = d, true
	p.metrics.count(d)
	if d.Allowed {
		return types.ActionContinue
	}
	return h.sendReject(d)
}

// sendReject sends the local reply; if the host refuses it, the request
// continues, because a paused stream without a reply would hang.
func (h *httpContext) sendReject(d engine.Decision) types.Action {
	if err := h.plugin.responder.reject(d); err != nil {
		proxywasm.LogWarnf("borrowcycle: sending the %s reply: %v", d.Reason, err)
		return types.ActionContinue
	}
	h.replied = true
	return types.ActionPause
}

// failSafe applies the failure mode after a panic: admit, unless
// failure_mode_deny asks to reject as for unavailable state.
func (h *httpContext) failSafe() (action types.Action) {
	p := h.plugin
	if !p.cfg.Engine.FailureModeDeny || p.cfg.Passthrough {
		return types.ActionContinue
	}
	defer func() {
		if r := recover(); r != nil {
			p.notePanic("OnHttpRequestHeaders reply", r)
			action = types.ActionContinue
		}
	}()
	d := engine.Decision{Reason: engine.ReasonStoreFailure, WouldReject: true, RetryAfter: time.Second}
	h.decision, h.decided = d, true
	return h.sendReject(d)
}

// OnHttpResponseHeaders implements types.HttpContext: it adds the
// rate-limit and debug headers to responses that came from upstream.
func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	p := h.plugin
	// A local reply already carries its headers; Envoy may run the encoder
	// path for it, and adding them again would duplicate them.
	if h.replied || !h.decided {
		return types.ActionContinue
	}
	defer p.recoverPanic("OnHttpResponseHeaders")
	p.responder.addResponseHeaders(h.decision, p.cfg.HeadersOnAllowed && p.cfg.RateLimitHeaders != styleNone)
	return types.ActionContinue
}

// propertyClock reads "now" from a host property holding decimal Unix
// nanoseconds. It exists for the SDK's wasm emulator, whose WASI clock is
// fake; see vmConfig.
type propertyClock struct {
	path []string
	last time.Time
}

// Now implements engine.Clock. When the property is missing or unreadable
// it repeats the last good reading (the wall clock before the first), so a
// test that forgets to set it sees time stand still rather than jump.
func (c *propertyClock) Now() time.Time {
	raw, err := proxywasm.GetProperty(c.path)
	if err == nil {
		if ns, perr := strconv.ParseInt(string(raw), 10, 64); perr == nil {
			c.last = time.Unix(0, ns)
			return c.last
		}
	}
	if c.last.IsZero() {
		c.last = time.Now()
	}
	return c.last
}
