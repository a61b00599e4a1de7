package e2e

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// accessLine is a line of the access log that envoy/envoy.yaml writes to
// stdout: `[borrowcycle] <time> "<method> <path>" <status> <record or ->`.
var accessLine = regexp.MustCompile(`^\[borrowcycle\] \S+ "(\S+) (\S+)" (\d+) (.*)$`)

// accessLog waits until Envoy has written n access-log lines for paths with
// the given prefix (envoyrun has Envoy flush them every 100 ms) and
// returns their "<method> <path> <status> <record>".
func (tg *target) accessLog(t *testing.T, prefix string, n int) []string {
	t.Helper()
	var got []string
	for range 100 {
		got = got[:0]
		for _, line := range strings.Split(tg.envoy.Log(), "\n") {
			if m := accessLine.FindStringSubmatch(line); m != nil && strings.HasPrefix(m[2], prefix) {
				got = append(got, m[1]+" "+m[2]+" "+m[3]+" "+m[4])
			}
		}
		if len(got) >= n {
			return got
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("access log has %d lines for %s, want %d:\n%s", len(got), prefix, n, strings.Join(got, "\n"))
	return nil
}

// TestAccessLogNamesLimitAndClient reads the access log of a real Envoy:
// every decided request carries its limit, outcome, share, remaining and
// the hash of its client id; the raw id only where log_client_id allows.
func TestAccessLogNamesLimitAndClient(t *testing.T) {
	cfg := severalLimits()
	cfg["limits"] = append(cfg["limits"].([]any),
		map[string]any{"name": "audit", "log_client_id": true, "match": map[string]any{"path_prefix": "/audit"}})
	tg := configuredTarget(t, cfg, startOpts{concurrency: 2})
	c := newClient()
	sendRegistered(t, c, tg.url, "POST", "/export/a", "acme corp")
	for range 2 {
		send(c, tg.url, "POST", "/export/a", "acme corp")
	}
	sendRegistered(t, c, tg.url, "GET", "/audit/x", "zoë")
	send(c, tg.url, "GET", "/healthz", "acme corp")

	hash := func(id string) string {
		const hex = "0123456789abcdef"
		h, b := engine.HashID(id), make([]byte, 16)
		for i := range b {
			b[i] = hex[h>>(60-4*uint(i))&0xf]
		}
		return string(b)
	}
	acme := " client=" + hash("acme corp")
	export := tg.accessLog(t, "/export", 3)
	// A newcomer's first requests may be pending; the last three are the
	// admitted, admitted, rejected sequence of a 10-unit share at cost 5.
	want := []string{
		"POST /export/a 200 limit=export action=allowed reason=ok share=10 remaining=5" + acme,
		"POST /export/a 200 limit=export action=allowed reason=ok share=10 remaining=0" + acme,
		"POST /export/a 429 limit=export action=rejected reason=over_limit share=10 remaining=0" + acme,
	}
	if got := export[len(export)-3:]; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("export lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, line := range export {
		if strings.Contains(line, "acme") {
			t.Errorf("raw client id logged without log_client_id: %s", line)
		}
	}
	audit := tg.accessLog(t, "/audit", 1)
	if got, want := audit[len(audit)-1], "GET /audit/x 200 limit=audit action=allowed reason=ok share=10 remaining=9 client="+hash("zoë")+" id=zo%c3%ab"; got != want {
		t.Errorf("audit line:\n got  %s\n want %s", got, want)
	}
	if got := tg.accessLog(t, "/healthz", 1); got[0] != "GET /healthz 200 -" {
		t.Errorf("unmatched request logged as %q, want no record", got[0])
	}
}
