package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// TestSeveralWindows: a limit of 4 a second and 10 per 5 s, in real Envoy
// with two workers (docs/contract.md, "Several windows"). One client asks
// far more than both for two 5 s windows. No second admits more than 4,
// and each 5 s window admits its 10 in full, although most requests are
// refused by the 1 s window first: a refused request takes nothing from
// the window that said yes. The metrics of each window carry a window
// tag.
func TestSeveralWindows(t *testing.T) {
	tg := loadTarget(t, 2, map[string]any{"windows": []any{
		map[string]any{"capacity": 4, "cycle": "1s"}, map[string]any{"capacity": 10, "cycle": "5s"}}})
	const long = 5 * time.Second
	_, _, end := engine.WindowAt(time.Now(), long, 0)
	time.Sleep(time.Until(end) + 20*time.Millisecond)
	stop := end.Add(2 * long)
	// Registered at the window's start: a newcomer is told pending by a
	// window that has not counted it yet (each window has its own table).
	registration := tg.register(t, newClient(), "acme")
	rs := fanOut([]int{2}, func(_, _ int, c *http.Client) []result {
		var mine []result
		for time.Now().Before(stop) {
			mine = append(mine, tg.get(c, "acme"))
			time.Sleep(10 * time.Millisecond)
		}
		return mine
	})
	rs = append(rs, registration...)
	perSecond, perLong := map[int64]int{}, map[int64]int{}
	straddled := map[int64]int{} // admitted, sent in one 5 s window and received in the next: either's
	refusedBy := map[string]int{}
	for _, r := range rs {
		if r.err != nil {
			t.Fatalf("request failed: %v", r)
		}
		if r.status != 200 {
			if r.reason() == "pending" {
				continue // (a window re-counting the client after it idled: see register)
			}
			if r.reason() != "over_limit" {
				t.Fatalf("unexpected response: %v", r)
			}
			// The window that refused is the one the headers name: its
			// limit is that window's share.
			refusedBy[r.header.Get("x-ratelimit-limit")]++
			continue
		}
		// Counted by the time sent and received, as elsewhere: a response
		// whose two times fall in different windows is left out.
		s1, _, _ := engine.WindowAt(r.sent, time.Second, 0)
		s2, _, _ := engine.WindowAt(r.recv, time.Second, 0)
		if s1 == s2 {
			perSecond[s1]++
		}
		l1, _, _ := engine.WindowAt(r.sent, long, 0)
		l2, _, _ := engine.WindowAt(r.recv, long, 0)
		if l1 == l2 {
			perLong[l1]++
		} else {
			straddled[l1]++
			straddled[l2]++
		}
	}
	for s, n := range perSecond {
		if n > 4 {
			t.Errorf("second %d admitted %d, over its 4", s, n)
		}
	}
	first, _, _ := engine.WindowAt(end, long, 0)
	for w := first; w < first+2; w++ {
		// Each connection may have an admitted response straddle each
		// edge: it belongs to one of the two windows.
		t.Logf("5 s window %d: %d admitted, %d more straddling an edge", w, perLong[w], straddled[w])
		if perLong[w] > 10 || perLong[w]+straddled[w] < 10 {
			t.Errorf("5 s window %d admitted %d (and %d straddling an edge), want its 10: the requests the 1 s window refused took nothing from it", w, perLong[w], straddled[w])
		}
	}
	t.Logf("refused by the window of share 4 (1 s): %d; of share 10 (5 s): %d", refusedBy["4"], refusedBy["10"])
	if refusedBy["4"] == 0 || refusedBy["10"] == 0 {
		t.Errorf("refusals by share %v: want some from each window", refusedBy)
	}
	time.Sleep(2*tg.settings.HousekeepingPeriod() + 100*time.Millisecond)
	samples, _, err := fetchPrometheus(tg.admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, window := range []string{"1s", "5s"} {
		found := false
		for _, s := range samples {
			if s.name == "borrowcycle_requests_rejected" && strings.Contains(s.labels, `window="`+window+`"`) &&
				strings.Contains(s.labels, `reason="over_limit"`) && s.value > 0 {
				found = true
			}
		}
		if !found {
			t.Errorf("no borrowcycle_requests_rejected{window=%q,reason=\"over_limit\"} above 0 in /stats/prometheus", window)
		}
	}
}
