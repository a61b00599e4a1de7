package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Row is one variant's figures: medians over rounds, and ratios and
// differences taken round by round against a baseline measured in the same
// round, then the median. Pairing cancels the drift of a shared machine's
// background load, which a ratio of two medians would keep.
type Row struct {
	Name          string
	QPS           float64
	QPSvsNoop     float64
	QPSvsLocalRL  float64
	QPSvsDefaults float64 // against the borrowcycle variant (known clients)
	CPUvsDefaults float64 // CPU per request against the borrowcycle variant's
	CPUPerReq     time.Duration
	CPUOverNoop   time.Duration // CPU per request minus the no-op filter's
	P50, P99      time.Duration
	P999          time.Duration
	P99vsNoop     float64
	// QPSvsBase and P999vsBase divide a scale variant by its scaleBase in
	// the same round (NaN for the others).
	QPSvsBase, P999vsBase float64
	EnvoyCPUShare         float64 // fraction of one CPU Envoy used while loaded
	WrkCPUShare           float64 // fraction of one CPU wrk used
	Steal                 float64 // fraction of the interval the hypervisor took Envoy's CPU (steal time)
	Responses             uint64  // summed over rounds
	Status                int     // the status every response had (0 for a mixed variant)
	Classes               string  // the status classes allowed, e.g. "2xx" or "2xx+4xx"
	Rejected              uint64  // 4xx responses, summed over rounds
	// HonestKept is the share of the honest client's requests admitted
	// over every round (NaN for a variant without one).
	HonestKept float64
}

// Rows computes the table.
func (r *Results) Rows() []Row {
	idx := func(name string) int {
		return slices.IndexFunc(r.Variants, func(v variant) bool { return v.name == name })
	}
	noop, lrl := r.Samples[idx(VariantNoop)], r.Samples[idx(VariantLocalRL)]
	known := r.Samples[idx(VariantDefaults)]
	rows := make([]Row, len(r.Variants))
	for i, v := range r.Variants {
		ss := r.Samples[i]
		var base []sample
		if b := idx(v.scaleBase); v.scaleBase != "" && b >= 0 {
			base = r.Samples[b]
		}
		of := func(f func(sample) float64) float64 { return median(ss, f) }
		paired := func(base []sample, f func(a, b sample) float64) float64 {
			vals := make([]float64, len(ss))
			for k := range ss {
				vals[k] = f(ss[k], base[k])
			}
			return medianOf(vals)
		}
		var responses, rejected, honestSent, honestOK uint64
		for _, s := range ss {
			responses += s.statuses.answered()
			rejected += s.statuses.c4
			honestSent, honestOK = honestSent+s.honestSent, honestOK+s.honestOK
		}
		rows[i] = Row{
			Name:          v.name,
			QPS:           of(func(s sample) float64 { return s.qps }),
			QPSvsNoop:     paired(noop, func(a, b sample) float64 { return a.qps / b.qps }),
			QPSvsLocalRL:  paired(lrl, func(a, b sample) float64 { return a.qps / b.qps }),
			QPSvsDefaults: paired(known, func(a, b sample) float64 { return a.qps / b.qps }),
			CPUvsDefaults: paired(known, func(a, b sample) float64 { return float64(a.cpuPerReq) / float64(b.cpuPerReq) }),
			CPUPerReq:     time.Duration(of(func(s sample) float64 { return float64(s.cpuPerReq) })),
			CPUOverNoop:   time.Duration(paired(noop, func(a, b sample) float64 { return float64(a.cpuPerReq - b.cpuPerReq) })),
			P50:           time.Duration(of(func(s sample) float64 { return float64(s.p50) })),
			P99:           time.Duration(of(func(s sample) float64 { return float64(s.p99) })),
			P999:          time.Duration(of(func(s sample) float64 { return float64(s.p999) })),
			P99vsNoop:     paired(noop, func(a, b sample) float64 { return float64(a.p99) / float64(b.p99) }),
			QPSvsBase:     math.NaN(),
			P999vsBase:    math.NaN(),
			EnvoyCPUShare: of(func(s sample) float64 { return s.cpuShare }),
			WrkCPUShare:   of(func(s sample) float64 { return s.wrkShare }),
			Steal:         of(func(s sample) float64 { return s.steal }),
			Responses:     responses,
			Status:        v.expect.status,
			Classes:       v.expect.classes(),
			Rejected:      rejected,
			HonestKept:    math.NaN(),
		}
		if v.withHonest && honestSent > 0 {
			rows[i].HonestKept = float64(honestOK) / float64(honestSent)
		}
		if base != nil {
			rows[i].QPSvsBase = paired(base, func(a, b sample) float64 { return a.qps / b.qps })
			rows[i].P999vsBase = paired(base, func(a, b sample) float64 { return float64(a.p999) / float64(b.p999) })
		}
	}
	return rows
}

