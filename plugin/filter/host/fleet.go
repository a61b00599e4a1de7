package host

import (
	"errors"
	"strconv"

	"github.com/borrowcycle/borrowcycle/plugin/filter"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
)

// Fleet mode's host side: on every tick, every worker runs the filter's
// fleet step; the elected syncer gets the callouts due and sends them to
// Gubernator's HTTP gateway with DispatchHttpCall. No request waits on one:
// the answer only changes what the process holds for later requests.

// fleetCounters are a fleet limit's metrics (docs/contract.md, "Fleet
// mode"), defined with the limit's others and flushed with them on tick.
type fleetCounters struct {
	callouts  counter // callouts attempted (by this process's syncer), retries included
	failures  counter // callouts that failed, timed out or got garbage
	fallbacks counter // fallback episodes opened
	leased    counter // units leased from Gubernator
	givenBack counter // units given back to Gubernator
}

// defineFleet defines the fleet counters of the limit name once per VM.
func (m *metrics) defineFleet(name string) {
	if m.fleet != nil {
		return
	}
	f := &fleetCounters{}
	prefix := "borrowcycle." + name + ".fleet."
	for _, c := range []struct {
		c      *counter
		suffix string
	}{{&f.callouts, "callouts"}, {&f.failures, "failures"}, {&f.fallbacks, "fallbacks"}, {&f.leased, "leased"}, {&f.givenBack, "given_back"}} {
		c.c.id = proxywasm.DefineCounterMetric(prefix + c.suffix)
		m.all = append(m.all, c.c)
	}
	m.fleet = f
}

// fleetTick sends the callouts due. The calls are copied into each
// callback, so the reused slice may change before the answers come.
func (p *pluginContext) fleetTick() {
	p.fleetCalls = p.filter.FleetCalls(p.fleetCalls[:0])
	for _, c := range p.fleetCalls {
		p.dispatch(c)
	}
}

// dispatch sends one callout; a refused dispatch is a failed callout.
func (p *pluginContext) dispatch(c filter.FleetCall) {
	headers := [][2]string{
		{":method", "POST"}, {":path", filter.GubernatorPath}, {":authority", c.Cluster},
		{"content-type", "application/json"},
	}
	_, err := proxywasm.DispatchHttpCall(c.Cluster, headers, c.Body, nil, uint32(max(c.Timeout.Milliseconds(), 1)), // 0 would mean no timeout
		func(_, bodySize, _ int) {
			defer guard(p, "fleet callout", nil)
			status, body := calloutAnswer(bodySize)
			if r, ok := c.Retry(status); ok {
				p.dispatch(r)
				return
			}
			p.fleetDone(&c, status, body, nil)
		})
	p.limits[c.Limit][0].fleet.callouts.pending++ // every attempt, so failures never outnumber callouts
	if err != nil {
		// Logged every time, not once per episode: a refused dispatch is a
		// configuration error (a cluster Envoy does not know), not an outage.
		cfg := &p.filter.Settings().Limits[c.Limit]
		proxywasm.LogErrorf("borrowcycle: %s: fleet: Envoy refused the callout to cluster %q (%v): is fleet.cluster the name of a cluster of this Envoy?",
			cfg.Name, c.Cluster, err)
		p.fleetDone(&c, 0, nil, errors.New("dispatch to cluster "+strconv.Quote(c.Cluster)+": "+err.Error()))
	}
}

// calloutAnswer reads the answer's status (0 when Envoy got none: a
// timeout or a connection failure) and at most a little more body than the
// filter accepts.
func calloutAnswer(bodySize int) (int, []byte) {
	status := 0
	headers, _ := proxywasm.GetHttpCallResponseHeaders()
	for _, h := range headers {
		if h[0] == ":status" {
			status, _ = strconv.Atoi(h[1])
		}
	}
	if bodySize <= 0 {
		return status, nil
	}
	body, err := proxywasm.GetHttpCallResponseBody(0, min(bodySize, filter.MaxFleetReply+1))
	if err != nil {
		return status, nil
	}
	return status, body
}

// fleetDone applies an answer, counts it, and logs the start and the end
// of a fallback episode (once each, on the syncer that saw it).
func (p *pluginContext) fleetDone(c *filter.FleetCall, status int, body []byte, err error) {
	ev := p.filter.FleetDone(c, status, body, err)
	fc := p.limits[c.Limit][0].fleet
	cfg := &p.filter.Settings().Limits[c.Limit]
	if ev.Failed {
		fc.failures.pending++
	}
	fc.leased.pending += uint64(max(ev.Leased, 0))
	fc.givenBack.pending += uint64(max(ev.GivenBack, 0))
	if ev.LostCount {
		proxywasm.LogWarnf("borrowcycle: %s: fleet: Gubernator (cluster %q) answered from a new count for a window this Envoy holds units of (a peer restarted, or a key changed owner): leasing nothing more for that window",
			cfg.Name, c.Cluster)
	}
	switch {
	case ev.FellBack:
		fc.fallbacks.pending++
		proxywasm.LogWarnf("borrowcycle: %s: fleet: Gubernator (cluster %q) failed: %s; admitting at most fallback_capacity=%d per window until it answers",
			cfg.Name, c.Cluster, ev.Cause, cfg.Engine.Fleet.Fallback)
	case ev.Rejoined:
		proxywasm.LogInfof("borrowcycle: %s: fleet: Gubernator (cluster %q) answers again; leasing from the fleet capacity (the fallback stays the floor of this window)",
			cfg.Name, c.Cluster)
	}
}
