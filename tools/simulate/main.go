// Command simulate replays traffic scenarios through the Borrowcycle engine
// on a virtual clock and reports how the sharing policy behaved.
//
// It runs the code the plugin runs: engine.Limiters (one per simulated Envoy
// worker) over one engine.MemStore. Each cycle's requests are spread over
// the cycle at deterministic times, every worker ticks at each window
// boundary so a new window's plan is made on time, and random arrival
// processes draw from seeded generators, so a run is reproducible bit for
// bit.
//
// Usage:
//
//	go run . -scenario FILE|NAME [-policy seed|static|fair|compare] [-burst F] [-out DIR] [-table auto|wide|long|none]
//	go run . -all [-out DIR]
//	go run . -list
//
// It prints the per-cycle table (share, demand and admitted per client),
// then the run's metrics; with -out it also writes SVG and PNG charts.
// README.md in this folder documents flags, scenario format and metrics.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

type options struct {
	scenario   string
	all        bool
	list       bool
	policy     string
	out        string
	table      string
	seed       uint64
	burst      float64
	retryAfter bool
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "simulate:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.StringVar(&o.scenario, "scenario", "", "scenario `file` (YAML or JSON), or a shipped scenario's name")
	fs.BoolVar(&o.all, "all", false, "run every shipped scenario and print a summary table")
	fs.BoolVar(&o.list, "list", false, "list the shipped scenarios")
	fs.StringVar(&o.policy, "policy", "", "seed, static, fair, or compare (all three, metrics side by side); default seed, or compare with -all")
	fs.StringVar(&o.out, "out", "", "write SVG and PNG charts into `dir`")
	fs.StringVar(&o.table, "table", "auto", "per-cycle table: wide (the worked example's shape), long (a row per cycle), none, or auto (wide up to 6 cycles; none with -all)")
	fs.Uint64Var(&o.seed, "seed", 0, "override the scenario's random seed (0 keeps it)")
	fs.Float64Var(&o.burst, "burst", -1, "pace every scenario with this burst fraction in [0, 1] (negative keeps the scenario's)")
	fs.BoolVar(&o.retryAfter, "retry-after", false, "every client (adversaries too) retries each 429 when its Retry-After says (whole seconds, as the header), up to 5 times, one request at a time, instead of its own retry spec")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.policy == "" {
		o.policy = "seed"
		if o.all {
			o.policy = "compare"
		}
	}
	switch {
	case !o.list && o.all == (o.scenario != ""):
		return o, errors.New("give exactly one of -scenario and -all (or -list)")
	case !strings.Contains(" seed static fair compare ", " "+o.policy+" "):
		return o, fmt.Errorf("-policy: want seed, static, fair or compare, got %q", o.policy)
	case !strings.Contains(" auto wide long none ", " "+o.table+" "):
		return o, fmt.Errorf("-table: want auto, wide, long or none, got %q", o.table)
	}
	return o, nil
}

func run(args []string, w io.Writer) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	scenarios, err := selectScenarios(o)
	if err != nil {
		return err
	}
	if o.list {
		for _, sc := range scenarios {
			fmt.Fprintf(w, "%-16s %s\n", sc.Name, sc.Description)
		}
		return nil
	}
	policies := []string{o.policy}
	if o.policy == "compare" {
		policies = []string{"seed", "static", "fair"}
	}
	var summary []scenarioReport
	for _, sc := range scenarios {
		if o.seed != 0 {
			sc.Seed = o.seed
		}
		if o.burst >= 0 {
			b := o.burst
			sc.Burst = &b
		}
		if o.retryAfter {
			sc.HonourRetryAfter()
		}
		rep, err := runScenario(w, sc, policies, o)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.Name, err)
		}
		summary = append(summary, rep)
	}
	if len(scenarios) > 1 {
		fmt.Fprintln(w, "## Summary")
		fmt.Fprintln(w)
		WriteSummary(w, summary)
	}
	return nil
}

func selectScenarios(o options) ([]*Scenario, error) {
	if o.all || o.list {
		return ShippedScenarios()
	}
	sc, err := LoadScenario(o.scenario)
	if err != nil {
		return nil, err
	}
	return []*Scenario{sc}, nil
}

type scenarioReport struct {
	name     string
	policies []string
	metrics  []Metrics
}

// runScenario runs sc under each policy (plus the inflated-demand run the
// gain metric needs), printing tables, metrics and chart paths.
func runScenario(w io.Writer, sc *Scenario, policies []string, o options) (scenarioReport, error) {
	rep := scenarioReport{name: sc.Name, policies: policies}
	fmt.Fprintf(w, "## %s\n\n%s\n\n", sc.Name, strings.TrimSpace(sc.Description))
	for _, name := range policies {
		res, m, err := Evaluate(sc, name)
		if err != nil {
			return rep, err
		}
		rep.metrics = append(rep.metrics, m)
		writeTable(w, res, o)
		if o.out != "" {
			paths, err := WriteCharts(o.out, res)
			if err != nil {
				return rep, err
			}
			fmt.Fprintf(w, "Charts (%s): %s\n\n", name, strings.Join(paths, ", "))
		}
	}
	WriteMetrics(w, policies, rep.metrics)
	fmt.Fprintln(w)
	return rep, nil
}

// Evaluate runs sc under the named policy, and again with the inflate
// client's demand multiplied, and computes the metrics.
func Evaluate(sc *Scenario, policyName string) (*Result, Metrics, error) {
	policy, err := PolicyByName(policyName)
	if err != nil {
		return nil, Metrics{}, err
	}
	res, err := Run(sc, policy, "", 1)
	if err != nil {
		return nil, Metrics{}, err
	}
	inflated, err := Run(sc, policy, sc.Metrics.Inflate, sc.Metrics.Factor)
	if err != nil {
		return nil, Metrics{}, err
	}
	return res, Compute(res, inflated), nil
}

func writeTable(w io.Writer, res *Result, o options) {
	mode := o.table
	if mode == "auto" {
		switch {
		case o.all:
			mode = "none"
		case len(res.Demand) <= 6:
			mode = "wide"
		default:
			mode = "long"
		}
	}
	if mode == "none" {
		return
	}
	fmt.Fprintf(w, "### %s, policy %s\n\n", res.Scenario.Name, res.Policy)
	if mode == "wide" {
		WriteWideTable(w, res)
	} else {
		WriteLongTable(w, res)
	}
	fmt.Fprintln(w)
}
