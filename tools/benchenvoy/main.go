// Command benchenvoy measures what a rate-limiting filter costs per request
// in a real Envoy (make bench-envoy). It owns the method, so that every
// figure it prints can be reproduced by one command on a two-core machine:
//
//   - Envoy runs at --concurrency 1, pinned with taskset to one CPU, and the
//     load generator runs as its own process pinned to another, so the two
//     never compete for a core and Envoy's CPU is the only thing measured.
//   - The ingress route answers with a direct_response, so the filter's cost
//     is not diluted by a proxied hop (-route proxy keeps the shipped
//     bootstrap's hop to its demo upstream, for the user's-eye view).
//   - Each variant is its own Envoy, started side by side on the shipped
//     bootstrap (envoy/envoy.yaml) with only the filter changed, and the
//     load visits them in interleaved rounds with a rotating order, so a
//     disturbance on a shared machine hits every variant alike. Figures are
//     medians over rounds; ratios are taken round by round (a variant
//     against the baseline measured moments before or after) and then the
//     median.
//   - Statuses are checked, not assumed: a variant whose responses are not
//     all the expected status fails the run (see variant.expect).
//
// The load generator is wrk, not fortio, although fortio is a Go module:
// fortio sends one fixed set of headers, and the benchmark needs the client
// id to rotate per request over 50 ids (clients.lua), or Borrowcycle would
// be measured with one client. wrk is also a small C event loop, so one
// thread on one core drives a single Envoy worker to saturation, which the
// "Envoy CPU" column shows (near 100% means Envoy, not wrk, was the limit).
// On a virtual machine the "steal" column is the share of the interval in
// which the hypervisor ran another tenant on Envoy's CPU: a few percent of
// it moves req/s and the tail latencies more than most filter changes do.
//
// Usage (make bench-envoy builds the modules and installs Envoy and wrk):
//
//	go run ./tools/benchenvoy -envoy build/envoy -wasm build/borrowcycle.wasm
//
// The table goes to stdout, progress to stderr.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

func main() {
	var o Options
	flag.StringVar(&o.Envoy, "envoy", os.Getenv("BORROWCYCLE_ENVOY"), "Envoy binary (default $BORROWCYCLE_ENVOY)")
	flag.StringVar(&o.Wasm, "wasm", "", "the plugin module (build/borrowcycle.wasm)")
	flag.StringVar(&o.Noop, "noop", "", "the no-op module (default noop.wasm next to -wasm)")
	flag.StringVar(&o.Wrk, "wrk", "wrk", "the wrk binary")
	flag.IntVar(&o.Rounds, "rounds", 5, "interleaved rounds; each measures every variant once")
	flag.DurationVar(&o.Duration, "duration", 5*time.Second, "measured load per variant per round (whole seconds)")
	flag.DurationVar(&o.Warmup, "warmup", 3*time.Second, "unmeasured load per variant before the first round (whole seconds, 0 for none)")
	flag.IntVar(&o.Connections, "connections", 16, "wrk connections, each with one request in flight")
	flag.IntVar(&o.Clients, "clients", 50, "distinct client ids, rotated per request")
	flag.StringVar(&o.Route, "route", RouteDirect, "ingress route: direct (direct_response) or proxy (the shipped hop to the demo upstream)")
	flag.StringVar(&o.Dir, "logs", "", "directory for Envoy configs and logs (default a temporary one)")
	only := flag.String("only", "", "comma-separated variants to measure besides the baselines local_ratelimit, noop and borrowcycle (default all)")
	flag.BoolVar(&o.Scale, "scale", false, "add the scale variants: 50, 10,000 and 100,000 known clients with 10 s windows, 50 and 10,000 with 1 s windows, and the flood with 1 s windows")
	flag.BoolVar(&o.Profile, "profile", false, "after the rounds, sample each Envoy with perf and split its CPU per request into Wasm guest, Envoy and kernel")
	flag.Parse()
	if *only != "" {
		o.Only = strings.Split(*only, ",")
	}
	o.Progress = os.Stderr

	res, err := Run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchenvoy:", err)
		os.Exit(1)
	}
	res.WriteTable(os.Stdout)
}
