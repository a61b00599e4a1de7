// Package filter is Borrowcycle's HTTP filter without its host: the plugin
// configuration (config.go), the client id (clientid.go), and the request
// path from a client header to a decision and from a decision to what the
// host must send (this file, responses.go). Nothing here calls the host, so
// every rule of docs/contract.md is testable as a plain function; package
// host is the proxy-wasm adapter that reads headers, makes the calls and
// keeps the metrics. The limiting itself (cycles, shares, leases) lives in
// package engine.
package filter

import (
	"fmt"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// Filter is one plugin configuration in one VM: its limiter (this worker's
// view of the limit) and the responses it plans. Like the VM that holds it,
// it runs one callback at a time.
type Filter struct {
	cfg     Config
	clock   engine.Clock
	limiter *engine.Limiter
	resp    responder
}

// New builds the filter of a valid configuration over store, the state all
// workers share. obs may be nil.
func New(cfg Config, store engine.Store, clock engine.Clock, obs engine.Observer) (*Filter, error) {
	opts := []engine.Option{engine.WithClock(clock)}
	if obs != nil {
		opts = append(opts, engine.WithObserver(obs))
	}
	l, err := engine.New(cfg.Engine, store, opts...)
	if err != nil {
		return nil, err
	}
	return &Filter{cfg: cfg, clock: clock, limiter: l, resp: newResponder(&cfg)}, nil
}

// Config is the configuration the filter runs.
func (f *Filter) Config() *Config { return &f.cfg }

// Decide admits or rejects one request, given the value of its client
// header (found false when the header is absent). An anonymous request has
// the empty id, to which the engine applies the mode (passthrough admits)
// and counts nothing.
func (f *Filter) Decide(value string, found bool) engine.Decision {
	id, _ := ClientID(value, found, f.cfg.MaxClientIDBytes)
	return f.limiter.AdmitAt(f.clock.Now(), id)
}

// FailSafe is the decision when Decide could not finish (a panic below it):
// admit, unless failure_mode_deny asks to reject as for unavailable state.
func (f *Filter) FailSafe() engine.Decision {
	if !f.cfg.Engine.FailureModeDeny || f.cfg.Passthrough {
		return engine.Decision{Allowed: true, Reason: engine.ReasonStoreFailure}
	}
	return engine.Decision{Reason: engine.ReasonStoreFailure, WouldReject: true, RetryAfter: time.Second}
}

// Reply is the local reply for a rejected decision. It is valid until the
// next call of Reply or ResponseHeaders.
func (f *Filter) Reply(d engine.Decision) Reply { return f.resp.reply(d) }

// ResponseHeaders are the headers to add to the upstream response of an
// admitted request; often none. They are valid until the next call of Reply
// or ResponseHeaders.
func (f *Filter) ResponseHeaders(d engine.Decision) [][2]string { return f.resp.responseHeaders(d) }

// Tick rolls the cycle over when due and hands back unused leases; it
// returns the number of clients the shared table holds.
func (f *Filter) Tick() int {
	f.limiter.TickAt(f.clock.Now())
	return f.limiter.ActiveClients()
}

// Summary is the one info line that says what this filter enforces.
func (f *Filter) Summary() string {
	c := &f.cfg
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
