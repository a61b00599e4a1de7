// Package capcheck is the one checker of Borrowcycle's two admission
// invariants, shared by every layer that tests them: the engine's worker
// tests, the simulator, the multi-VM wasm host and the real-Envoy suite.
//
//   - Window: in every aligned wall-clock window, the units admitted across
//     all workers are at most the capacity.
//   - Share: in every share period (the span over which one announced share
//     holds for a client), the units admitted to the client are at most that
//     share.
//
// Callers say which window and share period each admission belongs to; the
// checker only counts. It imports nothing of the engine, so the engine's own
// in-package tests can use it.
//
// An observer outside the process (a client timing its responses) cannot
// always tell which window decided a request: one decided just before a
// boundary can be received just after it. Such an admission is marked Edge
// and counted in the window it was received in, which may then exceed the
// capacity by at most its edge admissions; nothing else is tolerated.
package capcheck

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// Admission is one admitted request, as the caller attributes it.
type Admission struct {
	// Window is the aligned window index the admission counts in.
	Window int64
	// Period identifies the share period (for the engine, the plan id that
	// announced the share). Admissions with the same Period and Client are
	// held to one share.
	Period uint64
	// Client is the client id (or its hash, formatted by the caller). An
	// admission without one (anonymous, or admitted by passthrough or on a
	// store failure) counts in its window only: no share was announced.
	Client string
	// Share is the share announced with the admission.
	Share int64
	// Cost is the units the admission took; 0 counts as 1.
	Cost int64
	// Edge marks an admission that may have been decided in the window
	// before Window (see the package doc): Window may exceed the capacity
	// by the edge admissions it holds.
	Edge bool
}

// Kind says which invariant a Violation breaks.
type Kind uint8

const (
	// OverCapacity: a window admitted more than the capacity.
	OverCapacity Kind = iota + 1
	// OverShare: a client was admitted more than its share in a period.
	OverShare
	// MixedShares: admissions of one client in one period announced
	// different shares, so "the share" of that period is not one number.
	MixedShares
)

func (k Kind) String() string {
	switch k {
	case OverCapacity:
		return "over capacity"
	case OverShare:
		return "over share"
	case MixedShares:
		return "mixed shares"
	}
	return "unknown"
}

// Violation is one broken invariant.
type Violation struct {
	Kind     Kind
	Window   int64  // OverCapacity
	Period   uint64 // OverShare, MixedShares
	Client   string // OverShare, MixedShares
	Admitted int64
	Limit    int64 // the capacity, or the share (the larger one for MixedShares)
	Edge     int64 // OverCapacity: the edge admissions tolerated on top of Limit
}

func (v Violation) String() string {
	switch v.Kind {
	case OverCapacity:
		if v.Edge > 0 {
			return fmt.Sprintf("window %d: admitted %d > capacity %d + %d at the edge", v.Window, v.Admitted, v.Limit, v.Edge)
		}
		return fmt.Sprintf("window %d: admitted %d > capacity %d", v.Window, v.Admitted, v.Limit)
	case MixedShares:
		return fmt.Sprintf("period %d client %s: admissions announce different shares (up to %d)", v.Period, v.Client, v.Limit)
	}
	return fmt.Sprintf("period %d client %s: admitted %d > share %d", v.Period, v.Client, v.Admitted, v.Limit)
}

type periodKey struct {
	period uint64
	client string
}

type periodTally struct {
	admitted int64
	share    int64
	mixed    bool
}

// Checker tallies admissions and reports violations. It is safe for
// concurrent use, so goroutines playing workers can share one.
type Checker struct {
	capacity int64

	mu       sync.Mutex
	windows  map[int64]int64
	edges    map[int64]int64 // edge admissions per window
	periods  map[periodKey]*periodTally
	admitted int64
}

// New returns a checker for a limit of capacity units per window.
func New(capacity int64) *Checker {
	return &Checker{
		capacity: capacity,
		windows:  make(map[int64]int64),
		edges:    make(map[int64]int64),
		periods:  make(map[periodKey]*periodTally),
	}
}

