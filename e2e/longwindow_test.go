package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestDayLongWindowSurvivesAReload: a limit of 6 a day keeps its count
// across a configuration reload, since shared data outlives the VMs
// (docs/contract.md, "Long windows"). A client that used its 6 is still
// refused after Envoy took a new configuration, on a new connection to
// the new listener, with a retry-after that names the day's end. The
// window is placed 12 h from now (window_offset), so that no window ends
// during the test.
func TestDayLongWindowSurvivesAReload(t *testing.T) {
	const day = 24 * time.Hour
	offset := time.Duration((time.Now().Add(12 * time.Hour).UnixNano()) % int64(day)).Truncate(time.Second)
	config := func(debug bool) string {
		return fmt.Sprintf(`{"capacity": 6, "cycle": "24h", "window_offset": %q, "debug_headers": %v}`, offset.String(), debug)
	}
	lt := startLDS(t, config(false))
	c := newClient()
	lt.register(t, c, "acme")
	var last result
	for range 10 {
		if last = lt.get(c, "acme"); last.status == 429 {
			break
		}
	}
	if last.reason() != "over_limit" {
		t.Fatalf("10 requests over a capacity of 6 a day never hit over_limit; last: %v", last)
	}
	checkDayEnd := func(r result) {
		t.Helper()
		ra, err := strconv.Atoi(r.header.Get("retry-after"))
		if err != nil || ra < int((11*time.Hour).Seconds()) || ra > int((12*time.Hour).Seconds())+60 {
			t.Errorf("retry-after %q, want about 12 h (the day's end): %v", r.header.Get("retry-after"), r)
		}
	}
	checkDayEnd(last)

	if got := lt.push(t, config(true)); got != "update_success" {
		t.Fatalf("reload: %s", got)
	}
	c.CloseIdleConnections()
	lt.waitDrained(t)
	r := lt.get(newClient(), "acme")
	if r.status != 429 || r.reason() != "over_limit" || r.header.Get("x-borrowcycle-plan") == "" {
		t.Fatalf("after the reload: %v, want over_limit from the new configuration (debug headers on): the day's count kept", r)
	}
	checkDayEnd(r)
	t.Logf("after the reload: %s, retry-after %s s", r.reason(), r.header.Get("retry-after"))
}
