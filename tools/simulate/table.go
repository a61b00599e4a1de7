package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Tables are Markdown, so that output pastes into docs as is. The wide
// table has the worked example's shape (clients as rows, a size and a
// demand column per cycle, then the size the last demand leads to); the
// long one has a row per cycle and suits long runs.

// groupRow sums a group's members in one grid cycle. share is −1 when no
// member is registered.
type groupRow struct{ share, demand, admitted, rejected int64 }

func (res *Result) groupRows(k int) []groupRow {
	rows := make([]groupRow, len(res.Groups))
	for i := range rows {
		rows[i].share = -1
	}
	for i, m := range res.Members {
		g := &rows[m.group]
		if s := res.Share[k][i]; s >= 0 {
			g.share = max(g.share, 0) + s
		}
		if k < len(res.Demand) {
			g.demand += res.Demand[k][i]
			g.admitted += res.Admitted[k][i]
			g.rejected += res.Rejected[k][i]
		}
	}
	return rows
}

func shareCell(s int64) string {
	if s < 0 {
		return "-"
	}
	return strconv.FormatInt(s, 10)
}

func mdRow(w io.Writer, cells ...string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

func mdRule(w io.Writer, n int) {
	fmt.Fprintln(w, "|"+strings.Repeat("---|", n))
}

// WriteWideTable writes the sizes-and-demand table in the worked example's
// shape, then the admitted-and-rejected table in the same shape.
func WriteWideTable(w io.Writer, res *Result) {
	cycles := len(res.Demand)
	head := []string{"Client"}
	for k := 1; k <= cycles; k++ {
		head = append(head, fmt.Sprintf("Cycle %d size", k), "Demand")
	}
	head = append(head, fmt.Sprintf("Cycle %d size", cycles+1))
	mdRow(w, head...)
	mdRule(w, len(head))
	all := make([][]groupRow, cycles+1)
	for k := range all {
		all[k] = res.groupRows(k)
	}
	totals := make([]string, 0, len(head))
	for g, name := range res.Groups {
		cells := []string{name}
		for k := 0; k < cycles; k++ {
			cells = append(cells, shareCell(all[k][g].share), strconv.FormatInt(all[k][g].demand, 10))
		}
		mdRow(w, append(cells, shareCell(all[cycles][g].share))...)
	}
	totals = append(totals, "Total")
	for k := 0; k <= cycles; k++ {
		var share, demand int64
		for _, r := range all[k] {
			share += max(r.share, 0)
			demand += r.demand
		}
		totals = append(totals, strconv.FormatInt(share, 10))
		if k < cycles {
			totals = append(totals, strconv.FormatInt(demand, 10))
		}
	}
	mdRow(w, totals...)

	fmt.Fprintln(w)
	head = []string{"Client"}
	for k := 1; k <= cycles; k++ {
		head = append(head, fmt.Sprintf("Cycle %d admitted", k), "Rejected")
	}
	mdRow(w, head...)
	mdRule(w, len(head))
	for g, name := range res.Groups {
		cells := []string{name}
		for k := 0; k < cycles; k++ {
			cells = append(cells, strconv.FormatInt(all[k][g].admitted, 10), strconv.FormatInt(all[k][g].rejected, 10))
		}
		mdRow(w, cells...)
	}
}

// WriteLongTable writes one row per cycle; each client cell is
// share/demand/admitted. The last row is the share the last demand leads
// to.
func WriteLongTable(w io.Writer, res *Result) {
	fmt.Fprintln(w, "Cells are share/demand/admitted; \"-\" is not registered.")
	fmt.Fprintln(w)
	head := append(append([]string{"Cycle"}, res.Groups...), "Total", "Plans")
	mdRow(w, head...)
	mdRule(w, len(head))
	cycles := len(res.Demand)
	for k := 0; k <= cycles; k++ {
		cells := []string{strconv.Itoa(k + 1)}
		var tot groupRow
		for _, r := range res.groupRows(k) {
			tot.share += max(r.share, 0)
			tot.demand += r.demand
			tot.admitted += r.admitted
			if k == cycles {
				cells = append(cells, shareCell(r.share))
				continue
			}
			cells = append(cells, fmt.Sprintf("%s/%d/%d", shareCell(r.share), r.demand, r.admitted))
		}
		plans := strconv.Itoa(res.CyclePlans[k])
		if k == cycles {
			mdRow(w, append(cells, strconv.FormatInt(tot.share, 10), plans)...)
			continue
		}
		mdRow(w, append(cells, fmt.Sprintf("%d/%d/%d", tot.share, tot.demand, tot.admitted), plans)...)
	}
}

// metricRows names each metric and formats it; the order is the output's.
var metricRows = []struct {
	name string
	cell func(Metrics) string
}{
	{"Window violations (aligned wall windows with admitted > C)", func(m Metrics) string { return strconv.Itoa(m.WindowViolations) }},
	{"Share violations (client admitted > its share in a share period)", func(m Metrics) string { return strconv.Itoa(m.ShareViolations) }},
	{"Worst window (admitted / C)", func(m Metrics) string { return num(m.WorstWindow, 2) }},
	{"Worst sliding cycle (most admitted in any interval of one cycle / C)", func(m Metrics) string { return num(m.WorstSliding, 2) }},
	{"Utilisation", func(m Metrics) string { return pct(m.Utilisation) }},
	{"Jain's index vs max-min", func(m Metrics) string { return num(m.Jain, 3) }},
	{"Light-client rejection", func(m Metrics) string { return pct(m.LightRejection) }},
	{"Gain from inflating demand", func(m Metrics) string { return signedPct(m.InflationGain) }},
	{"Stranded capacity", func(m Metrics) string { return pct(m.Stranded) }},
	{"Convergence after step (cycles)", convergenceCell},
	{"Attempts per new request", func(m Metrics) string { return num(m.Amplification, 2) }},
	{"Retries at Retry-After that succeed", func(m Metrics) string { return pct(m.RetryAfterOK) }},
	{"Plans (re-plans)", func(m Metrics) string { return fmt.Sprintf("%d (%d)", m.Plans, m.Replans) }},
}

func convergenceCell(m Metrics) string {
	switch {
	case m.StepCycle == 0:
		return "n/a"
	case m.Convergence < 0:
		return "never (" + pct(m.StepDistance) + " off)"
	}
	return strconv.Itoa(m.Convergence)
}

// WriteMetrics writes one column of metrics per policy.
func WriteMetrics(w io.Writer, policies []string, ms []Metrics) {
	mdRow(w, append([]string{"Metric"}, policies...)...)
	mdRule(w, len(policies)+1)
	for _, row := range metricRows {
		cells := []string{row.name}
		for _, m := range ms {
			cells = append(cells, row.cell(m))
		}
		mdRow(w, cells...)
	}
}

// summaryColumns are the metrics of the all-scenarios table, in short form.
var summaryColumns = []string{"Window viol.", "Share viol.", "Worst window", "Worst sliding", "Util.", "Jain", "Light rej.", "Inflation gain", "Stranded", "Converge", "Attempts/req"}

// WriteSummary writes the all-scenarios table: a row per scenario and
// policy. The Retry-After column is there only when some client honours
// the header (it would read n/a on every row otherwise).
func WriteSummary(w io.Writer, reps []scenarioReport) {
	retries := false
	for _, rep := range reps {
		for _, m := range rep.metrics {
			retries = retries || !math.IsNaN(m.RetryAfterOK)
		}
	}
	head := append([]string{"Scenario", "Policy"}, summaryColumns...)
	if retries {
		head = append(head, "Retry-After ok")
	}
	mdRow(w, head...)
	mdRule(w, len(head))
	for _, rep := range reps {
		for i, policy := range rep.policies {
			m := rep.metrics[i]
			cells := []string{rep.name, policy, strconv.Itoa(m.WindowViolations), strconv.Itoa(m.ShareViolations), num(m.WorstWindow, 2),
				num(m.WorstSliding, 2), pct(m.Utilisation), num(m.Jain, 3),
				pct(m.LightRejection), signedPct(m.InflationGain), pct(m.Stranded), convergenceCell(m), num(m.Amplification, 2)}
			if retries {
				cells = append(cells, pct(m.RetryAfterOK))
			}
			mdRow(w, cells...)
		}
	}
}

func pct(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return strconv.FormatFloat(100*x, 'f', 1, 64) + "%"
}

func signedPct(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf("%+.1f%%", 100*x)
}

func num(x float64, prec int) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}
