package e2e

import (
	"fmt"
	"net/http"
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
	conns := make([]int, len(senders))
	for i, s := range senders {
		conns[i] = max(s.conns, 1)
	}
	t0 := time.Now()
	return t0, fanOut(conns, func(i, _ int, c *http.Client) []result {
		s := senders[i]
		time.Sleep(time.Until(t0.Add(s.start)))
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
		return mine
	})
}

// TestNewcomersDoNotMultiplyCapacity is the capacity promise in wall time
// under the traffic that used to break it: three heavy clients, a light
// one, two late joiners and a stream of never-seen ids, one every 110 ms.
// An engine that gave each newcomer a fresh capacity, by starting a new
// window when it registers, would admit several times the capacity in one
// aligned window here.
func TestNewcomersDoNotMultiplyCapacity(t *testing.T) { eachConcurrency(t, testNewcomerStream) }

func testNewcomerStream(t *testing.T, workers int) {
	const (
		capacity = 300 // per second: small, so a loaded 2-core box still offers several times it
		run      = 6 * time.Second
		newEvery = 110 * time.Millisecond
		newLife  = 400 * time.Millisecond // each new id sends back to back this long
	)
	tg := loadTarget(t, workers, map[string]any{"capacity": capacity, "cycle": "1s"})
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

	// max_clients (1000) is far above the ids sent, and the store must not
	// fail under this load: newcomers wait (pending) and clients over their
	// share are rejected, nothing else.
	outcomes, worst, beyondEdge := checkLoad(t, tg.settings, rs, "over_limit", "pending")
	t.Logf("concurrency %d, %d new ids: %d responses %v; worst aligned window %.2f × capacity (%.2f × without edge admissions)",
		workers, len(senders)-6, len(rs), outcomes, worst, beyondEdge)
	if outcomes["over_limit"] == 0 {
		t.Errorf("no request was over the limit: the load did not test the cap (%v)", outcomes)
	}
}