func median(ss []sample, f func(sample) float64) float64 {
	vals := make([]float64, len(ss))
	for i, s := range ss {
		vals[i] = f(s)
	}
	return medianOf(vals)
}

// medianOf returns the median of vals (which it sorts).
func medianOf(vals []float64) float64 {
	slices.Sort(vals)
	n := len(vals)
	if n%2 == 1 {
		return vals[n/2]
	}
	return (vals[n/2-1] + vals[n/2]) / 2
}

// micros formats d in microseconds with the given decimals.
func micros(d time.Duration, decimals int) string {
	return fmt.Sprintf("%.*f", decimals, float64(d)/float64(time.Microsecond))
}

// WriteTable prints the setup, the table and how to read it.
func (r *Results) WriteTable(w io.Writer) {
	o, pl := r.Options, r.Placement
	pin := fmt.Sprintf("Envoy pinned to CPU %d, wrk to CPU %d", pl.envoyCPU, pl.loadCPU)
	if pl.shared {
		pin = "ONE CPU: Envoy and wrk share it, so req/s and latency include wrk's load (CPU/req does not)"
	}
	fmt.Fprintf(w, "machine: %s\n", machine())
	fmt.Fprintf(w, "envoy:   %s, --concurrency 1, %s route\n", r.EnvoyVer, o.Route)
	fmt.Fprintf(w, "load:    wrk, 1 thread, %d connections, %d client ids rotated per request; %s\n", o.Connections, o.Clients, pin)
	fmt.Fprintf(w, "rounds:  %d interleaved × %s per variant, after %s warm-up each; figures are medians over rounds\n\n", o.Rounds, o.Duration, o.Warmup)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\treq/s\t×noop\t×local_rl\t×borrowcycle\tCPU µs/req\tΔµs vs noop\tp50 µs\tp99 µs\tp99.9 µs\tp99 ×noop\tEnvoy CPU\tsteal\twrk CPU\tresponses\t")
	rows := r.Rows()
	lowest, stolen := 1.0, 0.0
	for _, row := range rows {
		lowest, stolen = min(lowest, row.EnvoyCPUShare), max(stolen, row.Steal)
		fmt.Fprintf(tw, "%s\t%.0f\t%.3f\t%.3f\t%.3f\t%s\t%+.2f\t%s\t%s\t%s\t%.2f\t%.0f%%\t%.1f%%\t%.0f%%\t%d × %s\t\n",
			row.Name, row.QPS, row.QPSvsNoop, row.QPSvsLocalRL, row.QPSvsDefaults, micros(row.CPUPerReq, 2),
			float64(row.CPUOverNoop)/float64(time.Microsecond), micros(row.P50, 0), micros(row.P99, 0), micros(row.P999, 0),
			row.P99vsNoop, 100*row.EnvoyCPUShare, 100*row.Steal, 100*row.WrkCPUShare, row.Responses, row.Classes)
	}
	tw.Flush()
	r.writeScale(w, rows)

	fmt.Fprintln(w, "\nreq/s, p50, p99, p99.9: wrk (closed loop, at saturation, so p50 is mostly connections ÷ req/s).")
	fmt.Fprintln(w, "CPU µs/req: Envoy's utime+stime (/proc/<pid>/stat, all threads) over the measured interval ÷ responses it sent.")
	fmt.Fprintln(w, "×noop, ×local_rl, ×borrowcycle, Δµs, p99 ×noop: per round against the baseline in the same round, median over rounds.")
	fmt.Fprintln(w, "Envoy CPU, wrk CPU: share of one CPU each used while loaded. Envoy well below 100% means something else was")
	fmt.Fprintln(w, "  the limit (wrk, if it is near 100%; else a busy machine), and then CPU µs/req is inflated too: an Envoy")
	fmt.Fprintln(w, "  that is not saturated handles fewer requests per wake-up.")
	fmt.Fprintln(w, "steal: share of the interval in which the hypervisor ran something else on Envoy's CPU (/proc/stat): lost to")
	fmt.Fprintln(w, "  Envoy, and to its req/s, without showing in its CPU time.")
	fmt.Fprintln(w, "responses: every response had that class, by Envoy's counters and by wrk's; anything else fails the run.")
	for _, row := range rows {
		if row.Status == 0 {
			fmt.Fprintf(w, "%s: %.1f%% of responses were 429; req/s %.3f× and CPU µs/req %.3f× the borrowcycle variant's (known clients).\n",
				row.Name, 100*float64(row.Rejected)/float64(row.Responses), row.QPSvsDefaults, row.CPUvsDefaults)
			if st := r.PluginStats[row.Name]; st != "" {
				fmt.Fprintf(w, "  its plugin stats over the whole run: %s\n", st)
			}
		}
	}
	var cfgs []string
	for _, v := range r.Variants {
		if v.config != "" {
			cfgs = append(cfgs, fmt.Sprintf("  %-22s %s", v.name, v.config))
		}
	}
	fmt.Fprintf(w, "plugin configurations:\n%s\n", strings.Join(cfgs, "\n"))
	fmt.Fprintf(w, "%s: wrk builds each request's id from %d ids (%s1 ... %s%d, in order from a random start);\n"+
		"  the %d client ids are only probed between rounds.\n", VariantFlood, floodIDs, floodPrefix, floodPrefix, floodIDs, o.Clients)
	fmt.Fprintf(w, "local_ratelimit: a descriptor per client id (from %s), x-ratelimit headers DRAFT_VERSION_03, never exhausted.\n", clientHeader)
	r.writeProfile(w)
	if lowest < saturated {
		fmt.Fprintf(w, "\nWARNING: Envoy used as little as %.0f%% of its CPU in some variant: it was not saturated, so these figures\n"+
			"describe this machine's load more than the filters. Rerun on a quiet machine.\n", 100*lowest)
	}
	if stolen > stealNoted {
		fmt.Fprintf(w, "\nWARNING: the hypervisor took up to %.1f%% of Envoy's CPU in some variant (steal): req/s and latency\n"+
			"describe the host's other tenants as much as the filters. Rerun on a dedicated machine.\n", 100*stolen)
	}
}