// Capacity is the limit per window the checker holds windows to.
func (c *Checker) Capacity() int64 { return c.capacity }

// Admit records one admission.
func (c *Checker) Admit(a Admission) {
	cost := a.Cost
	if cost <= 0 {
		cost = 1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.admitted += cost
	c.windows[a.Window] += cost
	if a.Edge {
		c.edges[a.Window] += cost
	}
	if a.Client == "" {
		return
	}
	k := periodKey{a.Period, a.Client}
	p := c.periods[k]
	if p == nil {
		p = &periodTally{share: a.Share}
		c.periods[k] = p
	}
	if p.share != a.Share {
		p.mixed = true
		p.share = max(p.share, a.Share)
	}
	p.admitted += cost
}

// Admitted is the total of all admissions recorded.
func (c *Checker) Admitted() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.admitted
}

// WindowAdmitted is what window w admitted.
func (c *Checker) WindowAdmitted(w int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.windows[w]
}

// Windows lists the windows that admitted anything, in order.
func (c *Checker) Windows() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int64, 0, len(c.windows))
	for w := range c.windows {
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// WindowEdge is how many of window w's admissions are marked Edge.
func (c *Checker) WindowEdge(w int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.edges[w]
}

// WorstWindow returns the window that admitted the most, and that count
// (0, 0 when nothing was admitted). Reports quote it as a ratio to the
// capacity.
func (c *Checker) WorstWindow() (window, admitted int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := true
	for w, n := range c.windows {
		if first || n > admitted || (n == admitted && w < window) {
			window, admitted, first = w, n, false
		}
	}
	return window, admitted
}

// Violations lists every broken invariant, in a stable order: windows by
// index, then periods by id and client.
func (c *Checker) Violations() []Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Violation
	for w, n := range c.windows {
		if e := c.edges[w]; n-e > c.capacity {
			out = append(out, Violation{Kind: OverCapacity, Window: w, Admitted: n, Limit: c.capacity, Edge: e})
		}
	}
	for k, p := range c.periods {
		switch {
		case p.mixed:
			out = append(out, Violation{Kind: MixedShares, Period: k.period, Client: k.client, Admitted: p.admitted, Limit: p.share})
		case p.admitted > p.share:
			out = append(out, Violation{Kind: OverShare, Period: k.period, Client: k.client, Admitted: p.admitted, Limit: p.share})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Window != b.Window {
			return a.Window < b.Window
		}
		if a.Period != b.Period {
			return a.Period < b.Period
		}
		return a.Client < b.Client
	})
	return out
}

// Count returns how many violations of kind k there are.
func (c *Checker) Count(k Kind) int {
	n := 0
	for _, v := range c.Violations() {
		if v.Kind == k {
			n++
		}
	}
	return n
}

// TB is the part of testing.TB that Check needs.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
}

// Check fails t with one line per violation (at most 20, then a count).
func (c *Checker) Check(t TB) {
	t.Helper()
	vs := c.Violations()
	for i, v := range vs {
		if i == 20 {
			t.Errorf("... and %d more violations", len(vs)-i)
			return
		}
		t.Errorf("cap check: %s", v)
	}
}

// SlidingMost is the most admissions in any half-open interval [t, t+span)
// of the admission times: the figure pacing bounds by (1 + burst) ×
// capacity per cycle, where aligned windows alone allow twice the capacity
// across a boundary. It scans with two pointers over the times in order
// (an interval holding the most can always start at an admission); times
// out of order are sorted in a copy.
func SlidingMost(times []time.Time, span time.Duration) int {
	before := func(a, b time.Time) int { return a.Compare(b) }
	if !slices.IsSortedFunc(times, before) {
		times = slices.SortedFunc(slices.Values(times), before)
	}
	most, lo := 0, 0
	for hi := range times {
		for times[hi].Sub(times[lo]) >= span {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}
