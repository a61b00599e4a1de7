package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/internal/envoyrun"
	"github.com/borrowcycle/borrowcycle/plugin/filter"
)

// severalLimits is the docs/contract.md example with small capacities and
// no catch-all limit: the health check excluded by an unlimited rule,
// search, and export at cost 5.
func severalLimits() map[string]any {
	return map[string]any{
		"cycle": "1h", "capacity": 10, "client_header": "x-tenant", "debug_headers": true,
		"limits": []any{
			map[string]any{"name": "health", "unlimited": true, "match": map[string]any{"path_exact": "/healthz"}},
			map[string]any{"name": "search", "match": map[string]any{"path_prefix": "/search", "methods": []any{"GET"}}},
			map[string]any{"name": "export", "cost": 5, "match": map[string]any{"path_prefix": "/export"}},
		},
	}
}

// send sends method path with the client id in the x-tenant header.
func send(c *http.Client, url, method, path, tenant string) result {
	r := result{client: tenant}
	req, err := http.NewRequest(method, url+path, nil)
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set("x-tenant", tenant)
	resp, err := c.Do(req)
	if err != nil {
		r.err = err
		return r
	}
	resp.Body.Close()
	r.status, r.header = resp.StatusCode, resp.Header
	return r
}

// sendRegistered sends until the answer is not a pending rejection,
// sleeping as retry-after says: a newcomer waits for the early rollover
// that registers it.
func sendRegistered(t *testing.T, c *http.Client, url, method, path, tenant string) result {
	t.Helper()
	for range 50 {
		r := send(c, url, method, path, tenant)
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.reason() != "pending" {
			return r
		}
		s, _ := strconv.Atoi(r.header.Get("retry-after"))
		time.Sleep(time.Duration(max(s, 1)) * time.Second / 4)
	}
	t.Fatalf("%s %s as %s: still pending after 50 attempts", method, path, tenant)
	return result{}
}

// TestSeveralLimits runs the contract's example in a real Envoy at
// --concurrency 2: each limit is its own pool with its own metrics, export
// charges 5 units a request, and requests no limit matches pass unlimited.
func TestSeveralLimits(t *testing.T) {
	tg := configuredTarget(t, severalLimits(), startOpts{concurrency: 2})
	c := newClient()

	// export: a lone client's share is the capacity, 10 units: two requests
	// of cost 5 in one cycle, then over_limit until the cycle ends.
	first := sendRegistered(t, c, tg.url, "POST", "/export/all", "acme")
	if first.status != 200 || first.header.Get("x-ratelimit-remaining") != "5" {
		t.Fatalf("first export: %v, want 200 with 5 of 10 units left", first)
	}
	byCycle := map[string][]result{cycleOf(t, first): {first}}
	for range 3 {
		r := send(c, tg.url, "POST", "/export/all", "acme")
		byCycle[cycleOf(t, r)] = append(byCycle[cycleOf(t, r)], r)
	}
	for cycle, rs := range byCycle {
		admitted := 0
		for i, r := range rs {
			switch {
			case r.status == 200:
				admitted++
			case r.status == 429 && r.reason() == "over_limit":
				if admitted < 2 && i == len(rs)-1 && len(rs) < 3 {
					t.Errorf("cycle %s: rejected after %d admitted exports: %v", cycle, admitted, r)
				}
				if ra := r.header.Get("retry-after"); ra == "" || ra == "0" {
					t.Errorf("over_limit without a usable retry-after: %v", r)
				}
			default:
				t.Errorf("cycle %s: export %d: %v", cycle, i, r)
			}
		}
		if admitted > 2 {
			t.Errorf("cycle %s: %d exports of cost 5 admitted over a capacity of 10", cycle, admitted)
		}
	}

	// search is a separate pool: export's exhaustion leaves it whole.
	r := sendRegistered(t, c, tg.url, "GET", "/search?q=x", "acme")
	if r.status != 200 || r.header.Get("x-ratelimit-limit") != "10" {
		t.Errorf("search after export ran dry: %v, want admitted from its own share of 10", r)
	}
	// No limit matches a POST to search, and the health check's rule is
	// unlimited: both pass without rate-limit headers, however many.
	for _, p := range []struct{ method, path string }{{"POST", "/search"}, {"GET", "/healthz"}} {
		for range 12 {
			r := send(c, tg.url, p.method, p.path, "acme")
			if r.status != 200 || r.header.Get("x-ratelimit-limit") != "" {
				t.Fatalf("%s %s: %v, want 200 without rate-limit headers", p.method, p.path, r)
			}
		}
	}

	st, err := tg.flushedStats()
	if err != nil {
		t.Fatal(err)
	}
	if got := st["wasmcustom.borrowcycle.requests_unlimited"]; got != 24 {
		t.Errorf("requests_unlimited = %d, want 24", got)
	}
	if got := st["wasmcustom.borrowcycle.search.requests_allowed"]; got < 1 {
		t.Errorf("search.requests_allowed = %d, want at least 1", got)
	}
	if got := st["wasmcustom.borrowcycle.export.requests_rejected.over_limit"]; got < 1 {
		t.Errorf("export.requests_rejected.over_limit = %d, want at least 1", got)
	}
}

// TestSeveralLimitsExampleIsMirrored: the "Several limits" example of
// docs/contract.md is the pluginConfig of envoy/istio/wasmplugin.yaml
// (which TestIstioWasmPlugin validates in Envoy), so the two cannot drift.
func TestSeveralLimitsExampleIsMirrored(t *testing.T) {
	root, err := envoyrun.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "contract.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Several limits\n")
	if !ok {
		t.Fatal(`docs/contract.md has no "## Several limits" section`)
	}
	_, block, ok := strings.Cut(section, "```json\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal(`the "Several limits" section has no json example`)
	}
	var example any
	if err := json.Unmarshal([]byte(block), &example); err != nil {
		t.Fatalf("contract example: %v", err)
	}
	istio := field(t, loadIstioYAML(t, "wasmplugin.yaml"), "spec", "pluginConfig")
	if !reflect.DeepEqual(example, normalizeJSON(t, istio)) {
		t.Errorf("envoy/istio/wasmplugin.yaml pluginConfig differs from the contract's example:\n%s\nvs\n%s",
			mustJSON(t, istio), block)
	}
	if _, err := filter.ParseSettings([]byte(block)); err != nil {
		t.Errorf("contract example is invalid: %v", err)
	}
}

// normalizeJSON gives a decoded YAML value the types encoding/json decodes
// the same document to.
func normalizeJSON(t *testing.T, v any) any {
	var out any
	if err := json.Unmarshal([]byte(mustJSON(t, v)), &out); err != nil {
		t.Fatal(err)
	}
	return out
}
