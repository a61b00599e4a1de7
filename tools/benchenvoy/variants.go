package main

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/borrowcycle/borrowcycle/internal/envoyrun"
)

// Variant names, in table order. The first four are the baselines a filter
// is compared with; the ratios in the table are against noop and
// local_ratelimit.
const (
	VariantNone    = "none"
	VariantLocalRL = "local_ratelimit"
	VariantNoop    = "noop"
	// The noop making the host calls of Borrowcycle's admitted and
	// rejected requests with fixed values (tools/noop's mimic modes): what
	// those calls cost in Envoy, without any of the filter's logic.
	VariantNoopCalls       = "noop-calls"
	VariantNoopRejectCalls = "noop-calls-reject"
	VariantDefaults        = "borrowcycle"
	VariantNoHeaders       = "borrowcycle-noheaders"
	VariantLean            = "borrowcycle-lean"
	VariantReject          = "borrowcycle-reject"
	VariantFlood           = "borrowcycle-flood"
)

// The scale variants (-scale): the defaults with every id a known client,
// as the number of clients and the cycle grow, and the flood with 1 s
// windows. Each load builds its ids per request (clients.lua's --flood
// mode, ids in order, so each repeats once every n requests), and each row
// is divided by the 50-id row of its cycle in the same round (scaleBase).
const (
	VariantScale50      = "scale-50"
	VariantScale10k     = "scale-10k"
	VariantScale100k    = "scale-100k"
	VariantScale50s1    = "scale-50-1s"
	VariantScale10ks1   = "scale-10k-1s"
	VariantScaleFlood1s = "scale-flood-1s"
)

// Scale configurations: capacity out of reach, max_clients the most
// allowed (100,000), so every id is counted once it has asked twice
// (newcomers are proven by asking again), and idle_cycles high, so that
// no client is forgotten while other variants run between its warm-up and
// its rounds (minutes, with 3 idle windows of 1 s as the default); the
// flood's table holds 10,000 against 100,000 ids, with a capacity of
// 100,000 per second.
const (
	scale10sConfig     = `{"capacity": 1000000000000, "cycle": "10s", "max_clients": 100000, "idle_cycles": 10000}`
	scale1sConfig      = `{"capacity": 1000000000000, "cycle": "1s", "max_clients": 100000, "idle_cycles": 10000}`
	scaleFlood1sConfig = `{"capacity": 100000, "cycle": "1s", "max_clients": 10000}`
)

// Plugin configurations (docs/contract.md). The admitting ones leave every
// option at its default but the capacity, which no cycle can use up, so all
// 50 clients are admitted throughout.
const (
	admitConfig     = `{"capacity": 1000000000000, "cycle": "10s"}`
	noHeadersConfig = `{"capacity": 1000000000000, "cycle": "10s", "headers_on_allowed": false}`
	// lean is the decision alone: no headers and no access-log record, so
	// that noheaders − lean is the record's cost and lean − noop the
	// decision's (the clock read included).
	leanConfig = `{"capacity": 1000000000000, "cycle": "10s", "headers_on_allowed": false, "access_log": false}`
	// A share of about 4 per client per hour: after the settle probes have
	// spent it, every request is an over_limit 429 until the run ends.
	// min_cycle is cut from its default (6 min) so that the 50 newcomers are
	// registered by re-plans within seconds. The shares leave room for what
	// the first clients spent before the others were registered: with
	// exactly one unit per client, a newcomer whose re-plan found less left
	// than everyone wanted would get nothing, and wait (pending) for the
	// next window.
	rejectConfig = `{"capacity": 200, "cycle": "1h", "min_cycle": "1s"}`
	// The flood: a table of 10,000 clients against a load of floodIDs
	// distinct ids (clients.lua's flood mode), so most ids have not been
	// seen lately, the table fills, and the answers mix 200s with pending
	// and table_full 429s. Every other option is at its default (min_cycle
	// too, so newcomers wait long for a re-plan). The capacity is as
	// unreachable as in admitConfig.
	floodConfig = `{"capacity": 1000000000000, "cycle": "10s", "max_clients": 10000}`
)

// The noop's mimic modes (tools/noop).
const (
	noopCallsConfig       = `{"mimic": "allowed"}`
	noopRejectCallsConfig = `{"mimic": "rejected"}`
)

// floodIDs is the number of distinct client ids the flood variant's load
// draws from, ten times its max_clients.
const floodIDs = 100000

// localRLDescriptorTokens is the per-client bucket of the local_ratelimit
// variant. It differs from the filter-wide bucket (localRLDefaultTokens) so
// that the x-ratelimit-limit header of a probe proves the per-client
// descriptor matched; both are far beyond what a run can drain.
const (
	localRLDescriptorTokens = 500000000
	localRLDefaultTokens    = 1000000000
)

