package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/borrowcycle/borrowcycle/internal/envoyrun"
)

// TestDashboardQueriesMatchEnvoy scrapes /stats/prometheus of an Envoy
// running the shipped envoy/envoy.yaml and checks envoy/grafana/borrowcycle.json
// against it: every PromQL query names at least one metric, every metric it
// names is exported, every label it filters or groups by is on one of those
// metrics (or is a label Prometheus adds to every scraped series), and every
// borrowcycle metric Envoy exports is charted somewhere.
func TestDashboardQueriesMatchEnvoy(t *testing.T) {
	// The shipped Envoy, and one in fleet mode for the fleet metrics (its
	// Gubernator cluster is a closed port: the metrics exist all the same).
	closed, err := envoyrun.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	// metric name -> label names seen on its series
	exported := map[string]map[string]bool{}
	tgs := []*target{shippedTarget(t, startOpts{})}
	if !setup.compose {
		tgs = append(tgs, fleetEnvoy(t, "dashboard-fleet", fleetConfig(), closed))
	}
	for _, tg := range tgs {
		samples, _, err := fetchPrometheus(tg.admin)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range samples {
			if exported[s.name] == nil {
				exported[s.name] = map[string]bool{}
			}
			for _, l := range labelNames(s.labels) {
				exported[s.name][l] = true
			}
		}
	}

	queries := dashboardQueries(t)
	if len(queries) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	charted := map[string]bool{}
	for _, q := range queries {
		metrics, labels, err := promRefs(q.expr)
		if err != nil {
			t.Errorf("%s: %v in %q", q.where, err, q.expr)
			continue
		}
		if len(metrics) == 0 {
			t.Errorf("%s: query names no metric: %q", q.where, q.expr)
		}
		for _, m := range metrics {
			charted[m] = true
			if exported[m] == nil {
				t.Errorf("%s: metric %s is not exported by Envoy's /stats/prometheus (query %q)", q.where, m, q.expr)
			}
		}
		for _, l := range labels {
			if scrapeLabels[l] || slices.ContainsFunc(metrics, func(m string) bool { return exported[m][l] }) {
				continue
			}
			t.Errorf("%s: label %s is on none of %v (query %q)", q.where, l, metrics, q.expr)
		}
	}
	var missing []string
	for m := range exported {
		if strings.HasPrefix(m, "borrowcycle_") && !charted[m] {
			missing = append(missing, m)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("exported but on no panel: %v", missing)
	}
	if len(charted) == 0 {
		t.Error("no metric found in the dashboard")
	}
}

// scrapeLabels are the labels Prometheus adds to every series it scrapes,
// which Envoy's page therefore does not show.
var scrapeLabels = map[string]bool{"instance": true, "job": true}

var labelName = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)

// labelNames returns the label names of Envoy's `a="x",b="y"` label text.
func labelNames(text string) []string {
	var out []string
	for _, m := range labelName.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

type dashQuery struct{ where, expr string }

// dashboardQueries returns the PromQL of every panel target (panels nested
// in rows too) and of every query variable.
func dashboardQueries(t *testing.T) []dashQuery {
	t.Helper()
	root, err := envoyrun.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "envoy", "grafana", "borrowcycle.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("borrowcycle.json: %v", err)
	}
	var out []dashQuery
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, dashQuery{fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		// Grafana writes a query variable's query as a string or as
		// {"query": "..."} depending on its version.
		var s string
		if json.Unmarshal(v.Query, &s) != nil {
			var o struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &o); err != nil {
				t.Fatalf("variable %s: query is neither a string nor an object: %s", v.Name, v.Query)
			}
			s = o.Query
		}
		out = append(out, dashQuery{fmt.Sprintf("variable %s", v.Name), s})
	}
	return out
}

type dashPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

// promToken matches one PromQL token, with Grafana's $variables. Strings,
// range brackets and numbers with their duration units are single tokens:
// what is inside them names no metric.
var promToken = regexp.MustCompile(`^(?:\s+|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\[[^\]]*\]|[A-Za-z_:][A-Za-z0-9_:]*|=~|!~|!=|==|>=|<=|[{}(),=<>+\-*/^%]|[0-9][0-9a-z.]*|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)`)

