package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// sender is one client of a load: conns connections that each send
// requests as id (or as a fresh id from next, when set) back to back (or
// one per every, when set) from start to stop, both measured from the
// load's start.
type sender struct {
	id          string
	next        func() string
	conns       int
	start, stop time.Duration
	every       time.Duration
}

// load runs every sender at once and returns when it started and all
// responses, slimmed to what the cap check reads.
func load(tg *target, senders []sender) (time.Time, []result) {
	var (
		mu  sync.Mutex
		out []result
		wg  sync.WaitGroup
	)
	t0 := time.Now()
	for _, s := range senders {
		for range max(s.conns, 1) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Until(t0.Add(s.start)))
				c := newClient()
				var mine []result
				for next := time.Now(); time.Since(t0) < s.stop; {
					id := s.id
					if s.next != nil {
						id = s.next()
					}
					r := slim(tg.get(c, id))
					mine = append(mine, r)
					if r.err != nil {
						break
					}
					if s.every > 0 {
						next = next.Add(s.every)
						time.Sleep(time.Until(next))
					}
				}
				mu.Lock()
				out = append(out, mine...)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	return t0, out
}

// TestNewcomersDoNotMultiplyCapacity is the capacity promise in wall time
// under the traffic that used to break it: three heavy clients, a light
// one, two late joiners and a stream of never-seen ids, one every 110 ms.
// An engine that starts a fresh capacity at every newcomer's early rollover
// admits several times the capacity in one aligned window here.
func TestNewcomersDoNotMultiplyCapacity(t *testing.T) {
	for _, workers := range []int{2, 4} {
		t.Run(fmt.Sprintf("concurrency=%d", workers), func(t *testing.T) {
			testNewcomerStream(t, workers)
		})
	}
}

func testNewcomerStream(t *testing.T, workers int) {
	const (
		capacity = 300 // per second: small, so a loaded 2-core box still offers several times it
		run      = 6 * time.Second
		newEvery = 110 * time.Millisecond
		newLife  = 400 * time.Millisecond // each new id sends back to back this long
	)
	tg := configuredTarget(t, map[string]any{
		"capacity":      capacity,
		"cycle":         "1s",
		"debug_headers": true,
	}, startOpts{concurrency: workers})
	tg.registerAll(t, []string{"heavy-1", "heavy-2", "heavy-3", "light"})

	senders := []sender{
		{id: "heavy-1", conns: 3, stop: run},
		{id: "heavy-2", conns: 3, stop: run},
		{id: "heavy-3", conns: 3, stop: run},
		{id: "light", conns: 1, stop: run, every: 100 * time.Millisecond},
		{id: "late-1", conns: 2, start: 1500 * time.Millisecond, stop: run},
		{id: "late-2", conns: 2, start: 3 * time.Second, stop: run},
	}
	for i, at := 0, 500*time.Millisecond; at+newLife <= run; i, at = i+1, at+newEvery {
		senders = append(senders, sender{id: fmt.Sprintf("new-%03d", i), conns: 1, start: at, stop: at + newLife})
	}
	_, rs := load(tg, senders)

	l := newWindowLedger(tg.settings)
	outcomes := map[string]int{}
	for _, r := range rs {
		switch {
		case r.err != nil:
			t.Fatalf("request failed: %v", r)
		case r.status == 200:
			l.admit(t, r)
			outcomes["allowed"]++
		case r.reason() == "over_limit" || r.reason() == "pending":
			outcomes[r.reason()]++
		default:
			// max_clients (1000) is far above the ids sent, and the store
			// must not fail under this load.
			t.Fatalf("unexpected response: %v", r)
		}
	}
	l.Check(t)
	worst, beyondEdge := l.report(t)
	t.Logf("concurrency %d, %d new ids: %d responses %v; worst aligned window %.2f × capacity (%.2f × without edge admissions)",
		workers, len(senders)-6, len(rs), outcomes, worst, beyondEdge)
	if outcomes["over_limit"] == 0 {
		t.Errorf("no request was over the limit: the load did not test the cap (%v)", outcomes)
	}
}
