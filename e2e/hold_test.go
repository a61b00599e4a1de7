package e2e

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// With max_wait, a paced limit turns a burst into admissions spread out in
// time, with no 429: a client that sends ten requests at once, against a
// pace of one unit per 100 ms, gets ten 200s, the last about 0.9 s later.
// The test reports the wait's accuracy: how much later than its last
// promise each held request was let go (x-borrowcycle-waited, with
// debug_headers), as seen by the plugin.
func TestHeldBurstIsSpreadNotRefused(t *testing.T) {
	const n = 10
	tg := configuredTarget(t, map[string]any{
		"capacity": 20, "cycle": "2s", "burst": 0, "max_wait": "1500ms", "debug_headers": true,
	}, startOpts{concurrency: 2})
	// The client is known before its burst: a newcomer's first requests,
	// racing on two workers, can be told pending, which is never held.
	if r := tg.get(newClient(), "burst"); r.status != http.StatusOK {
		t.Fatalf("the client's first request: %d", r.status)
	}
	untilNextWindow(tg.settings)
	time.Sleep(50 * time.Millisecond) // (at the window's very start no unit has accrued yet)
	type answer struct {
		status          int
		took            time.Duration
		waited, promise int // ms; -1 when not held
		err             error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, tg.url+"/", nil)
			req.Header.Set(tg.settings.ClientHeader, "burst")
			resp, err := newClient().Do(req)
			a := answer{took: time.Since(start), waited: -1, promise: -1, err: err}
			if err == nil {
				a.status = resp.StatusCode
				resp.Body.Close()
				if v := resp.Header.Get("x-borrowcycle-waited"); v != "" {
					w, p, _ := strings.Cut(v, ";promised=")
					a.waited, _ = strconv.Atoi(w)
					a.promise, _ = strconv.Atoi(p)
				}
			}
			answers[i] = a
		}()
	}
	wg.Wait()
	sort.Slice(answers, func(i, j int) bool { return answers[i].took < answers[j].took })
	var lags []int
	for i, a := range answers {
		if a.err != nil || a.status != http.StatusOK {
			t.Errorf("request %d: status %d, %v; want a 200, held if need be", i, a.status, a.err)
			continue
		}
		if a.waited >= 0 {
			lags = append(lags, a.waited-a.promise)
			if a.waited < a.promise {
				t.Errorf("request %d let go %d ms before its promise (%d ms)", i, a.waited, a.promise)
			}
		}
	}
	last := answers[n-1].took
	t.Logf("answers at %v", func() []string {
		var s []string
		for _, a := range answers {
			s = append(s, fmt.Sprintf("%d@%dms(waited %d, promised %d)", a.status, a.took.Milliseconds(), a.waited, a.promise))
		}
		return s
	}())
	// Ten units at one per 100 ms: the last about 0.9 s after the first.
	if last < 700*time.Millisecond {
		t.Errorf("the last of %d answers came %v after the burst: the limit's pace did not spread them", n, last)
	}
	if len(lags) < n/2 {
		t.Fatalf("%d of %d requests were held: the test shows nothing", len(lags), n)
	}
	sort.Ints(lags)
	t.Logf("held %d of %d; served later than promised by p50 %d ms, p99 %d ms (tick %v)", len(lags), n,
		lags[len(lags)/2], lags[(len(lags)*99)/100], 50*time.Millisecond)
}
