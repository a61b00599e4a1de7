package host

import (
	"fmt"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
)

// unmatchedMetric counts requests that no limit decided (none matched, or
// an unlimited rule did): they pass unlimited. It has no limit name, so it
// stays outside the per-limit names (and the stats_tags that split them).
const unmatchedMetric = "borrowcycle.requests_unlimited"

// metrics are the limit's counters and gauge, named per docs/contract.md.
// Envoy resolves every worker's definition of a name to one process-wide
// stat, so counters add up across workers.
type metrics struct {
	allowed       proxywasm.MetricCounter
	rejected      []proxywasm.MetricCounter // by engine.Reason; ReasonOK unused
	wouldReject   []proxywasm.MetricCounter // by engine.Reason; ReasonOK unused
	rolloverEarly proxywasm.MetricCounter
	rolloverDue   proxywasm.MetricCounter
	clientsActive proxywasm.MetricGauge
	casRetries    proxywasm.MetricCounter
	storeFailures proxywasm.MetricCounter
	panics        proxywasm.MetricCounter

	lastActive int // last value recorded in clientsActive; -1 before any
}

// defineMetrics defines every metric of the limit name. The SDK's Define*
// functions panic on a host error; that is turned into an error so that
// OnPluginStart fails cleanly instead of trapping the VM.
func defineMetrics(name string) (m *metrics, err error) {
	defer func() {
		if r := recover(); r != nil {
			m, err = nil, fmt.Errorf("defining metrics: %v", r)
		}
	}()
	prefix := "borrowcycle." + name + "."
	reasons := engine.Reasons()
	m = &metrics{
		allowed:       proxywasm.DefineCounterMetric(prefix + "requests_allowed"),
		rejected:      make([]proxywasm.MetricCounter, len(reasons)),
		wouldReject:   make([]proxywasm.MetricCounter, len(reasons)),
		rolloverDue:   proxywasm.DefineCounterMetric(prefix + "rollovers.deadline"),
		rolloverEarly: proxywasm.DefineCounterMetric(prefix + "rollovers.early"),
		clientsActive: proxywasm.DefineGaugeMetric(prefix + "clients_active"),
		casRetries:    proxywasm.DefineCounterMetric(prefix + "cas_retries"),
		storeFailures: proxywasm.DefineCounterMetric(prefix + "store_failures"),
		panics:        proxywasm.DefineCounterMetric(prefix + "panics"),
		lastActive:    -1,
	}
	for _, r := range reasons {
		if r == engine.ReasonOK {
			continue
		}
		m.rejected[r] = proxywasm.DefineCounterMetric(prefix + "requests_rejected." + r.String())
		m.wouldReject[r] = proxywasm.DefineCounterMetric(prefix + "requests_would_reject." + r.String())
	}
	return m, nil
}

// inc increments c. The SDK panics when the host refuses; a metric is not
// worth failing a request for, so the panic is absorbed here, where it
// cannot interrupt a decision half made.
func inc(c proxywasm.MetricCounter) {
	defer func() { _ = recover() }()
	c.Increment(1)
}

// panic counts a recovered panic.
func (m *metrics) panic() { inc(m.panics) }

// count records the outcome of one decision.
func (m *metrics) count(d engine.Decision) {
	switch {
	case !d.Allowed:
		m.byReason(m.rejected, d.Reason)
	case d.WouldReject:
		inc(m.allowed)
		m.byReason(m.wouldReject, d.Reason)
	default:
		inc(m.allowed)
	}
}

func (m *metrics) byReason(list []proxywasm.MetricCounter, r engine.Reason) {
	if r != engine.ReasonOK && int(r) < len(list) {
		inc(list[r])
	}
}

// setActive records the number of registered clients. The gauge is set,
// not added to: every worker reports the same shared table, and Envoy
// resolves all workers' gauges to one stat, so adding each worker's deltas
// would count the table once per worker. The SDK only exposes
// proxy_record_metric through MetricHistogram, and the ABI call sets a
// gauge's value, hence the conversion.
func (m *metrics) setActive(n int) {
	if n == m.lastActive || n < 0 {
		return
	}
	defer func() { _ = recover() }()
	proxywasm.MetricHistogram(m.clientsActive).Record(uint64(n))
	m.lastActive = n
}

// observer is the engine.Observer of one plugin context: it counts the
// engine's rare events and logs the ones an operator must see.
type observer struct {
	m          *metrics
	failures   uint64
	unreadable uint64
}

// Rollover implements engine.Observer.
func (o *observer) Rollover(ev engine.RolloverEvent) {
	if ev.Early {
		inc(o.m.rolloverEarly)
	} else {
		inc(o.m.rolloverDue)
	}
	o.m.setActive(ev.Clients)
	proxywasm.LogDebugf("borrowcycle: cycle %d started (early=%t): %d clients, %d registered, %d forgotten",
		ev.Cycle, ev.Early, ev.Clients, ev.Registered, ev.Forgotten)
}

// CASRetry implements engine.Observer.
func (o *observer) CASRetry() { inc(o.m.casRetries) }

// StoreFailure implements engine.Observer. While shared data is failing this
// can happen on every request, so only the 1st, 2nd, 4th, 8th... failure of
// this worker is logged: the log shows the problem and how it grows without
// a line per request. The counter has every one.
func (o *observer) StoreFailure(op string, err error) {
	inc(o.m.storeFailures)
	o.failures++
	if o.failures&(o.failures-1) == 0 {
		proxywasm.LogWarnf("borrowcycle: shared state %s failed: %v (failure %d on this worker)", op, err, o.failures)
	}
}

// ValueReset implements engine.Observer. An unreadable value stays so until
// a rollover repairs it, so it is logged like store failures: the 1st, 2nd,
// 4th, 8th... time on this worker.
func (o *observer) ValueReset(key string, err error) {
	o.unreadable++
	if o.unreadable&(o.unreadable-1) == 0 {
		proxywasm.LogWarnf("borrowcycle: unreadable shared value %q (repaired at the next rollover): %v (seen %d times on this worker)",
			key, err, o.unreadable)
	}
}
