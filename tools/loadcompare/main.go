// Command loadcompare measures what the Borrowcycle filter costs in a real
// Envoy: the same Envoy binary, the same bootstrap (envoy/envoy.yaml) and the
// same load, with
//
//	none            no rate-limiting filter
//	local_ratelimit Envoy's native local rate limit, with a bucket that admits everything
//	noop            (when build/noop.wasm exists) a Wasm filter that only reads the client header
//	borrowcycle     the plugin, with a capacity that admits everything
//
// It prints requests per second and p50/p99 latency of each, and the
// plugin's ratios against both baselines. Load stays on 127.0.0.1 and each
// measurement is bounded in time.
//
// All Envoys run side by side (an idle Envoy costs nothing) and the load
// visits them in short interleaved slices, in a rotating order: on a shared
// machine, whatever else runs then slows every configuration alike instead
// of whichever had the bad minute. Each figure is the median over slices.
// Usage (make bench-envoy):
//
//	BORROWCYCLE_ENVOY=build/envoy go run ./tools/loadcompare -wasm build/borrowcycle.wasm
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"fortio.org/fortio/fhttp"
	"fortio.org/fortio/periodic"
	"fortio.org/log"

	"github.com/borrowcycle/borrowcycle/internal/envoyrun"
)

type options struct {
	envoy       string
	wasm        string
	noop        string
	duration    time.Duration
	warmup      time.Duration
	connections int
	concurrency int
	logDir      string
	slice       time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.envoy, "envoy", os.Getenv("BORROWCYCLE_ENVOY"), "Envoy binary (default $BORROWCYCLE_ENVOY)")
	flag.StringVar(&o.wasm, "wasm", "", "the plugin module (build/borrowcycle.wasm)")
	flag.StringVar(&o.noop, "noop", "", "the noop module; default noop.wasm next to -wasm, skipped when absent")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "measured load per configuration, in slices")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured load before each measurement")
	flag.IntVar(&o.connections, "connections", 16, "client connections, each with one request in flight")
	flag.IntVar(&o.concurrency, "concurrency", 2, "Envoy worker threads (--concurrency)")
	flag.StringVar(&o.logDir, "logs", "", "directory for the Envoy configs and logs (default a temporary one)")
	flag.DurationVar(&o.slice, "slice", 500*time.Millisecond, "length of one interleaved load slice")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "loadcompare:", err)
		os.Exit(1)
	}
}

// variant is one Envoy configuration under the same load.
type variant struct {
	name  string
	setup func(*envoyrun.Bootstrap) error
}

// measurement is one variant's result.
type measurement struct {
	name     string
	qps      float64
	p50, p99 time.Duration
	requests int64
}

// The plugin configuration for the measurement: one client, and a capacity
// no 10 s cycle can use up, so that every request is admitted and the
// comparison is about the cost of deciding, not of rejecting.
const benchPluginConfig = `{"capacity": 1000000000000, "cycle": "10s"}`

func run(o options) error {
	if o.envoy == "" {
		return errors.New("no Envoy: set BORROWCYCLE_ENVOY or -envoy (make bench-envoy does)")
	}
	if o.wasm == "" {
		return errors.New("-wasm is required (make build writes build/borrowcycle.wasm)")
	}
	if _, err := os.Stat(o.wasm); err != nil {
		return fmt.Errorf("%v: run make build", err)
	}
	if o.noop == "" {
		o.noop = filepath.Join(filepath.Dir(o.wasm), "noop.wasm")
	}
	if o.logDir == "" {
		dir, err := os.MkdirTemp("", "loadcompare-")
		if err != nil {
			return err
		}
		o.logDir = dir
	}
	log.SetLogLevelQuiet(log.Warning) // fortio's per-run chatter

	variants := []variant{
		{"none", func(b *envoyrun.Bootstrap) error { return b.ReplaceWasmFilter(nil) }},
		{"local_ratelimit", func(b *envoyrun.Bootstrap) error { return b.ReplaceWasmFilter(localRateLimitFilter()) }},
	}
	if _, err := os.Stat(o.noop); err == nil {
		variants = append(variants, variant{"noop", wasmSetup(o.noop, "")})
	}
	variants = append(variants, variant{"borrowcycle", wasmSetup(o.wasm, benchPluginConfig)})

	printMachine(o)
	envoys, err := startAll(o, variants)
	defer func() {
		for _, e := range envoys {
			e.Stop()
		}
	}()
	if err != nil {
		return err
	}
	perVariant, err := interleave(o, variants, envoys)
	if err != nil {
		return err
	}
	results := make([]measurement, len(variants))
	for i, ms := range perVariant {
		results[i] = median(ms)
		fmt.Printf("  %-16s slices: %s\n", variants[i].name, sliceRates(ms))
	}
	printTable(results, perVariant)
	return nil
}