// saturated is the Envoy CPU share below which the table warns that Envoy
// was not the bottleneck.
const saturated = 0.9

// stealNoted is the steal share of Envoy's CPU above which the table warns
// that the host's other tenants took part of it.
const stealNoted = 0.02

// writeScale prints the scale variants against the 50-client row of their
// cycle, round by round (nothing without -scale).
func (r *Results) writeScale(w io.Writer, rows []Row) {
	var scale []Row
	for i, row := range rows {
		if r.Variants[i].scaleBase != "" {
			scale = append(scale, row)
		}
	}
	if len(scale) == 0 {
		return
	}
	fmt.Fprintln(w, "\nscale: each row against the 50-client row of its cycle (scale-50, scale-50-1s) in the same round, median over rounds")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\treq/s\t× 50 clients\tp99 µs\tp99.9 µs\tp99.9 × 50 clients\t429s\thonest kept\t")
	for _, row := range scale {
		honest := "-"
		if !math.IsNaN(row.HonestKept) {
			honest = fmt.Sprintf("%.1f%%", 100*row.HonestKept)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.3f\t%s\t%s\t%.2f\t%.1f%%\t%s\t\n", row.Name, row.QPS, row.QPSvsBase,
			micros(row.P99, 0), micros(row.P999, 0), row.P999vsBase, 100*float64(row.Rejected)/float64(max(row.Responses, 1)), honest)
	}
	tw.Flush()
}
