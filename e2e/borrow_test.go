package e2e

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// writeThroughLimit: below this many attempts of one client in one cycle
// on one worker, the engine writes each attempt to shared data as it counts
// it (engine/limiter.go: flushDue with flushDivisor 16).
const writeThroughLimit = 32

// phase is a stretch of the borrowing test with fixed request rates.
type phase struct {
	d     time.Duration
	rates []float64 // requests per second, per client
}

// pace has each client send at its rate, on two connections (so two
// workers may share the client), phase after phase.
func pace(tg *target, ids []string, phases []phase) []result {
	const conns = 2
	start := time.Now()
	return fanOut(slices.Repeat([]int{conns}, len(ids)), func(i, k int, c *http.Client) []result {
		var mine []result
		phaseStart := start
		for _, p := range phases {
			interval := time.Duration(float64(conns) * float64(time.Second) / p.rates[i])
			next := phaseStart.Add(time.Duration(k) * interval / conns)
			end := phaseStart.Add(p.d)
			for ; next.Before(end); next = next.Add(interval) {
				// A goroutine that fell behind (a stalled machine) skips
				// its missed slots instead of bursting them.
				if late := time.Since(next); late > interval {
					next = next.Add(late.Truncate(interval))
				}
				time.Sleep(time.Until(next))
				mine = append(mine, tg.get(c, ids[i]))
			}
			phaseStart = end
		}
		return mine
	})
}

// cycleObs is what the clients saw of one cycle.
type cycleObs struct {
	demand            []int64 // attempts per client, rejected ones included
	share             []int64 // announced share per client (-1 unseen)
	minSend, maxSend  time.Time
	minRecv           time.Time
	lateRecv          [][]time.Time // per client, receive times (for straddlers)
	inconsistentShare bool
	windows           map[int64]int // responses per wall-clock window, by each one's midpoint
}

// window is the wall-clock window most of the plan's responses fell in.
// Windows are aligned to the clock (window_offset 0), so a response's
// window is that of the middle of its round trip, but for those near a
// boundary.
func (o *cycleObs) window() int64 {
	best, n := int64(-1), 0
	for w, c := range o.windows {
		if c > n || c == n && w < best {
			best, n = w, c
		}
	}
	return best
}

// TestBorrowingFollowsAllocate checks that the shares Envoy hands out from
// one short cycle to the next are what engine.Allocate computes from the
// demand the clients actually sent.
//
// Demand is counted per cycle by the x-borrowcycle-plan header of every
// response (admitted or not), which names the cycle the plugin counted the
// request in. Two things make the plugin's view differ from that count, and
// the test tolerates exactly those:
//
//   - Requests that straddle the boundary. A request counted in cycle c by
//     one worker while another worker is planning c+1 may be missed by that
//     plan (their writes touch different shared-data keys). Such a request
//     was still in flight when the plan was made, so it was received after
//     the first request of c+1 was sent (or, if a tick made the plan, after
//     the earliest moment c's window can have ended).
//     The prediction lets each client's demand drop by up to its number of
//     such requests, and by nothing else. The clients stay under 32 requests
//     per cycle, below which the engine writes every attempt to shared data
//     at once, so no other attempt can be missing (a cycle that a stall
//     pushed past that bound is logged and not checked).
//   - When the boundary happened. The prediction also scales c's demand by
//     cycle/elapsed, for every elapsed from one cycle up to the time
//     between the requests around both boundaries (from the last send
//     labelled c-1 to the first receive labelled c+1).
//
// A transition with no straddlers and a scale that does not change the
// result has exactly one prediction, engine.Allocate of the raw counts.
func TestBorrowingFollowsAllocate(t *testing.T) { eachConcurrency(t, testBorrowing) }

