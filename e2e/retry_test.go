package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/hashicorp/go-retryablehttp"
)

// Clients that back off the way a common HTTP library does, not one
// written here: go-retryablehttp, whose default policy retries a 429 and
// whose default backoff sleeps exactly what Retry-After says. Three
// clients send twenty requests each, one after the other, under each policy.
// Every client completes, and every refusal's headers agree with it; the
// test reports how many retries made at Retry-After succeeded, the
// attempts per success, and the capacity the clients used (the contract's
// Responses section says what is and is not promised).

// retryAttempt is one attempt of a retrying client.
type retryAttempt struct {
	client     int
	sent, recv time.Time
	status     int
	retry      bool   // sent after a 429, when its Retry-After said
	reason     string // x-borrowcycle-reason of a refusal
	retryAfter string // its retry-after
	remaining  string
	reset      string
}

// runRetryingClients runs clients go-retryablehttp clients of each
// requests against tg, all started together, and returns every attempt and
// how many requests each client completed.
func runRetryingClients(t *testing.T, tg *target, clients, each int) ([]retryAttempt, []int) {
	t.Helper()
	var mu sync.Mutex
	var all []retryAttempt
	completed := make([]int, clients)
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cur retryAttempt
			c := retryablehttp.NewClient()
			c.HTTPClient = newClient()
			c.Logger = nil
			c.RetryMax = 50
			c.RetryWaitMax = 30 * time.Second
			c.RequestLogHook = func(_ retryablehttp.Logger, _ *http.Request, n int) {
				cur = retryAttempt{client: i, sent: time.Now(), retry: n > 0}
			}
			c.ResponseLogHook = func(_ retryablehttp.Logger, resp *http.Response) {
				cur.recv, cur.status, cur.reason = time.Now(), resp.StatusCode, resp.Header.Get("x-borrowcycle-reason")
				cur.retryAfter, cur.remaining, cur.reset = resp.Header.Get("retry-after"), resp.Header.Get("x-ratelimit-remaining"), resp.Header.Get("x-ratelimit-reset")
				mu.Lock()
				all = append(all, cur)
				mu.Unlock()
			}
			id := fmt.Sprintf("retrying-%d", i)
			for k := 0; k < each; k++ {
				req, err := retryablehttp.NewRequest(http.MethodGet, tg.url+"/", nil)
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set(tg.settings.ClientHeader, id)
				resp, err := c.Do(req)
				if err != nil {
					t.Errorf("client %d, request %d: %v", i, k, err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					completed[i]++
				}
			}
		}()
	}
	wg.Wait()
	return all, completed
}

func TestRetryAfterHoldsForRetryingClients(t *testing.T) {
	const clients, each = 3, 20
	for _, c := range []struct {
		name   string
		cfg    map[string]any
		target bool // the 95% target applies: a retry's unit is its own (a share), booked for it (the fair pool), or its turn at the pacer
	}{
		{"seed", map[string]any{"capacity": 6, "cycle": "5s"}, true},
		{"fair", map[string]any{"capacity": 10, "cycle": "5s", "policy": "fair"}, true},
		{"paced", map[string]any{"capacity": 6, "cycle": "5s", "burst": 0.2}, true},
		{"paced, jittered", map[string]any{"capacity": 6, "cycle": "5s", "burst": 0.2, "retry_after_jitter": "1s"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg := configuredTarget(t, c.cfg, startOpts{concurrency: 2})
			start := untilNextWindow(tg.settings)
			attempts, completed := runRetryingClients(t, tg, clients, each)
			end := time.Now()
			if os.Getenv("RETRY_DEBUG") != "" {
				for _, a := range attempts {
					t.Logf("c%d %6.2fs %d %s ra=%s rem=%s retry=%v", a.client, a.sent.Sub(start).Seconds(), a.status, a.reason, a.retryAfter, a.remaining, a.retry)
				}
			}

			k0, _, _ := engine.WindowAt(start, tg.settings.Engine.Cycle, tg.settings.Engine.WindowOffset)
			var retries, retriesOK, later, laterOK, ok int
			byReason := map[string][2]int{}
			perWindow := map[int64]int{}
			var last time.Time
			for _, a := range attempts {
				k, _, _ := engine.WindowAt(a.sent, tg.settings.Engine.Cycle, tg.settings.Engine.WindowOffset)
				if a.status == http.StatusOK {
					ok++
					kr, _, _ := engine.WindowAt(a.recv, tg.settings.Engine.Cycle, tg.settings.Engine.WindowOffset)
					perWindow[kr]++
					last = a.recv
				}
				if a.retry {
					retries++
					if a.status == http.StatusOK {
						retriesOK++
					}
					if k > k0 {
						later++
						if a.status == http.StatusOK {
							laterOK++
						}
					}
				}
				if a.reason != "" {
					n := byReason[a.reason]
					n[0]++
					byReason[a.reason] = n
				}
			}
			for i, n := range completed {
				if n != each {
					t.Errorf("client %d completed %d of %d requests", i, n, each)
				}
			}
			share := float64(retriesOK) / float64(max(retries, 1))
			t.Logf("%s: %d attempts for %d successes (%.2f per success) in %.1fs; %d of %d retries made at Retry-After succeeded (%.2f), %d of %d after the first window; refusals by reason %v",
				c.name, len(attempts), ok, float64(len(attempts))/float64(max(ok, 1)), end.Sub(start).Seconds(), retriesOK, retries, share, laterOK, later, byReason)
			if later < 5 {
				t.Errorf("%d retries after the first window: too few to show anything", later)
			}
			// The first window is the limit's cold start: the clients arrive
			// together, and newcomers told to wait for the re-plan may find
			// the window spent by then. From the second window on, the unit a
			// retry was told of is its own (a share), booked for it (the fair
			// pool), or its turn at the pacer, so nearly every retry succeeds
			// (the contract's Responses section says why). The jitter moves
			// no turn.
			if c.target && float64(laterOK) < 0.95*float64(later) {
				t.Errorf("%d of %d retries made at Retry-After after the first window succeeded, want at least 95%%", laterOK, later)
			}
			// The headers of a refusal never contradict it: remaining 0, and
			// the reset the same moment as retry-after, no later than the
			// next window's end plus the jitter (a paced turn may fall in
			// the next window).
			jitter, _ := time.ParseDuration(fmt.Sprint(c.cfg["retry_after_jitter"]))
			most := int((2*tg.settings.Engine.Cycle + jitter + time.Second - 1) / time.Second)
			for _, a := range attempts {
				if a.status != http.StatusTooManyRequests {
					continue
				}
				ra, err := strconv.Atoi(a.retryAfter)
				if err != nil || ra < 1 || ra > most || a.remaining != "0" || a.reset != a.retryAfter {
					t.Errorf("a 429 with retry-after %q, remaining %q, reset %q: want 1..%d s, 0, and the reset equal to retry-after",
						a.retryAfter, a.remaining, a.reset, most)
				}
			}
			// Capacity used in the windows the clients kept busy: every full
			// window from the first to the one before the last success.
			capacity := tg.settings.Engine.Capacity
			kn, _, _ := engine.WindowAt(last, tg.settings.Engine.Cycle, tg.settings.Engine.WindowOffset)
			var used, windows int
			for k := k0; k < kn; k++ {
				used += perWindow[k]
				windows++
				t.Logf("window %d: admitted %d of %d", k-k0, perWindow[k], capacity)
			}
			if windows > 0 {
				u := float64(used) / float64(int64(windows)*capacity)
				t.Logf("%s: the busy windows used %.2f of the capacity", c.name, u)
			}
		})
	}
}
