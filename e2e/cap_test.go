package e2e

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// hammer has every client send as fast as it can on conns connections each,
// for d or until maxRequests responses in all, and returns the responses.
func hammer(tg *target, ids []string, conns int, d time.Duration, maxRequests int) []result {
	var (
		mu   sync.Mutex
		out  []result
		wg   sync.WaitGroup
		stop = time.Now().Add(d)
	)
	for _, id := range ids {
		for k := 0; k < conns; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := newClient()
				for time.Now().Before(stop) {
					r := slim(tg.get(c, id))
					mu.Lock()
					full := len(out) >= maxRequests
					if !full {
						out = append(out, r)
					}
					mu.Unlock()
					if full || r.err != nil {
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	return out
}

// slim keeps only what the cap check reads, so that a long run stays
// small in memory.
func slim(r result) result {
	h := http.Header{}
	for _, k := range []string{"x-borrowcycle-cycle", "x-borrowcycle-reason", "x-ratelimit-limit"} {
		if v := r.header.Values(k); len(v) > 0 {
			h[http.CanonicalHeaderKey(k)] = v
		}
	}
	r.header, r.body = h, ""
	return r
}

// clientCycle is what one client saw in one cycle.
type clientCycle struct {
	admitted, rejected int
	shares             map[int64]int // announced share -> responses
}

// TestCapHoldsAcrossWorkers: many connections per client, spread over
// Envoy's workers, never get a client more than its share in any cycle,
// and never all clients together more than the capacity.
func TestCapHoldsAcrossWorkers(t *testing.T) {
	for _, workers := range []int{2, 4} {
		t.Run(fmt.Sprintf("concurrency=%d", workers), func(t *testing.T) {
			testCap(t, workers)
		})
	}
}

func testCap(t *testing.T, workers int) {
	const (
		clients  = 6
		capacity = 60
		conns    = 4 // per client
	)
	tg := configuredTarget(t, map[string]any{
		"capacity":      capacity,
		"cycle":         "2s",
		"debug_headers": true,
	}, startOpts{concurrency: workers})
	ids := make([]string, clients)
	for i := range ids {
		ids[i] = fmt.Sprintf("cap-%d", i)
	}
	tg.registerAll(t, ids)

	rs := hammer(tg, ids, conns, 7*time.Second, 150000)
	byCycle := map[string]map[string]*clientCycle{} // cycle -> client -> counts
	for _, r := range rs {
		if r.err != nil {
			t.Fatalf("request failed: %v", r)
		}
		cyc := cycleOf(t, r)
		if byCycle[cyc] == nil {
			byCycle[cyc] = map[string]*clientCycle{}
		}
		cc := byCycle[cyc][r.client]
		if cc == nil {
			cc = &clientCycle{shares: map[int64]int{}}
			byCycle[cyc][r.client] = cc
		}
		switch {
		case r.status == 200:
			cc.admitted++
			cc.shares[intHeader(t, r, "x-ratelimit-limit")]++
		case r.reason() == "over_limit":
			cc.rejected++
			cc.shares[intHeader(t, r, "x-ratelimit-limit")]++
		default:
			// The clients were registered before the load, so nothing else
			// is legitimate here (store_failure would mean the shared state
			// failed under contention).
			t.Fatalf("unexpected response under load: %v", r)
		}
	}

	var overLimitCycles, fullCycles int
	for _, cyc := range sortedKeys(byCycle) {
		var total int
		for id, cc := range byCycle[cyc] {
			total += cc.admitted
			if len(cc.shares) != 1 {
				t.Errorf("cycle %s client %s: responses announce different shares %v", cyc, id, cc.shares)
				continue
			}
			var share int64
			for s := range cc.shares {
				share = s
			}
			if int64(cc.admitted) > share {
				t.Errorf("cycle %s client %s: admitted %d, over its share %d", cyc, id, cc.admitted, share)
			}
			if cc.rejected > 0 {
				overLimitCycles++
				if int64(cc.admitted) == share {
					fullCycles++
				}
			}
		}
		if total > capacity {
			t.Errorf("cycle %s: %d admitted in all, over the capacity %d", cyc, total, capacity)
		}
		t.Logf("cycle %s: %d admitted of %d", cyc, total, capacity)
	}
	// Without rejections the cap was never put to the test.
	if overLimitCycles == 0 {
		t.Errorf("no client was ever over its share: the load (%d responses) did not test the cap", len(rs))
	}
	t.Logf("%d responses in %d cycles; %d client-cycles hit the cap, %d of them used the whole share",
		len(rs), len(byCycle), overLimitCycles, fullCycles)
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
