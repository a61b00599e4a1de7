package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/borrowcycle/borrowcycle/internal/capcheck"
)

// fanOut runs send on conns[i] connections for sender i, all at once,
// each connection with its own client (so Envoy may spread a sender over
// its workers), and returns every result the sends returned.
func fanOut(conns []int, send func(i, k int, c *http.Client) []result) []result {
	var (
		mu  sync.Mutex
		out []result
		wg  sync.WaitGroup
	)
	for i, n := range conns {
		for k := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := send(i, k, newClient())
				mu.Lock()
				out = append(out, mine...)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	return out
}

// hammer has every client send as fast as it can on conns connections each,
// for d or until maxRequests responses in all, and returns the responses.
func hammer(tg *target, ids []string, conns int, d time.Duration, maxRequests int) []result {
	stop := time.Now().Add(d)
	var sent atomic.Int64
	return fanOut(slices.Repeat([]int{conns}, len(ids)), func(i, _ int, c *http.Client) []result {
		var mine []result
		for time.Now().Before(stop) && sent.Add(1) <= int64(maxRequests) {
			r := slim(tg.get(c, ids[i]))
			mine = append(mine, r)
			if r.err != nil {
				break
			}
		}
		return mine
	})
}

// slim keeps only what the cap check reads, so that a long run stays
// small in memory.
func slim(r result) result {
	h := http.Header{}
	for _, k := range []string{"x-borrowcycle-plan", "x-borrowcycle-reason", "x-ratelimit-limit"} {
		if v := r.header.Values(k); len(v) > 0 {
			h[http.CanonicalHeaderKey(k)] = v
		}
	}
	r.header, r.body = h, ""
	return r
}

// windowLedger holds real-Envoy responses to the capacity promise with
// capcheck. A client cannot see when Envoy decided a request, only that it
// was between sending it and receiving the answer. Each admission is
// counted in the aligned window of the time it was received; when it was
// sent in an earlier window, Envoy may have decided it before the boundary,
// so it is marked as an edge admission, which capcheck tolerates on top of
// the capacity of the window it is counted in. Nothing else is tolerated.
// Its share period is the cycle the plugin reports in x-borrowcycle-plan
// (debug_headers), and its share the x-ratelimit-limit it announced.
type windowLedger struct {
	*capcheck.Checker
	cycle time.Duration
}

func newWindowLedger(s settings) windowLedger {
	return windowLedger{Checker: capcheck.New(s.Engine.Capacity), cycle: s.Engine.Cycle}
}

// admit records an admitted response. One without x-ratelimit-limit was
// admitted without a share, which only a store failure in fail-open mode
// does: it still counts in its window, and it fails the test, since the
// shared state must not fail under the loads these tests send.
func (l windowLedger) admit(t *testing.T, r result) {
	t.Helper()
	// The tests configure no window offset.
	w, _, _ := engine.WindowAt(r.recv, l.cycle, 0)
	sentIn, _, _ := engine.WindowAt(r.sent, l.cycle, 0)
	a := capcheck.Admission{Window: w, Edge: sentIn != w}
	if len(r.header.Values("x-ratelimit-limit")) == 0 {
		t.Errorf("admitted without a share (a fail-open store failure): %v", r)
		l.Admit(a)
		return
	}
	period, err := strconv.ParseUint(cycleOf(t, r), 10, 64)
	if err != nil {
		t.Fatalf("x-borrowcycle-plan: %v: %v", err, r)
	}
	a.Period, a.Client, a.Share = period, r.client, intHeader(t, r, "x-ratelimit-limit")
	l.Admit(a)
}

// report logs every window (admitted, of which at the edge) and returns the
// worst window over the capacity, with and without its edge admissions:
// the figures a reader can compare with the capacity.
func (l windowLedger) report(t *testing.T) (worst, worstBeyondEdge float64) {
	t.Helper()
	c := float64(l.Capacity())
	for _, w := range l.Windows() {
		n, e := l.WindowAdmitted(w), l.WindowEdge(w)
		worst = max(worst, float64(n)/c)
		worstBeyondEdge = max(worstBeyondEdge, float64(n-e)/c)
		t.Logf("window %d: %d admitted (%d at the edge) of %d", w, n, e, l.Capacity())
	}
	t.Logf("worst aligned window: %.2f × capacity, %.2f × without its edge admissions", worst, worstBeyondEdge)
	return worst, worstBeyondEdge
}

// eachConcurrency runs test once for each number of Envoy workers the
// load tests spread their clients over.
func eachConcurrency(t *testing.T, test func(t *testing.T, workers int)) {
	for _, workers := range []int{2, 4} {
		t.Run(fmt.Sprintf("concurrency=%d", workers), func(t *testing.T) { test(t, workers) })
	}
}

// loadTarget starts Envoy with cfg and debug headers, which the checks
// read, on the given number of workers.
func loadTarget(t *testing.T, workers int, cfg map[string]any) *target {
	t.Helper()
	cfg["debug_headers"] = true
	return configuredTarget(t, cfg, startOpts{concurrency: workers})
}

// checkLoad holds the responses of a load to the capacity promise: a failed
// request ends the test, every admission goes to a window ledger, which is
// checked and reported, and a rejection is counted by its reason, which
// must be one of expected. It returns the count of each outcome ("allowed"
// for admissions) and the ledger's report.
func checkLoad(t *testing.T, s settings, rs []result, expected ...string) (outcomes map[string]int, worst, worstBeyondEdge float64) {
	t.Helper()
	l := newWindowLedger(s)
	outcomes = map[string]int{}
	for _, r := range rs {
		switch {
		case r.err != nil:
			t.Fatalf("request failed: %v", r)
		case r.status == 200:
			l.admit(t, r)
			outcomes["allowed"]++
		case slices.Contains(expected, r.reason()):
			outcomes[r.reason()]++
		default:
			t.Fatalf("unexpected response under load: %v", r)
		}
	}
	l.Check(t)
	worst, worstBeyondEdge = l.report(t)
	return outcomes, worst, worstBeyondEdge
}

// TestCapHoldsAcrossWorkers: many connections per client, spread over
// Envoy's workers, never get a client more than its share in a share
// period, nor all clients together more than the capacity in an aligned
// window.
func TestCapHoldsAcrossWorkers(t *testing.T) { eachConcurrency(t, testCap) }

func testCap(t *testing.T, workers int) {
	const (
		clients  = 6
		capacity = 60
		conns    = 4 // per client
	)
	tg := loadTarget(t, workers, map[string]any{"capacity": capacity, "cycle": "2s"})
	ids := make([]string, clients)
	for i := range ids {
		ids[i] = fmt.Sprintf("cap-%d", i)
	}
	tg.registerAll(t, ids)

	rs := hammer(tg, ids, conns, 7*time.Second, 150000)
	// The clients were registered before the load, so only over_limit is
	// legitimate among the rejections (store_failure would mean the shared
	// state failed under contention).
	outcomes, _, _ := checkLoad(t, tg.settings, rs, "over_limit")
	// Without rejections the cap was never put to the test.
	if outcomes["over_limit"] == 0 {
		t.Errorf("no client was ever over its share: the load (%d responses) did not test the cap", len(rs))
	}
	t.Logf("%d responses, %d admitted, %d over_limit", len(rs), outcomes["allowed"], outcomes["over_limit"])
}

// sortedKeys returns numeric cycle ids in order (other strings after them).
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, ea := strconv.ParseUint(keys[i], 10, 64)
		b, eb := strconv.ParseUint(keys[j], 10, 64)
		if ea == nil && eb == nil {
			return a < b
		}
		return keys[i] < keys[j]
	})
	return keys
}