// startAll starts one Envoy per variant and warms each up. It returns the
// Envoys started so far even on error, for the caller to stop.
func startAll(o options, variants []variant) ([]*envoyrun.Envoy, error) {
	var envoys []*envoyrun.Envoy
	for _, v := range variants {
		e, err := startVariant(o, v)
		if err != nil {
			return envoys, fmt.Errorf("%s: %w", v.name, err)
		}
		envoys = append(envoys, e)
		if o.warmup > 0 {
			if _, err := load(e.URL, o.connections, o.warmup); err != nil {
				return envoys, fmt.Errorf("%s: warm-up: %w", v.name, err)
			}
		}
	}
	return envoys, nil
}

// interleave loads the Envoys slice by slice, rotating which goes first,
// and returns each variant's slices in time order.
func interleave(o options, variants []variant, envoys []*envoyrun.Envoy) ([][]measurement, error) {
	n := max(1, int(o.duration/o.slice))
	perVariant := make([][]measurement, len(variants))
	for s := 0; s < n; s++ {
		for k := range variants {
			i := (k + s) % len(variants)
			res, err := load(envoys[i].URL, o.connections, o.slice)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", variants[i].name, err)
			}
			m, err := summarize(variants[i].name, res)
			if err != nil {
				return nil, err
			}
			perVariant[i] = append(perVariant[i], m)
		}
	}
	for i, e := range envoys {
		if !e.Alive() {
			return nil, fmt.Errorf("%s: envoy exited during the load; log %s", variants[i].name, e.LogPath)
		}
	}
	return perVariant, nil
}

// sliceRates lists the requests per second of each slice, to show the noise.
func sliceRates(ms []measurement) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%.0f", m.qps)
	}
	return strings.Join(parts, " ")
}

// medianOf returns the median of vals (which it sorts).
func medianOf(vals []float64) float64 {
	sort.Float64s(vals)
	n := len(vals)
	if n%2 == 1 {
		return vals[n/2]
	}
	return (vals[n/2-1] + vals[n/2]) / 2
}

// median takes the median of each figure separately over the slices.
func median(ms []measurement) measurement {
	var qps, p50, p99 []float64
	var total int64
	for _, m := range ms {
		qps = append(qps, m.qps)
		p50 = append(p50, float64(m.p50))
		p99 = append(p99, float64(m.p99))
		total += m.requests
	}
	return measurement{
		name:     ms[0].name,
		qps:      medianOf(qps),
		p50:      time.Duration(medianOf(p50)),
		p99:      time.Duration(medianOf(p99)),
		requests: total,
	}
}

func wasmSetup(module, config string) func(*envoyrun.Bootstrap) error {
	return func(b *envoyrun.Bootstrap) error {
		if err := b.SetWasmFile(module); err != nil {
			return err
		}
		return b.SetPluginConfig(config)
	}
}

// localRateLimitFilter is Envoy's native local rate limit with a token
// bucket far larger than any run can drain: it does its per-request work
// (take a token) and never rejects.
func localRateLimitFilter() map[string]any {
	return map[string]any{
		"name": "envoy.filters.http.local_ratelimit",
		"typed_config": map[string]any{
			"@type":       "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
			"stat_prefix": "bench_local_ratelimit",
			"token_bucket": map[string]any{
				"max_tokens":      1000000000,
				"tokens_per_fill": 1000000000,
				"fill_interval":   "1s",
			},
			"filter_enabled": map[string]any{
				"runtime_key":   "bench_local_ratelimit_enabled",
				"default_value": map[string]any{"numerator": 100, "denominator": "HUNDRED"},
			},
			"filter_enforced": map[string]any{
				"runtime_key":   "bench_local_ratelimit_enforced",
				"default_value": map[string]any{"numerator": 100, "denominator": "HUNDRED"},
			},
		},
	}
}

