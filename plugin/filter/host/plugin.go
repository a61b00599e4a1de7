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
	"time"

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
	// unmatched counts requests no limit decided, for every configuration
	// of this VM; defined on first use.
	unmatched *counter
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
func (v *vmContext) NewPluginContext(id uint32) types.PluginContext {
	return &pluginContext{vm: v, id: id}
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

// unmatchedCounter returns the counter of requests no limit decided,
// defining it on first use in this VM (a host error panics into
// OnPluginStart's guard, as for defineMetrics).
func (v *vmContext) unmatchedCounter() *counter {
	if v.unmatched == nil {
		v.unmatched = &counter{id: proxywasm.DefineCounterMetric(unmatchedMetric)}
	}
	return v.unmatched
}

// pluginContext is one plugin configuration in one VM.
type pluginContext struct {
	types.DefaultPluginContext
	vm     *vmContext
	id     uint32 // the plugin context's id, the tick's effective context
	filter *filter.Filter
	// metrics are the primary limit's (its first window's): they also
	// count the plugin's panics, which belong to no one limit. limits
	// holds every limit's, by index and window (nil for unlimited rules).
	metrics   *metrics
	limits    [][]*metrics
	unmatched *counter
	replier   replier
	// fleetCalls is reused by every tick's fleet step (fleet.go).
	fleetCalls []filter.FleetCall
	// holds are the requests held for their unit (hold.go). Ticks come
	// as often as they need; housekeeping keeps its own period, from
	// lastHousekeeping.
	holds            holds
	tick             time.Duration
	housekeeping     time.Duration
	lastHousekeeping time.Time
	// While this worker reads a plan a slice at a time (planning), ticks
	// come every engine.PlanTick for it; the rest keeps the period tick,
	// from lastTick.
	planning bool
	lastTick time.Time
}

// OnPluginStart implements types.PluginContext.
func (p *pluginContext) OnPluginStart(int) (status types.OnPluginStartStatus) {
	defer guard(p, "OnPluginStart", func() { status = types.OnPluginStartStatusFailed })
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		proxywasm.LogErrorf("borrowcycle: reading the plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	cfg, err := filter.ParseSettings(data)
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
func (p *pluginContext) start(set filter.Settings) error {
	ms := make([][]*metrics, len(set.Limits)) // nil for unlimited rules
	for i := range set.Limits {
		c := &set.Limits[i]
		if c.Unlimited {
			continue
		}
		for _, w := range c.EngineWindows() {
			ms[i] = append(ms[i], p.vm.metricsFor(filter.MetricsName(c.Name, w)))
		}
		if c.Engine.Fleet != nil {
			ms[i][0].defineFleet(c.Name)
		}
	}
	unmatched := p.vm.unmatchedCounter()
	store := &sharedStore{zeroCAS: p.vm.test.ZeroCAS}
	f, err := filter.New(set, store, p.vm.test.clock(), func(i, w int) engine.Observer { return &observer{m: ms[i][w]} })
	if err != nil {
		return err
	}
	if err := proxywasm.SetTickPeriodMilliSeconds(uint32(f.TickPeriod().Milliseconds())); err != nil {
		return fmt.Errorf("setting the tick period: %w", err)
	}
	p.filter, p.metrics, p.limits, p.unmatched = f, ms[set.Primary()][0], ms, unmatched
	p.holds = holds{perLimit: make([]int, len(set.Limits)), refused: map[heldKey]time.Time{}}
	p.tick, p.housekeeping = f.TickPeriod(), f.HousekeepingPeriod()
	return nil
}

// OnTick implements types.PluginContext.
func (p *pluginContext) OnTick() {
	defer guard(p, "OnTick", nil)
	if p.filter == nil {
		return
	}
	aged, fast := p.period(), p.planning // (what brought this tick)
	p.setPlanning(p.filter.Plan())
	p.serveHeld(false, aged)
	if fast && p.planning {
		// (A clock that stepped back reads a negative time since: due.)
		now := p.filter.Now()
		if since := now.Sub(p.lastTick); since >= 0 && since < p.tick-engine.PlanTick/2 {
			return
		}
		p.lastTick = now
	}
	defer func() { p.setPlanning(p.filter.Planning()) }() // (a tick may start a plan)
	if p.tick < p.housekeeping {
		// Ticks come often for held requests; the rest keeps its period.
		// (A clock that stepped back reads a negative time since: due.)
		now := p.filter.Now()
		if since := now.Sub(p.lastHousekeeping); since >= 0 && since < p.housekeeping-p.tick/2 {
			return
		}
		p.lastHousekeeping = now
	}
	// Counters first: a tick that panics below must not hold them back.
	for _, windows := range p.limits {
		for _, m := range windows {
			m.flush()
		}
	}
	p.metrics.flushCounter(p.unmatched)
	p.filter.Tick(p.setActive)
	p.fleetTick()
	p.vm.test.reportMemory()
}

// setPlanning sets the tick period for reading a plan a slice at a time
// (on), or back to the filter's own.
func (p *pluginContext) setPlanning(on bool) {
	if on == p.planning {
		return
	}
	if on {
		p.lastTick = p.filter.Now()
	}
	was := p.planning
	p.planning = on
	if err := proxywasm.SetTickPeriodMilliSeconds(uint32(p.period().Milliseconds())); err != nil {
		proxywasm.LogWarnf("borrowcycle: setting the tick period to %v: %v", p.period(), err)
		p.planning = was
	}
}

// period is the tick period set: the filter's, or engine.PlanTick while
// this worker reads a plan in slices, if that is shorter.
func (p *pluginContext) period() time.Duration {
	if p.planning {
		return min(p.tick, engine.PlanTick)
	}
	return p.tick
}

// setActive records the number of clients registered in the i-th limit's
// w-th window.
func (p *pluginContext) setActive(i, w, clients int) { p.limits[i][w].setActive(clients) }

// NewHttpContext implements types.PluginContext.
func (p *pluginContext) NewHttpContext(id uint32) types.HttpContext {
	return &httpContext{plugin: p, id: id}
}

// httpContext is one HTTP stream.
type httpContext struct {
	types.DefaultHttpContext
	plugin *pluginContext
	id     uint32
	held   *held // while its request is held (hold.go)
	stream
}

// stream is what a stream remembers between its request and its response.
type stream struct {
	outcome filter.Outcome
	decided bool // outcome holds this stream's admission
	replied bool // this filter sent a local reply, headers included
}

// OnHttpRequestHeaders implements types.HttpContext: it admits or rejects
// the request.
func (h *httpContext) OnHttpRequestHeaders(int, bool) (action types.Action) {
	f := h.plugin.filter
	if f == nil {
		return types.ActionContinue // not started: Envoy would not run the filter
	}
	defer guard(h.plugin, "OnHttpRequestHeaders", func() { action = h.failSafe() })
	o := f.Decide(requestHeaders{})
	if !o.Matched() {
		h.plugin.unmatched.pending++
		return types.ActionContinue
	}
	if wait, ok := f.Hold(o, 0); ok && h.plugin.hold(h, o, wait) {
		return types.ActionPause // decided again on tick (hold.go)
	}
	h.plugin.limits[o.Limit][o.Window].count(o.Decision)
	// The record is only information: a host that refuses it (or a
	// listener without access logs) changes nothing for the request.
	_ = setAccessLog(f.AccessLog(o))
	return h.carryOut(o)
}

// requestHeaders reads the current request's headers and properties from
// the host, on demand. It has no fields, so passing it as a filter.Request
// allocates nothing.
type requestHeaders struct{}

// Header implements filter.Request.
func (requestHeaders) Header(name string) (string, bool) {
	v, err := proxywasm.GetHttpRequestHeader(name)
	return v, err == nil
}

// HeaderCopies implements filter.Request. proxy_get_header_map_value
// returns only the first of several copies of a header, so it cannot tell
// one copy from two; the whole map can, at the price of copying every
// header into the guest once (headers_wasm.go, headers_other.go).
func (requestHeaders) HeaderCopies(name string) (string, int) { return headerCopies(name) }

// Property implements filter.Request (property_wasm.go, property_other.go).
func (requestHeaders) Property(path string) ([]byte, bool) {
	v, err := getProperty(path)
	return v, err == nil
}

// carryOut records the decision for the response and sends the local
// reply of a rejection. If the host refuses the reply, the request
// continues, because a paused stream without a reply would hang.
func (h *httpContext) carryOut(o filter.Outcome) types.Action {
	h.stream = stream{outcome: o, decided: true}
	d := &o.Decision
	if d.Allowed {
		return types.ActionContinue
	}
	if err := h.plugin.replier.send(h.plugin.filter.Reply(o)); err != nil {
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
	o := h.plugin.filter.FailSafe()
	if o.Decision.Allowed {
		h.stream = stream{}
		return types.ActionContinue
	}
	defer guard(h.plugin, "OnHttpRequestHeaders reply", func() { action = types.ActionContinue })
	return h.carryOut(o)
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
	for _, kv := range h.plugin.filter.ResponseHeaders(h.outcome) {
		// Replaced, not added: the client reads one set of rate-limit
		// headers, this limit's, not a second from the upstream beside it.
		// A refused header only loses information; the response goes on.
		_ = proxywasm.ReplaceHttpResponseHeader(kv[0], kv[1])
	}
	return types.ActionContinue
}