// variant is one Envoy configuration under the same load.
type variant struct {
	name string
	// flood, when > 0, replaces the load's 50 rotating client ids with
	// this many ids built per request (clients.lua's flood mode).
	flood int
	// known: the flood's ids are to be counted clients, so the warm-up
	// sends each one twice in a row (clients.lua's twice), which proves a
	// newcomer whatever the request rate: otherwise an id that asks less
	// than twice a window (10,000 ids at 1 s windows on a slow machine)
	// stays a newcomer, and the row measures registration.
	known bool
	// withHonest: the row also measures an honest client beside the load
	// (honest.go).
	withHonest bool
	config     string // the plugin configuration, for the table's legend
	// scaleBase names the variant a scale variant is divided by, in the
	// same round (×base in the table).
	scaleBase string
	// filter edits the shipped bootstrap's Wasm filter into this variant's.
	filter func(*envoyrun.Bootstrap) error
	expect expectation
}

// expectation is what every response of a variant must be. It is checked
// three ways: every client id answers so before each measurement (settle),
// Envoy's response-class counters over the measured interval contain
// nothing else, and wrk's non-2xx/3xx count agrees.
type expectation struct {
	status int
	// probe checks the headers that show the variant is configured as
	// named (e.g. the reject variant's reason is over_limit, not pending).
	probe func(http.Header) error
	// mixed, when set, replaces status and probe: the variant answers with
	// any of these statuses (in the class counters, any of their classes),
	// and a probe's answer is checked by mixedProbe.
	mixed      []int
	mixedProbe func(status int, h http.Header) error
}

func variants(o Options) []variant {
	vs := []variant{
		{name: VariantNone, filter: func(b *envoyrun.Bootstrap) error { return b.ReplaceWasmFilter(nil) },
			expect: expectation{status: 200, probe: headerAbsent("x-ratelimit-limit")}},
		{name: VariantLocalRL, filter: func(b *envoyrun.Bootstrap) error {
			return b.ReplaceWasmFilter(localRateLimitFilter(o.clientIDs()))
		}, expect: expectation{status: 200, probe: headerIs("x-ratelimit-limit", strconv.Itoa(localRLDescriptorTokens))}},
		{name: VariantNoop, filter: wasmFilter(o.Noop, ""),
			expect: expectation{status: 200, probe: headerAbsent("x-ratelimit-limit")}},
		{name: VariantNoopCalls, config: noopCallsConfig, filter: wasmFilter(o.Noop, noopCallsConfig),
			expect: expectation{status: 200, probe: headerIs("x-ratelimit-limit", "20000000000")}},
		{name: VariantNoopRejectCalls, config: noopRejectCallsConfig, filter: wasmFilter(o.Noop, noopRejectCallsConfig),
			expect: expectation{status: 429, probe: headerIs("x-borrowcycle-reason", "over_limit")}},
		{name: VariantDefaults, config: admitConfig, filter: wasmFilter(o.Wasm, admitConfig),
			expect: expectation{status: 200, probe: headerPresent("x-ratelimit-limit")}},
		{name: VariantNoHeaders, config: noHeadersConfig, filter: wasmFilter(o.Wasm, noHeadersConfig),
			expect: expectation{status: 200, probe: headerAbsent("x-ratelimit-limit")}},
		{name: VariantLean, config: leanConfig, filter: wasmFilter(o.Wasm, leanConfig),
			expect: expectation{status: 200, probe: headerAbsent("x-ratelimit-limit")}},
		{name: VariantReject, config: rejectConfig, filter: wasmFilter(o.Wasm, rejectConfig),
			expect: expectation{status: 429, probe: headerIs("x-borrowcycle-reason", "over_limit")}},
		{name: VariantFlood, config: floodConfig, filter: wasmFilter(o.Wasm, floodConfig), flood: floodIDs,
			expect: expectation{mixed: []int{200, 429}, mixedProbe: floodAnswer}},
	}
	if !o.Scale {
		return vs
	}
	scale := func(name, config string, ids int, base string, known bool) variant {
		return variant{name: name, config: config, filter: wasmFilter(o.Wasm, config), flood: ids, scaleBase: base,
			known: known, expect: expectation{mixed: []int{200, 429}, mixedProbe: floodAnswer}}
	}
	flood := scale(VariantScaleFlood1s, scaleFlood1sConfig, floodIDs, VariantScale50s1, false)
	flood.withHonest = true
	return append(vs,
		scale(VariantScale50, scale10sConfig, 50, VariantScale50, true),
		scale(VariantScale10k, scale10sConfig, 10000, VariantScale50, true),
		scale(VariantScale100k, scale10sConfig, 100000, VariantScale50, true),
		scale(VariantScale50s1, scale1sConfig, 50, VariantScale50s1, true),
		scale(VariantScale10ks1, scale1sConfig, 10000, VariantScale50s1, true),
		flood,
	)
}

