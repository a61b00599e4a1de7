package e2e

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// TestCaps: three clients hammer a limit of 40 per window, "free" capped
// at 5 (docs/contract.md, "Caps"). In every window after the first busy
// one, under the seed and the fair policy, free is admitted its cap and
// the others share the other 35; with max_share 15 as well, each is
// admitted its cap, though 5 units then go unused. No response announces
// more than the client's cap. (The first busy window follows the quiet
// one of registration, whose demands all fit: under fair its level is the
// capacity, and what a and b borrow past their guarantees goes to who
// asks first. The contract says so; the windows judged here are planned
// from a busy one.)
func TestCaps(t *testing.T) {
	for _, tc := range []struct {
		name, policy string
		maxShare     int
		want         map[string]int // per window; a and b each within one unit without max_share
	}{
		{"seed", "seed", 0, map[string]int{"free": 5, "a": 17, "b": 17}},
		{"fair", "fair", 0, map[string]int{"free": 5, "a": 17, "b": 17}},
		{"seed, max_share", "seed", 15, map[string]int{"free": 5, "a": 15, "b": 15}},
		{"fair, max_share", "fair", 15, map[string]int{"free": 5, "a": 15, "b": 15}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := map[string]any{"capacity": 40, "cycle": "2s", "policy": tc.policy, "caps": map[string]any{"free": 5}}
			caps := map[string]int{"free": 5, "a": 40, "b": 40}
			if tc.maxShare > 0 {
				cfg["max_share"] = tc.maxShare
				caps["a"], caps["b"] = tc.maxShare, tc.maxShare
			}
			tg := loadTarget(t, 2, cfg)
			ids := []string{"free", "a", "b"}
			tg.registerAll(t, ids)
			start := untilNextWindow(tg.settings)
			cycle := tg.settings.Engine.Cycle
			stop := start.Add(3 * cycle)
			rs := fanOut([]int{2, 2, 2}, func(i, _ int, c *http.Client) []result {
				var mine []result
				for time.Now().Before(stop) {
					mine = append(mine, tg.get(c, ids[i]))
					time.Sleep(5 * time.Millisecond)
				}
				return mine
			})
			for _, r := range rs {
				if limit, err := strconv.Atoi(r.header.Get("x-ratelimit-limit")); err != nil || limit > caps[r.client] {
					t.Fatalf("%s's response announces a limit of %q, above its cap %d: %v", r.client, r.header.Get("x-ratelimit-limit"), caps[r.client], r)
				}
			}
			got := admittedPerWindow(t, rs, tg.settings)
			first, _, _ := engine.WindowAt(start, cycle, tg.settings.Engine.WindowOffset)
			for w := first + 1; w < first+3; w++ {
				free, a, b := got[windowClient{w, "free"}], got[windowClient{w, "a"}], got[windowClient{w, "b"}]
				t.Logf("window %d: free %d, a %d, b %d", w, free, a, b)
				// Each asks far more than 40 a window. Responses at the
				// window's edges may be left out above, and under fair
				// the late pool may leave a unit or two unused. Without
				// max_share, a and b split 35 (one of them 18): 31 or
				// more is well above the 26 or 27 they would have if
				// free's cap stranded what it keeps.
				if free > 5 || a > caps["a"] || b > caps["b"] || a < tc.want["a"]-3 || b < tc.want["b"]-3 ||
					tc.maxShare == 0 && a+b < 31 {
					t.Errorf("window %d: free %d, a %d, b %d admitted, want %v", w, free, a, b, tc.want)
				}
			}
		})
	}
}