func testBorrowing(t *testing.T, workers int) {
	const (
		capacity    = 40
		reservation = 0.1
		cycle       = time.Second
	)
	tg := loadTarget(t, workers, map[string]any{
		"capacity":    capacity,
		"cycle":       cycle.String(),
		"reservation": reservation,
	})

	// Registered in this order, which is the order engine.Allocate gets.
	// The re-plans that count them (one per newcomer, by whichever worker
	// sees its proof) may come once the load has begun: a plan id names a
	// window's roll only where it is the window's one plan (see below).
	ids := []string{"light", "medium", "heavy"}
	tg.registerAll(t, ids)
	// Rates stay well below 32 requests per client and cycle (see above),
	// even for a cycle that runs long. The second phase swaps who lends and
	// who borrows.
	rs := pace(tg, ids, []phase{
		{d: 5 * time.Second, rates: []float64{4, 16, 25}},
		{d: 5 * time.Second, rates: []float64{25, 4, 16}},
	})
	obs := observeCycles(t, tg, ids, rs, cycle)
	if t.Failed() {
		return
	}
	cycles := slices.Sorted(maps.Keys(obs))
	first := cycles[0]
	var checked, exact, borrowed int
	def := (capacity + int64(len(ids)) - 1) / int64(len(ids))
	for _, cyc := range cycles {
		prev, cur, next := obs[cyc-1], obs[cyc], obs[cyc+1]
		// The first cycle of the load may have begun before it; its
		// predecessor's demand is partly registration traffic.
		if cyc <= first || prev == nil || cur == nil || next == nil {
			continue
		}
		// Plan ids change at every re-plan too: cur's demand is its whole
		// window's, and next's shares are the roll's, only where prev, cur
		// and next each are the one plan of consecutive windows.
		if w := cur.window(); prev.window() != w-1 || next.window() != w+1 {
			t.Logf("cycle %d: plans %d, %d, %d fell in windows %d, %d, %d, not three in a row; not checked",
				cyc, cyc-1, cyc, cyc+1, prev.window(), w, next.window())
			continue
		}
		// Windows are aligned to the clock, not to the load: the load may
		// end early in the last one, before every client sent in it.
		if slices.Contains(next.share, -1) {
			t.Logf("cycle %d: not every client sent in the next one (%v); not checked", cyc, next.share)
			continue
		}
		// Past 32 attempts on one worker the engine writes demand back in
		// batches, and a plan may miss a batch; the rates keep cycles
		// far below that, but a long stall could push one over.
		if slices.Max(cur.demand) >= writeThroughLimit {
			t.Logf("cycle %d: demand %v is past the write-through bound; not checked", cyc, cur.demand)
			continue
		}
		checked++
		preds := predictShares(capacity, reservation, cycle, prev, cur, next)
		got := next.share
		pred := engine.Allocate(capacity, reservation, cur.demand)
		if !containsShares(preds, got) {
			t.Errorf("cycle %d -> %d: demand %v gave shares %v; engine.Allocate predicts %v (accepted with boundary tolerance: %v)",
				cyc, cyc+1, cur.demand, got, pred, preds)
			continue
		}
		// Exact: the shares equal Allocate on the demand as observed, with
		// no boundary tolerance needed (the candidate set counts every
		// request near a boundary, so it is rarely a single one).
		if slices.Equal(got, pred) {
			exact++
		}
		if slices.Max(got) > def {
			borrowed++
		}
		t.Logf("cycle %d -> %d: demand %v -> shares %v (Allocate %v, %d candidates)", cyc, cyc+1, cur.demand, got, pred, len(preds))
	}
	if checked < 4 {
		t.Errorf("only %d cycle transitions could be checked (cycles seen %v)", checked, cycles)
	}
	if exact == 0 {
		t.Errorf("no transition gave exactly engine.Allocate's shares on the observed demand; all needed the boundary tolerance")
	}
	if borrowed == 0 {
		t.Errorf("no client ever got more than the default share %d: nothing was borrowed", def)
	}
}

