package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// The flood variant's parts: its load's arguments (clients.lua's flood
// mode) and the checks of a variant whose answers are a mix of statuses.

// floodPrefix starts every id of the flood load: flood-1 ... flood-<n>.
const floodPrefix = "flood-"

// floodArgs are clients.lua's arguments after the header name for a load
// of ids distinct ids, built per request.
func floodArgs(ids int) []string { return []string{"--flood", floodPrefix, strconv.Itoa(ids)} }

// loadArgs are clients.lua's arguments after the header name for v: the
// rotating client ids, or the flood.
func (v variant) loadArgs(o Options) []string {
	if v.flood > 0 {
		return floodArgs(v.flood)
	}
	return o.clientIDs()
}

// warmArgs are loadArgs for the warm-up: the ids of a known flood each
// twice in a row.
func (v variant) warmArgs(o Options) []string {
	if v.known {
		return append(v.loadArgs(o), "twice")
	}
	return v.loadArgs(o)
}

// answer checks one probe's answer against the expectation.
func (e expectation) answer(status int, h http.Header) error {
	if e.mixed != nil {
		return e.mixedProbe(status, h)
	}
	if status != e.status {
		return fmt.Errorf("status %d (x-borrowcycle-reason %q), want %d", status, h.Get("x-borrowcycle-reason"), e.status)
	}
	return e.probe(h)
}

// check checks a measured interval's counters against the expectation.
func (e expectation) check(st statusCounts, w wrkResult) error {
	if e.mixed != nil {
		return checkMixedStatuses(e.mixed, st, w)
	}
	return checkStatuses(e.status, st, w)
}

// classes names the status classes the expectation allows, for the table.
func (e expectation) classes() string {
	if e.mixed == nil {
		return fmt.Sprintf("%dxx", e.status/100)
	}
	var cs []string
	for _, s := range e.mixed {
		if c := fmt.Sprintf("%dxx", s/100); !slices.Contains(cs, c) {
			cs = append(cs, c)
		}
	}
	return strings.Join(cs, "+")
}

// checkMixedStatuses fails a measured interval of a mixed variant in which
// a response fell outside the allowed statuses' classes (a 5xx, or a 4xx
// for a variant that may only admit), and one in which wrk and Envoy
// disagree on how many were rejected: wrk's non-2xx/3xx count must be
// Envoy's non-2xx/3xx count, up to the responses Envoy sent that wrk never
// read (those in flight when wrk stopped: Envoy's answered minus wrk's
// completed requests, at most one per connection).
func checkMixedStatuses(allowed []int, st statusCounts, w wrkResult) error {
	if st.answered() == 0 || w.requests == 0 {
		return fmt.Errorf("no requests completed (Envoy: %s; wrk: %d)", st, w.requests)
	}
	var inClasses uint64
	seen := map[int]bool{}
	for _, s := range allowed {
		if c := s / 100; !seen[c] {
			seen[c] = true
			inClasses += st.ofClass(s)
		}
	}
	if inClasses != st.answered() {
		return fmt.Errorf("responses outside %v: %s", allowed, st)
	}
	if e := w.socketErrors(); e > 0 {
		return fmt.Errorf("wrk socket errors: connect %d, read %d, write %d, timeout %d", w.connect, w.read, w.write, w.timeout)
	}
	if st.answered() < w.requests {
		return fmt.Errorf("wrk completed %d requests, Envoy answered only %d", w.requests, st.answered())
	}
	unread := st.answered() - w.requests
	envoyNon2xx := st.answered() - st.c2 - st.c3
	if w.non2xx3xx > envoyNon2xx || envoyNon2xx > w.non2xx3xx+unread {
		return fmt.Errorf("wrk counted %d non-2xx/3xx responses, Envoy %d (%s; %d answered that wrk did not read)",
			w.non2xx3xx, envoyNon2xx, st, unread)
	}
	return nil
}

// floodStatsPrefix selects the plugin's own counters and gauge (limit
// "default", the only one in the benchmark's configurations).
const floodStatsPrefix = "wasmcustom.borrowcycle.default."

// pluginStats reads the plugin's counters and gauge from the admin
// interface after the last round, so that the table can say what the flood
// did to the client table (how many were registered, why the rest were
// refused), over the whole run: warm-up, probes and rounds.
func pluginStats(client *http.Client, adminURL string) (string, error) {
	resp, err := client.Get(adminURL + `/stats?filter=^wasmcustom\.borrowcycle\.default\.`)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("admin /stats: %s", resp.Status)
	}
	return summarizePluginStats(string(body)), nil
}

// summarizePluginStats keeps the non-zero stats of a /stats body, without
// their common prefix, in Envoy's order.
func summarizePluginStats(body string) string {
	var kept []string
	for _, line := range strings.Split(body, "\n") {
		name, val, ok := strings.Cut(line, ": ")
		rest, found := strings.CutPrefix(name, floodStatsPrefix)
		if !ok || !found || strings.TrimSpace(val) == "0" {
			continue
		}
		kept = append(kept, rest+" "+strings.TrimSpace(val))
	}
	return strings.Join(kept, ", ")
}
