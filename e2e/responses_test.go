package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// exchange drives one fresh client of tg through the life of a share: the
// anonymous rejections, registration, every admitted request of the cycle,
// and the first over_limit rejection. It checks each response against the
// contract and returns how many of each outcome it saw.
func exchange(t *testing.T, tg *target) map[string]int64 {
	t.Helper()
	s := tg.settings
	c := newClient()
	seen := map[string]int64{}

	// No header, a blank one, and one a byte too long are all anonymous.
	blank, long := "  \t ", strings.Repeat("a", s.MaxClientIDBytes+1)
	for _, id := range []*string{nil, &blank, &long} {
		r := get(c, tg.url+"/", s.ClientHeader, id)
		checkAnonymous(t, s, r)
		seen["anonymous"]++
	}

	// A fresh id, so that a rerun against a long-lived stack starts clean.
	id := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	if len(id) > s.MaxClientIDBytes {
		id = id[len(id)-s.MaxClientIDBytes:]
	}
	rs := tg.register(t, c, id)
	for _, r := range rs[:len(rs)-1] {
		checkRejected(t, s, r, "pending")
		seen["pending"]++
	}
	// Registration makes the plan that first counts this client (the first
	// plan, or a re-plan of the running window), so none of the share it
	// announces is used yet.
	r := rs[len(rs)-1]
	share := checkAllowed(t, s, r)
	seen["allowed"]++
	for i := int64(0); i <= s.Engine.Capacity && !t.Failed(); i++ {
		r = tg.get(c, id)
		if r.status != 200 {
			break
		}
		if got := checkAllowed(t, s, r); got != share {
			t.Errorf("share changed within the cycle: %d then %d", share, got)
		}
		seen["allowed"]++
	}
	if t.Failed() {
		return seen
	}
	overShare := checkRejected(t, s, r, "over_limit")
	seen["over_limit"]++
	if share < 0 {
		share = overShare // headers_on_allowed off: only rejections tell
	}
	// One client on one connection is served by one worker, which leases
	// the share piece by piece until it is gone: it must get all of it,
	// and not one request more.
	if seen["allowed"] != share {
		t.Errorf("client admitted %d times before over_limit, want its share %d", seen["allowed"], share)
	}
	return seen
}

// TestShippedConfigResponses runs envoy/envoy.yaml as shipped and checks
// the responses and the metrics they move.
func TestShippedConfigResponses(t *testing.T) {
	tg := shippedTarget(t, startOpts{})
	before, err := tg.flushedStats()
	if err != nil {
		t.Fatal(err)
	}
	seen := exchange(t, tg)
	if t.Failed() {
		return
	}
	after, err := tg.flushedStats()
	if err != nil {
		t.Fatal(err)
	}
	// Exact deltas: this test is the only traffic (for the compose target,
	// that means nobody else may use the stack during the run).
	prefix := "wasmcustom.borrowcycle." + tg.settings.Name + "."
	want := map[string]int64{
		"requests_allowed":             seen["allowed"],
		"requests_rejected.over_limit": seen["over_limit"],
		"requests_rejected.anonymous":  seen["anonymous"],
		"requests_rejected.pending":    seen["pending"],
	}
	for name, n := range want {
		full := prefix + name
		if _, ok := after[full]; !ok {
			t.Errorf("stat %s missing", full)
			continue
		}
		if d := after[full] - before[full]; d != n {
			t.Errorf("%s moved by %d, want %d", full, d, n)
		}
	}
	checkPrometheus(t, tg, after)
}

// checkPrometheus checks that /stats/prometheus carries every documented
// metric, with the limit name, reason and kind as labels, and agrees with
// the plain stats.
func checkPrometheus(t *testing.T, tg *target, stats map[string]int64) {
	t.Helper()
	samples, types, err := fetchPrometheus(tg.admin)
	if err != nil {
		t.Fatal(err)
	}
	name := tg.settings.Name
	nameLabel := fmt.Sprintf("borrowcycle_name=%q", name)
	type series struct{ prom, labels, stat, kind string }
	want := []series{
		{"borrowcycle_requests_allowed", nameLabel, "requests_allowed", "counter"},
		{"borrowcycle_clients_active", nameLabel, "clients_active", "gauge"},
		{"borrowcycle_cas_retries", nameLabel, "cas_retries", "counter"},
		{"borrowcycle_store_failures", nameLabel, "store_failures", "counter"},
		{"borrowcycle_cas_exhausted", nameLabel, "cas_exhausted", "counter"},
		{"borrowcycle_clock_jumps", nameLabel, "clock_jumps", "counter"},
		{"borrowcycle_panics", nameLabel, "panics", "counter"},
	}
	for _, reason := range []string{"over_limit", "anonymous", "table_full", "pending", "store_failure", "contended"} {
		l := fmt.Sprintf("%s,reason=%q", nameLabel, reason)
		want = append(want,
			series{"borrowcycle_requests_rejected", l, "requests_rejected." + reason, "counter"},
			series{"borrowcycle_requests_would_reject", l, "requests_would_reject." + reason, "counter"})
	}
	for _, kind := range []string{"deadline", "early"} {
		want = append(want, series{"borrowcycle_rollovers", fmt.Sprintf("%s,kind=%q", nameLabel, kind), "rollovers." + kind, "counter"})
	}
	for _, w := range want {
		key := w.prom + "{" + w.labels + "}"
		got, ok := samples[key]
		if !ok {
			t.Errorf("/stats/prometheus has no %s", key)
			continue
		}
		if types[w.prom] != w.kind {
			t.Errorf("# TYPE %s is %q, want %q", w.prom, types[w.prom], w.kind)
		}
		// Both pages read the same stat; a counter cannot have moved
		// backwards between the two reads.
		stat := "wasmcustom.borrowcycle." + name + "." + w.stat
		if v, ok := stats[stat]; !ok {
			t.Errorf("stat %s missing from /stats", stat)
		} else if w.kind == "counter" && got.value < float64(v) {
			t.Errorf("%s = %v, below /stats %s = %d", key, got.value, stat, v)
		}
	}
}

// TestIETFHeadersCustomStatus checks the other header style, a custom
// status and client header, and headers_on_allowed off.
func TestIETFHeadersCustomStatus(t *testing.T) {
	tg := configuredTarget(t, map[string]any{
		"capacity":            3,
		"cycle":               "30s",
		"rate_limit_headers":  "ietf",
		"headers_on_allowed":  false,
		"status_code":         403,
		"client_header":       "x-tenant",
		"name":                "alt",
		"max_client_id_bytes": 8,
	}, startOpts{})
	seen := exchange(t, tg)
	if !t.Failed() && seen["allowed"] != 3 {
		t.Errorf("the only client admitted %d times, want the whole capacity 3", seen["allowed"])
	}
	if t.Failed() {
		return
	}
	stats, err := tg.flushedStats()
	if err != nil {
		t.Fatal(err)
	}
	checkPrometheus(t, tg, stats)
}
