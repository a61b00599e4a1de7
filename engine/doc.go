// Package engine owns Borrowcycle's limiting logic: the allocation policy,
// the window state machine, the client view, admission decisions, and
// the protocol by which several workers share one limit through a Store. It
// is pure Go: it never imports proxy-wasm, and every time it uses comes from
// the caller (AdmitAt, AdmitNAt, TickAt, RegisterAt).
//
// # Windows, plans and shares
//
// A limit admits Capacity units per aligned window of length Cycle (window k
// spans [k·Cycle + WindowOffset, (k+1)·Cycle + WindowOffset), see
// WindowAt), shared by the clients it counts:
//
//  1. Each window starts with a plan: shares computed by the Policy (Seed by
//     default) from the previous window's demand, which counts units asked
//     for, rejected ones included. Shares are integers that sum to exactly
//     Capacity.
//  2. A client is admitted while it has share left; past it, it is rejected
//     with ReasonOverLimit, and Decision.RetryAfter says when a retry can
//     succeed: the window's end under Seed, unpaced; sooner under Fair,
//     pacing or fleet mode (retryAfter).
//  3. A client seen for the first time (a newcomer) re-plans the rest of the
//     window: full-window shares with it counted in, scaled to what the
//     window has left. Re-plans are at least MinCycle apart; a newcomer that
//     comes sooner waits (ReasonPending). A newcomer is unproven until it
//     asks again: a re-plan counts at most one unproven newcomer (the one
//     whose request made it), at the units it asked for, and every proven
//     one, at the default share; so a flood of one-shot ids cannot dilute
//     the known clients' shares. Beyond MaxClients, newcomers get
//     ReasonTableFull and nobody is evicted. Clients idle for more than
//     IdleCycles windows are forgotten (unproven ones after one, or after
//     20 × MinCycle, whichever comes first: see retired).
//
// Each plan has an id, never reused, which Decision.Plan reports: the share
// period the request was counted in.
//
// # Workers
//
// A Limiter is one worker (one Envoy worker VM). Workers share a small plan
// key, a window budget and buckets of client entries through a Store shaped
// like proxy-wasm shared data, and change them only by compare-and-swap. A
// worker leases a small batch of a client's share, taken from the window
// budget first, and admits from it locally, so the common request touches
// no shared state. Every window admits at most its capacity, and every
// client at most its share under each plan, across all workers.
//
// The code follows that split, and a request's path runs one way:
// limiter.go, then view.go, then the records, each using rules.go; no file
// calls back into a file that calls it (structure_test.go), except through
// what a caller hands down: a transaction's change, the fleet's holding.
//   - Each shared record (record_*.go; the fleet record in fleet.go) owns
//     its type, its encoding, its key and its only read-modify-write, all
//     through one compare-and-swap loop (record.go).
//   - The pure rules (rules.go) take no Store: the transition decides
//     whether to stay, roll into a new window, jump past a stuck one,
//     re-plan, hold a newcomer or refuse it; then the shares and the
//     newcomer rules, the policies with weights and the borrow gate, pacing
//     and lease sizing, and fleet sizing.
//   - The view (view.go) is one worker's part: it keeps the plan current,
//     leases a counted client's units (sync) and finds or registers the
//     others (arrive), and holds what the worker knows between calls.
//   - The Limiter (limiter.go) reads the clock, orchestrates, and turns
//     what the view did into decisions.
//
// docs/design.md gives the argument, and the bound per true-time window.
//
// # Fleet mode
//
// With Config.Fleet set, several processes share one capacity: each leases
// its window budget from Gubernator, and the budget grants at most what the
// process holds (fleet.go; docs/design.md, "Fleet mode").
package engine