// baselineVariants are the variants every table divides by, so -only
// always keeps them.
var baselineVariants = []string{VariantLocalRL, VariantNoop, VariantDefaults}

// selected keeps the variants named in only, the baselines, and the base
// of each scale variant kept, in table order; an empty only keeps them all.
func selected(vs []variant, only []string) []variant {
	if len(only) == 0 {
		return vs
	}
	keep := slices.Clone(only)
	for _, v := range vs {
		if slices.Contains(only, v.name) && v.scaleBase != "" {
			keep = append(keep, v.scaleBase)
		}
	}
	return slices.DeleteFunc(vs, func(v variant) bool {
		return !slices.Contains(keep, v.name) && !slices.Contains(baselineVariants, v.name)
	})
}

// unknownVariants lists the names in only that are no variant.
func unknownVariants(only []string) []string {
	var bad []string
	for _, name := range only {
		if !slices.ContainsFunc(variants(Options{Scale: true}), func(v variant) bool { return v.name == name }) {
			bad = append(bad, name)
		}
	}
	return bad
}

func wasmFilter(module, config string) func(*envoyrun.Bootstrap) error {
	return func(b *envoyrun.Bootstrap) error {
		if err := b.SetWasmFile(module); err != nil {
			return err
		}
		return b.SetPluginConfig(config)
	}
}

// localRateLimitFilter is Envoy's native local rate limit set up the way a
// user would for per-client limits: a descriptor per client id, taken from
// the same header, and the draft-03 x-ratelimit headers on every response.
// The descriptors are generated by the filter's own rate_limits (a
// direct_response route has no route-level rate_limits).
func localRateLimitFilter(clients []string) map[string]any {
	bucket := func(tokens int) map[string]any {
		return map[string]any{"max_tokens": tokens, "tokens_per_fill": tokens, "fill_interval": "1s"}
	}
	descriptors := make([]any, len(clients))
	for i, c := range clients {
		descriptors[i] = map[string]any{
			"entries":      []any{map[string]any{"key": "client_id", "value": c}},
			"token_bucket": bucket(localRLDescriptorTokens),
		}
	}
	all := map[string]any{"numerator": 100, "denominator": "HUNDRED"}
	return map[string]any{
		"name": "envoy.filters.http.local_ratelimit",
		"typed_config": map[string]any{
			"@type":                      "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
			"stat_prefix":                "bench_local_ratelimit",
			"token_bucket":               bucket(localRLDefaultTokens),
			"filter_enabled":             map[string]any{"default_value": all},
			"filter_enforced":            map[string]any{"default_value": all},
			"enable_x_ratelimit_headers": "DRAFT_VERSION_03",
			"rate_limits": []any{map[string]any{"actions": []any{map[string]any{
				"request_headers": map[string]any{"header_name": clientHeader, "descriptor_key": "client_id"},
			}}}},
			"descriptors": descriptors,
		},
	}
}

func headerAbsent(name string) func(http.Header) error {
	return func(h http.Header) error {
		if v := h.Get(name); v != "" {
			return fmt.Errorf("unexpected %s: %q", name, v)
		}
		return nil
	}
}

func headerPresent(name string) func(http.Header) error {
	return func(h http.Header) error {
		if h.Get(name) == "" {
			return fmt.Errorf("no %s header", name)
		}
		return nil
	}
}

func headerIs(name, want string) func(http.Header) error {
	return func(h http.Header) error {
		if got := h.Get(name); got != want {
			return fmt.Errorf("%s: %q, want %q", name, got, want)
		}
		return nil
	}
}

// floodAnswer checks one answer of the flood variant: an admission with
// the rate-limit headers, or a Borrowcycle rejection for one of the
// reasons a flood of newcomers can meet. A 429 without the reason header
// (another filter's, or Envoy's) or with another reason fails it.
func floodAnswer(status int, h http.Header) error {
	switch status {
	case http.StatusOK:
		return headerPresent("x-ratelimit-limit")(h)
	case http.StatusTooManyRequests:
		switch r := h.Get("x-borrowcycle-reason"); r {
		case "pending", "table_full", "over_limit":
			return nil
		default:
			return fmt.Errorf("429 with x-borrowcycle-reason %q, want pending, table_full or over_limit", r)
		}
	}
	return fmt.Errorf("status %d, want 200 or 429", status)
}