// observeCycles groups the responses by cycle.
func observeCycles(t *testing.T, tg *target, ids []string, rs []result, cycle time.Duration) map[uint64]*cycleObs {
	t.Helper()
	index := map[string]int{}
	for i, id := range ids {
		index[id] = i
	}
	obs := map[uint64]*cycleObs{}
	for _, r := range rs {
		if r.err != nil {
			t.Fatalf("request failed: %v", r)
		}
		if r.status != 200 && r.reason() != "over_limit" {
			t.Fatalf("unexpected response for a registered client: %v", r)
		}
		cyc, err := strconv.ParseUint(cycleOf(t, r), 10, 64)
		if err != nil {
			t.Fatalf("x-borrowcycle-plan %q is not a number: the test orders cycles by it", cycleOf(t, r))
		}
		o := obs[cyc]
		if o == nil {
			o = &cycleObs{
				demand:   make([]int64, len(ids)),
				share:    slices.Repeat([]int64{-1}, len(ids)),
				lateRecv: make([][]time.Time, len(ids)),
				minSend:  r.sent, maxSend: r.sent, minRecv: r.recv,
				windows: map[int64]int{},
			}
			obs[cyc] = o
		}
		o.windows[r.sent.Add(r.recv.Sub(r.sent)/2).UnixNano()/int64(cycle)]++
		i := index[r.client]
		o.demand[i]++
		o.lateRecv[i] = append(o.lateRecv[i], r.recv)
		share := intHeader(t, r, "x-ratelimit-limit")
		if o.share[i] >= 0 && o.share[i] != share {
			t.Errorf("cycle %d client %s: shares %d and %d announced", cyc, r.client, o.share[i], share)
		}
		o.share[i] = share
		if r.sent.Before(o.minSend) {
			o.minSend = r.sent
		}
		if r.sent.After(o.maxSend) {
			o.maxSend = r.sent
		}
		if r.recv.Before(o.minRecv) {
			o.minRecv = r.recv
		}
	}
	return obs
}

// predictShares returns every share vector the seed policy can give for
// cycle cur's demand, within the tolerances explained on the test.
func predictShares(capacity int64, reservation float64, cycle time.Duration, prev, cur, next *cycleObs) [][]int64 {
	// The plan of next was made after the first send labelled next (the
	// request that triggered it) or at the latest after cur's window ended,
	// which is at least one cycle after the last send labelled prev.
	earliest := next.minSend
	if alt := prev.maxSend.Add(cycle); alt.Before(earliest) {
		earliest = alt
	}
	straddlers := make([]int64, len(cur.demand))
	for i, recvs := range cur.lateRecv {
		for _, r := range recvs {
			if r.After(earliest) {
				straddlers[i]++
			}
		}
	}
	maxElapsed := next.minRecv.Sub(prev.maxSend)
	if maxElapsed < cycle {
		maxElapsed = cycle
	}
	const steps = 200
	var out [][]int64
	seed := engine.Seed{Reservation: reservation}
	demand := make([]float64, len(cur.demand))
	forEachDrop(straddlers, func(drop []int64) {
		for s := 0; s <= steps; s++ {
			elapsed := cycle + time.Duration(float64(maxElapsed-cycle)*float64(s)/steps)
			scale := float64(cycle) / float64(elapsed)
			for i, d := range cur.demand {
				demand[i] = float64(d-drop[i]) * scale
			}
			shares := seed.Allocate(nil, capacity, demand)
			if !containsShares(out, shares) {
				out = append(out, shares)
			}
		}
	})
	return out
}

// forEachDrop calls f with every vector 0 <= drop[i] <= max[i].
func forEachDrop(max []int64, f func([]int64)) {
	drop := make([]int64, len(max))
	for {
		f(drop)
		i := 0
		for ; i < len(drop); i++ {
			if drop[i] < max[i] {
				drop[i]++
				break
			}
			drop[i] = 0
		}
		if i == len(drop) {
			return
		}
	}
}

func containsShares(set [][]int64, v []int64) bool {
	return slices.ContainsFunc(set, func(s []int64) bool { return slices.Equal(s, v) })
}