// promKeywords are the identifiers that are operators, not metric names.
var promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true}

// labelListWords take a parenthesised list of label names.
var labelListWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// promRefs returns the metric names an expression selects and the label
// names it matches on or groups by. It knows enough PromQL for dashboards:
// selectors, functions and aggregations, by/without/on/ignoring lists,
// binary operators, and Grafana's label_values(metric, label).
func promRefs(expr string) (metrics, labels []string, err error) {
	var toks []string
	for rest := expr; rest != ""; {
		m := promToken.FindString(rest)
		if m == "" {
			return nil, nil, fmt.Errorf("cannot read %q", rest)
		}
		rest = rest[len(m):]
		if strings.TrimSpace(m) != "" {
			toks = append(toks, m)
		}
	}
	ident := regexp.MustCompile(`^[A-Za-z_:][A-Za-z0-9_:]*$`)
	for i := 0; i < len(toks); i++ {
		tok := toks[i]
		next := ""
		if i+1 < len(toks) {
			next = toks[i+1]
		}
		switch {
		case tok == "{":
			// A matcher list: each name before an operator is a label.
			for i++; i < len(toks) && toks[i] != "}"; i++ {
				if ident.MatchString(toks[i]) && i+1 < len(toks) && strings.ContainsAny(toks[i+1], "=~!") {
					labels = append(labels, toks[i])
				}
			}
		case labelListWords[tok] && next == "(":
			for i += 2; i < len(toks) && toks[i] != ")"; i++ {
				if ident.MatchString(toks[i]) {
					labels = append(labels, toks[i])
				}
			}
		case tok == "label_values" && next == "(":
			// label_values(metric, label) or label_values(label): the
			// identifier after the last comma is a label.
			depth := 0
			last := -1
			for j := i + 1; j < len(toks); j++ {
				if toks[j] == "(" {
					depth++
				} else if toks[j] == ")" {
					if depth--; depth == 0 {
						last = j
						break
					}
				}
			}
			if last < 0 || !ident.MatchString(toks[last-1]) {
				return nil, nil, fmt.Errorf("label_values without a closing label argument")
			}
			labels = append(labels, toks[last-1])
			toks = slices.Delete(slices.Clone(toks), last-1, last)
		case ident.MatchString(tok) && (next == "by" || next == "without"):
			// An aggregation written as `sum by (...) (...)`.
		case ident.MatchString(tok) && next != "(" && !promKeywords[tok]:
			metrics = append(metrics, tok)
		}
	}
	return metrics, labels, nil
}

// TestPromRefs pins the reader the dashboard test relies on.
func TestPromRefs(t *testing.T) {
	cases := []struct {
		expr            string
		metrics, labels []string
	}{
		{`sum by (borrowcycle_name, reason) (rate(borrowcycle_requests_rejected{borrowcycle_name=~"$limit"}[$__rate_interval]))`,
			[]string{"borrowcycle_requests_rejected"}, []string{"borrowcycle_name", "reason", "borrowcycle_name"}},
		{`a / clamp_min(b{x="1"} + c, 1) and on (y) d offset 5m`,
			[]string{"a", "b", "c", "d"}, []string{"x", "y"}},
		{`label_values(borrowcycle_requests_allowed, borrowcycle_name)`,
			[]string{"borrowcycle_requests_allowed"}, []string{"borrowcycle_name"}},
		{`max without (instance) (g)`, []string{"g"}, []string{"instance"}},
	}
	for _, c := range cases {
		m, l, err := promRefs(c.expr)
		if err != nil {
			t.Errorf("%q: %v", c.expr, err)
			continue
		}
		if !slices.Equal(m, c.metrics) || !slices.Equal(l, c.labels) {
			t.Errorf("%q: metrics %v labels %v, want %v %v", c.expr, m, l, c.metrics, c.labels)
		}
	}
	if _, _, err := promRefs("rate(x[5m]) # comment"); err == nil {
		t.Error("an unreadable character was accepted")
	}
}
