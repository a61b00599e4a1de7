package host

import (
	"errors"
	"math"
	"time"

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
//
// Requests and engine events are counted here, in the VM, and handed to the
// host on tick (flush): a request makes no metric call, and the stats lag by
// at most one tick period.
type metrics struct {
	allowed       counter
	rejected      []counter // by engine.Reason; ReasonOK unused
	wouldReject   []counter // by engine.Reason; ReasonOK unused
	rolloverEarly counter
	rolloverDue   counter
	casRetries    counter
	casExhausted  counter
	clockJumps    counter
	storeFailures counter
	panics        counter
	delayedReqs   counter    // requests admitted after being held (hold.go)
	abandoned     counter    // held requests whose stream ended before they were decided
	lent          counter    // units of equal shares left to others, per closed window
	borrowed      counter    // units granted beyond equal shares, per closed window
	all           []*counter // every counter above, for flush
	clientsActive proxywasm.MetricGauge
	heldBelow     proxywasm.MetricGauge     // clients granted less than they asked for, in the last closed window
	jain          proxywasm.MetricGauge     // Jain's index of the last closed window, in thousandths
	fairness      gaugeValues               // held below and Jain, for the next flush
	waited        proxywasm.MetricHistogram // how long each of requests_delayed was held, in ms
	fleet         *fleetCounters            // fleet limits only (fleet.go)

	lastActive int    // last value recorded in clientsActive; -1 before any
	refused    uint64 // host calls that failed, for the log's back-off
}

// counter is one counter metric and the increments not yet handed to the
// host.
type counter struct {
	id      proxywasm.MetricCounter
	pending uint64
}

// defineMetrics defines every metric of the limit name (filter.MetricsName). The SDK's Define*
// functions panic on a host error; OnPluginStart's guard turns that into a
// failed start.
func defineMetrics(name string) *metrics {
	prefix := "borrowcycle." + name + "."
	reasons := engine.Reasons()
	m := &metrics{
		rejected:    make([]counter, len(reasons)),
		wouldReject: make([]counter, len(reasons)),
		lastActive:  -1,
	}
	def := func(c *counter, suffix string) {
		c.id = proxywasm.DefineCounterMetric(prefix + suffix)
		m.all = append(m.all, c)
	}
	def(&m.allowed, "requests_allowed")
	def(&m.rolloverDue, "rollovers.deadline")
	def(&m.rolloverEarly, "rollovers.early")
	def(&m.casRetries, "cas_retries")
	def(&m.casExhausted, "cas_exhausted")
	def(&m.clockJumps, "clock_jumps")
	def(&m.storeFailures, "store_failures")
	def(&m.panics, "panics")
	def(&m.delayedReqs, "requests_delayed")
	def(&m.abandoned, "requests_abandoned")
	def(&m.lent, "units_lent")
	def(&m.borrowed, "units_borrowed")
	for _, r := range reasons {
		if r != engine.ReasonOK {
			def(&m.rejected[r], "requests_rejected."+r.String())
			def(&m.wouldReject[r], "requests_would_reject."+r.String())
		}
	}
	m.clientsActive = proxywasm.DefineGaugeMetric(prefix + "clients_active")
	m.heldBelow = proxywasm.DefineGaugeMetric(prefix + "clients_held_below")
	m.jain = proxywasm.DefineGaugeMetric(prefix + "jain_index_permille")
	m.waited = proxywasm.DefineHistogramMetric(prefix + "wait_ms")
	return m
}

// delayed records a request admitted after being held for waited. It is
// called on tick (hold.go), so the histogram's host call is not a
// request's.
func (m *metrics) delayed(waited time.Duration) {
	m.delayedReqs.pending++
	m.hostCall(func() { m.waited.Record(uint64(max(0, waited.Milliseconds()))) })
}

// judged records how the window a roll closed went. Only the worker that
// rolled past it hears of it, once per window, maybe within a request: the
// counters add its units up and the gauges take the window's values, all
// handed to the host on tick (flush), like every other metric.
func (m *metrics) judged(w engine.WindowFairness) {
	m.lent.pending += uint64(max(0, w.Lent))
	m.borrowed.pending += uint64(max(0, w.Borrowed))
	m.fairness = gaugeValues{heldBelow: uint64(max(0, w.HeldBelow)), jain: uint64(math.Round(1000 * w.Jain)), pending: true}
}

// gaugeValues are the fairness gauges' values not yet handed to the host.
type gaugeValues struct {
	heldBelow, jain uint64
	pending         bool
}

// setGauge sets a gauge's value (see setActive for the conversion).
func (m *metrics) setGauge(g proxywasm.MetricGauge, v uint64) bool {
	return m.hostCall(func() { proxywasm.MetricHistogram(g).Record(v) })
}

// count records the outcome of one decision.
func (m *metrics) count(d engine.Decision) {
	switch {
	case !d.Allowed:
		m.rejected[d.Reason].pending++
	case d.WouldReject:
		m.allowed.pending++
		m.wouldReject[d.Reason].pending++
	default:
		m.allowed.pending++
	}
}

// flush hands every pending increment to the host. An increment the host
// refuses stays pending for the next tick.
func (m *metrics) flush() {
	for _, c := range m.all {
		m.flushCounter(c)
	}
	if g := &m.fairness; g.pending && m.setGauge(m.heldBelow, g.heldBelow) && m.setGauge(m.jain, g.jain) {
		g.pending = false
	}
}

// flushCounter hands c's pending increments to the host, keeping them for
// the next tick if the host refuses.
func (m *metrics) flushCounter(c *counter) {
	if c.pending > 0 && m.hostCall(func() { c.id.Increment(c.pending) }) {
		c.pending = 0
	}
}

// setActive records the number of registered clients. The gauge is set,
// not added to: every worker reports the same shared table, and Envoy
// resolves all workers' gauges to one stat, so adding each worker's deltas
// would count the table once per worker. The SDK only exposes
// proxy_record_metric through MetricHistogram, and the ABI call sets a
// gauge's value, hence the conversion.
func (m *metrics) setActive(n int) {
	if n != m.lastActive && n >= 0 && m.setGauge(m.clientsActive, uint64(n)) {
		m.lastActive = n
	}
}

// hostCall makes one metric call. The SDK panics when the host refuses;
// a metric is not worth failing a tick for, so the refusal is reported as
// false and logged on the 1st, 2nd, 4th, 8th... time.
func (m *metrics) hostCall(call func()) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			ok = false
			m.refused++
			if m.refused&(m.refused-1) == 0 {
				proxywasm.LogWarnf("borrowcycle: metric update refused: %v (%d times on this worker)", r, m.refused)
			}
		}
	}()
	call()
	return true
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
	switch {
	case ev.Completes:
		// (The rollover was counted when its provisional plan was published.)
	case ev.Early:
		o.m.rolloverEarly.pending++
	default:
		o.m.rolloverDue.pending++
	}
	if ev.Closed.Judged {
		o.m.judged(ev.Closed)
	}
	proxywasm.LogDebugf("borrowcycle: plan %d published (re-plan=%t, provisional=%t, read in slices=%t): %d clients, %d registered, %d forgotten",
		ev.Plan, ev.Early, ev.Provisional, ev.Completes, ev.Clients, ev.Registered, ev.Forgotten)
}

// CASRetry implements engine.Observer.
func (o *observer) CASRetry() { o.m.casRetries.pending++ }

// StoreFailure implements engine.Observer. While shared data is failing this
// can happen on every request, so only the 1st, 2nd, 4th, 8th... failure of
// this worker is logged: the log shows the problem and how it grows without
// a line per request. The counter has every one.
//
// CAS retries that ran out are contention, not a failure of the store: they
// count in cas_exhausted (the request is refused as contended), and are not
// logged.
func (o *observer) StoreFailure(op string, err error) {
	if errors.Is(err, engine.ErrRetriesExhausted) {
		o.m.casExhausted.pending++
		return
	}
	o.m.storeFailures.pending++
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

// ClockJump implements engine.Observer: this worker found the clock behind
// a window that stopped moving and opened one after it. It happens once per
// jump in the whole process (the worker that opens the window tells), so
// it is logged every time.
func (o *observer) ClockJump(shift time.Duration) {
	o.m.clockJumps.pending++
	proxywasm.LogWarnf("borrowcycle: the clock read behind the newest window for a cycle and more while it did not move (a clock that ran ahead came back, or stepped back): opened a new window, clocks shifted by %s", shift)
}
