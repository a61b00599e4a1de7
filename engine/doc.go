// Package engine owns Borrowcycle's limiting logic: the allocation policy,
// the cycle state machine, the client registry, admission decisions, and the
// protocol by which several workers share one limit through a Store. It is
// pure Go: it never imports proxy-wasm, and every time it uses comes from
// the caller (AdmitAt, TickAt) or an injected Clock.
//
// # The cycle lifecycle
//
// A limit admits Capacity requests per Cycle, shared by the clients it has
// seen. Each cycle:
//
//  1. Starts with shares: equal for the first cycle, and afterwards computed
//     by the Policy (Seed by default) from the previous cycle's demand.
//     Demand counts attempts, rejected ones included. Shares are integers
//     that sum to exactly Capacity.
//  2. Admits a client while its admissions in the cycle are below its
//     share; past it, the client is rejected with ReasonOverLimit until the
//     cycle ends (Decision.RetryAfter).
//  3. Ends at its deadline; the first request or tick after it rolls the
//     cycle over. It can also end early: a client seen for the first time
//     (a newcomer) ends the cycle so that it gets a share at once, and the
//     demand of the cut-short cycle is scaled up to a full cycle.
//
// Early rollovers are rate-limited by MinCycle. A newcomer that arrives
// sooner is recorded as pending and rejected with ReasonPending, with
// RetryAfter telling when the early rollover becomes allowed; every newcomer
// pending by then is registered by that one rollover. So a flood of new ids
// costs at most one rollover per MinCycle, and the pending list (bounded by
// MaxClients, like the registry) never evicts anyone: a newcomer that finds
// the table full is rejected with ReasonTableFull. Clients idle for
// IdleCycles cycles are forgotten at a rollover, returning their share.
//
// # Workers
//
// A Limiter is one worker (one Envoy worker VM). Workers share the cycle
// state, the client registry and per-client counters through a Store shaped
// like proxy-wasm shared data, and change them only by compare-and-swap. A
// worker leases a small batch of a client's share and admits from it
// locally, so the common request touches no shared state. The cap per client
// per cycle is exact across workers. docs/design.md gives the argument and
// the trade-offs.
package engine