// startVariant starts an Envoy on the shipped bootstrap changed for v.
func startVariant(o options, v variant) (*envoyrun.Envoy, error) {
	b, err := envoyrun.DefaultBootstrap()
	if err != nil {
		return nil, err
	}
	if err := v.setup(b); err != nil {
		return nil, err
	}
	return envoyrun.Start(context.Background(), envoyrun.Options{
		Envoy: o.envoy, Bootstrap: b, Concurrency: o.concurrency, Dir: o.logDir, Name: v.name,
	})
}

// load runs fortio at its maximum rate: connections goroutines, each with
// its own connection and one request in flight, for d.
func load(url string, connections int, d time.Duration) (*fhttp.HTTPRunnerResults, error) {
	ro := fhttp.HTTPRunnerOptions{
		RunnerOptions: periodic.RunnerOptions{
			QPS:         -1, // as fast as the responses come back
			Duration:    d,
			NumThreads:  connections,
			Percentiles: []float64{50, 99},
			Resolution:  0.00001, // 10 µs histogram buckets: loopback latencies are sub-millisecond
			Out:         io.Discard,
		},
		HTTPOptions: fhttp.HTTPOptions{URL: url + "/"},
	}
	if err := ro.AddAndValidateExtraHeader("x-client-id: loadcompare"); err != nil {
		return nil, err
	}
	return fhttp.RunHTTPTest(&ro)
}

// summarize turns fortio's results into a measurement, and refuses a run
// in which anything but 200 came back: a rejection or error costs
// differently from an admission and would skew the comparison.
func summarize(name string, res *fhttp.HTTPRunnerResults) (measurement, error) {
	var other []string
	for code, n := range res.RetCodes {
		if code != 200 {
			other = append(other, fmt.Sprintf("%d×%d", n, code))
		}
	}
	if len(other) > 0 {
		return measurement{}, fmt.Errorf("not every request was admitted: %s", strings.Join(other, ", "))
	}
	m := measurement{name: name, qps: res.ActualQPS, requests: res.DurationHistogram.Count}
	for _, p := range res.DurationHistogram.Percentiles {
		d := time.Duration(p.Value * float64(time.Second)).Round(time.Microsecond)
		switch p.Percentile {
		case 50:
			m.p50 = d
		case 99:
			m.p99 = d
		}
	}
	if m.requests == 0 || m.p50 == 0 {
		return measurement{}, errors.New("no requests completed")
	}
	return m, nil
}

// printTable prints every variant's medians and the plugin's ratios
// against each row. The ratios are paired: slice s of the plugin against
// slice s of the row, which ran moments apart, and then the median over s.
// That cancels the background load that drifts from slice to slice, which
// a ratio of medians would not.
func printTable(results []measurement, perVariant [][]measurement) {
	last := len(results) - 1
	plugin := perVariant[last]
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "config\treq/s\tp50\tp99\tborrowcycle/row req/s\tborrowcycle/row p50\tborrowcycle/row p99\t")
	for i, m := range results {
		rows := perVariant[i]
		ratio := func(f func(measurement) float64) float64 {
			r := make([]float64, 0, len(rows))
			for s := range rows {
				r = append(r, f(plugin[s])/f(rows[s]))
			}
			return medianOf(r)
		}
		fmt.Fprintf(w, "%s\t%.0f\t%s\t%s\t%.3f\t%.2f\t%.2f\t\n", m.name, m.qps, m.p50, m.p99,
			ratio(func(m measurement) float64 { return m.qps }),
			ratio(func(m measurement) float64 { return m.p50.Seconds() }),
			ratio(func(m measurement) float64 { return m.p99.Seconds() }))
	}
	w.Flush()
	fmt.Println("\nfigures: medians over the slices. ratios: median over slices of borrowcycle/row in the same slice")
	fmt.Println("(req/s below 1 and latency above 1 are the plugin's cost)")
}

// printMachine says what the figures were measured on.
func printMachine(o options) {
	cpu := "unknown CPU"
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	load := "?"
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(raw))[:3], " ")
	}
	version, _ := exec.Command(o.envoy, "--version").Output()
	fmt.Printf("machine: %s, %d CPUs, %s/%s, load average %s\n", cpu, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, load)
	fmt.Printf("envoy:   %s", strings.TrimSpace(string(version)))
	fmt.Printf("\nload:    fortio (library), %d connections at max rate, %s per configuration in %s slices (interleaved) after %s warm-up,\n         Envoy --concurrency %d, client and Envoys share the machine\n",
		o.connections, o.duration, o.slice, o.warmup, o.concurrency)
	fmt.Printf("plugin:  %s (one client id)\n\n", benchPluginConfig)
}
