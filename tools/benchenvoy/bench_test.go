package main

import (
	"bytes"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/internal/envoyrun"
)

// TestSmoke runs every variant for one round of one second against real
// Envoy and wrk, and checks that the run passes its own status checks and
// that the table is complete. It asserts no timing. It needs Envoy
// (BORROWCYCLE_ENVOY or build/envoy), the modules (BORROWCYCLE_WASM or
// build/borrowcycle.wasm, and noop.wasm beside it) and wrk on PATH; without
// them it skips, or fails under BORROWCYCLE_REQUIRE_ENVOY=1 (CI).
func TestSmoke(t *testing.T) {
	o := smokeOptions(t)
	res, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res.WriteTable(&out)
	t.Logf("\n%s", out.String())

	rows := res.Rows()
	if len(rows) != len(variants(o)) {
		t.Fatalf("%d rows, want one per variant (%d)", len(rows), len(variants(o)))
	}
	for _, row := range rows {
		if row.QPS <= 0 || row.CPUPerReq <= 0 || row.P50 <= 0 || row.P99 < row.P50 || row.Responses == 0 {
			t.Errorf("%s: incomplete row %+v", row.Name, row)
		}
		if !strings.Contains(out.String(), " "+row.Name+" ") {
			t.Errorf("table lacks %s", row.Name)
		}
	}
	want := map[string]string{
		VariantNone: "2xx", VariantLocalRL: "2xx", VariantNoop: "2xx", VariantNoopCalls: "2xx", VariantNoopRejectCalls: "4xx",
		VariantDefaults: "2xx", VariantNoHeaders: "2xx", VariantLean: "2xx", VariantReject: "4xx",
		VariantFlood: "2xx+4xx",
	}
	for _, row := range rows {
		if w, ok := want[row.Name]; !ok || row.Classes != w {
			t.Errorf("%s: classes %s, want %s", row.Name, row.Classes, w)
		}
		delete(want, row.Name)
		if row.Name == VariantFlood && (row.QPSvsDefaults <= 0 || row.CPUvsDefaults <= 0) {
			t.Errorf("%s: no ratio against %s: %+v", row.Name, VariantDefaults, row)
		}
	}
	if len(want) > 0 {
		t.Errorf("variants missing from the table: %v", want)
	}
	if st := res.PluginStats[VariantFlood]; !strings.Contains(st, "requests_") {
		t.Errorf("%s: plugin stats %q count no requests", VariantFlood, st)
	}
}

// smokeOptions finds what the smoke test needs, or skips (fails under
// BORROWCYCLE_REQUIRE_ENVOY=1).
func smokeOptions(t *testing.T) Options {
	t.Helper()
	root, err := envoyrun.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	envOr := func(key, def string) string {
		if v := os.Getenv(key); v != "" {
			return v
		}
		return def
	}
	o := Options{
		Envoy:       envOr("BORROWCYCLE_ENVOY", filepath.Join(root, "build", "envoy")),
		Wasm:        envOr("BORROWCYCLE_WASM", filepath.Join(root, "build", "borrowcycle.wasm")),
		Wrk:         "wrk",
		Rounds:      1,
		Duration:    time.Second,
		Connections: 4,
		Clients:     50,
		Route:       RouteDirect,
		Dir:         t.TempDir(),
		Progress:    testWriter{t},
	}
	o.Noop = filepath.Join(filepath.Dir(o.Wasm), "noop.wasm")
	var missing []string
	for _, f := range []string{o.Envoy, o.Wasm, o.Noop} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f+" (make build envoy)")
		}
	}
	for _, bin := range []string{o.Wrk, "taskset"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin+" (scripts/getwrk.sh)")
		}
	}
	if len(missing) > 0 {
		msg := "missing: " + strings.Join(missing, ", ")
		if os.Getenv("BORROWCYCLE_REQUIRE_ENVOY") == "1" {
			t.Fatalf("BORROWCYCLE_REQUIRE_ENVOY=1 and %s", msg)
		}
		t.Skip(msg)
	}
	return o
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestCheckStatuses(t *testing.T) {
	ok := wrkResult{requests: 100}
	rejected := wrkResult{requests: 100, non2xx3xx: 100}
	for _, c := range []struct {
		name    string
		want    int
		st      statusCounts
		w       wrkResult
		wantErr string
	}{
		{"all admitted", 200, statusCounts{total: 101, c2: 100}, ok, ""},
		{"admitting variant saw 429s", 200, statusCounts{total: 100, c2: 99, c4: 1}, ok, "other than 2xx"},
		{"no-filter variant saw 5xx", 200, statusCounts{total: 100, c2: 98, c5: 2}, ok, "other than 2xx"},
		{"wrk disagrees", 200, statusCounts{total: 100, c2: 100}, wrkResult{requests: 100, non2xx3xx: 3}, "non-2xx/3xx"},
		{"socket errors", 200, statusCounts{total: 100, c2: 100}, wrkResult{requests: 100, read: 1}, "socket errors"},
		{"nothing answered", 200, statusCounts{total: 5}, ok, "no requests"},
		{"all rejected", 429, statusCounts{total: 100, c4: 100}, rejected, ""},
		{"reject variant admitted some", 429, statusCounts{total: 100, c2: 1, c4: 99}, rejected, "other than 4xx"},
		{"reject variant, wrk saw 2xx", 429, statusCounts{total: 100, c4: 100}, wrkResult{requests: 100, non2xx3xx: 90}, "non-2xx/3xx"},
	} {
		err := checkStatuses(c.want, c.st, c.w)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.wantErr)
		}
	}
}

func TestCheckMixedStatuses(t *testing.T) {
	allowed := []int{200, 429}
	for _, c := range []struct {
		name    string
		st      statusCounts
		w       wrkResult
		wantErr string
	}{
		{"mixed, counts agree", statusCounts{total: 100, c2: 60, c4: 40}, wrkResult{requests: 100, non2xx3xx: 40}, ""},
		{"all admitted", statusCounts{total: 100, c2: 100}, wrkResult{requests: 100}, ""},
		{"all rejected", statusCounts{total: 100, c4: 100}, wrkResult{requests: 100, non2xx3xx: 100}, ""},
		{"a 429 wrk did not read", statusCounts{total: 101, c2: 60, c4: 41}, wrkResult{requests: 100, non2xx3xx: 40}, ""},
		{"a 5xx", statusCounts{total: 100, c2: 59, c4: 40, c5: 1}, wrkResult{requests: 100, non2xx3xx: 41}, "outside"},
		{"a 1xx", statusCounts{total: 100, c1: 1, c2: 59, c4: 40}, wrkResult{requests: 100, non2xx3xx: 40}, "outside"},
		{"wrk saw more rejections", statusCounts{total: 100, c2: 60, c4: 40}, wrkResult{requests: 100, non2xx3xx: 41}, "non-2xx/3xx"},
		{"wrk saw fewer rejections", statusCounts{total: 100, c2: 60, c4: 40}, wrkResult{requests: 100, non2xx3xx: 39}, "non-2xx/3xx"},
		{"more than the unread gap", statusCounts{total: 101, c2: 59, c4: 42}, wrkResult{requests: 100, non2xx3xx: 40}, "non-2xx/3xx"},
		{"wrk completed more than Envoy answered", statusCounts{total: 100, c2: 60, c4: 40}, wrkResult{requests: 101, non2xx3xx: 40}, "answered only"},
		{"socket errors", statusCounts{total: 100, c2: 60, c4: 40}, wrkResult{requests: 100, non2xx3xx: 40, timeout: 1}, "socket errors"},
		{"nothing answered", statusCounts{total: 3}, wrkResult{requests: 0}, "no requests"},
	} {
		err := checkMixedStatuses(allowed, c.st, c.w)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.wantErr)
		}
	}
	// Only 2xx allowed: the 429s of the first case are now outside.
	if err := checkMixedStatuses([]int{200, 204}, statusCounts{total: 100, c2: 60, c4: 40}, wrkResult{requests: 100, non2xx3xx: 40}); err == nil {
		t.Error("4xx responses passed a 2xx-only mixed expectation")
	}
}

// TestExpectationDispatch checks that a single-status variant keeps the
// single-status checks and a mixed one gets the mixed checks.
func TestExpectationDispatch(t *testing.T) {
	single := expectation{status: 200, probe: headerAbsent("x-ratelimit-limit")}
	mixed := expectation{mixed: []int{200, 429}, mixedProbe: floodAnswer}
	st := statusCounts{total: 10, c2: 6, c4: 4}
	w := wrkResult{requests: 10, non2xx3xx: 4}
	if err := single.check(st, w); err == nil {
		t.Error("a 200-only variant accepted 429s")
	}
	if err := mixed.check(st, w); err != nil {
		t.Errorf("the mixed variant refused 200s and 429s: %v", err)
	}
	if got := single.classes() + " " + mixed.classes(); got != "2xx 2xx+4xx" {
		t.Errorf("classes: %q", got)
	}
	if err := single.answer(429, http.Header{}); err == nil {
		t.Error("a 200-only variant accepted a 429 probe")
	}
}

func TestFloodAnswer(t *testing.T) {
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	for _, c := range []struct {
		name   string
		status int
		h      http.Header
		ok     bool
	}{
		{"admitted", 200, h("x-ratelimit-limit", "7"), true},
		{"admitted without headers", 200, h(), false},
		{"pending", 429, h("x-borrowcycle-reason", "pending"), true},
		{"table_full", 429, h("x-borrowcycle-reason", "table_full"), true},
		{"over_limit", 429, h("x-borrowcycle-reason", "over_limit"), true},
		{"store_failure", 429, h("x-borrowcycle-reason", "store_failure"), false},
		{"anonymous", 429, h("x-borrowcycle-reason", "anonymous"), false},
		{"a 429 not from Borrowcycle", 429, h(), false},
		{"a 503", 503, h(), false},
		{"a 403", 403, h("x-borrowcycle-reason", "pending"), false},
	} {
		if err := floodAnswer(c.status, c.h); (err == nil) != c.ok {
			t.Errorf("%s: floodAnswer = %v, want ok %v", c.name, err, c.ok)
		}
	}
}

func TestFloodLoadArgs(t *testing.T) {
	o := Options{Clients: 2}
	for _, v := range variants(o) {
		got := strings.Join(v.loadArgs(o), " ")
		want := "client-00 client-01"
		if v.name == VariantFlood {
			want = "--flood flood- 100000"
		}
		if got != want {
			t.Errorf("%s: load arguments %q, want %q", v.name, got, want)
		}
	}
}

func TestSummarizePluginStats(t *testing.T) {
	body := "wasmcustom.borrowcycle.default.clients_active: 10000\n" +
		"wasmcustom.borrowcycle.default.requests_allowed: 52\n" +
		"wasmcustom.borrowcycle.default.requests_rejected.over_limit: 0\n" +
		"wasmcustom.borrowcycle.default.requests_rejected.pending: 900\n" +
		"wasmcustom.borrowcycle.other.requests_allowed: 7\n" +
		"wasmcustom.borrowcycle.default.requests_rejected.table_full: 48\n"
	want := "clients_active 10000, requests_allowed 52, requests_rejected.pending 900, requests_rejected.table_full 48"
	if got := summarizePluginStats(body); got != want {
		t.Errorf("summarizePluginStats =\n%q, want\n%q", got, want)
	}
}

func TestParseStatCPU(t *testing.T) {
	// utime 1234 and stime 56 are fields 14 and 15; the name holds ") (".
	line := "4242 (env) (oy x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 56 0 0 20 0 9 0 100 200 300"
	got, err := parseStatCPU(line)
	if err != nil || got != 1290 {
		t.Errorf("parseStatCPU = %d, %v; want 1290", got, err)
	}
	if _, err := parseStatCPU("4242 (envoy) S 1 2"); err == nil {
		t.Error("a short stat line should fail")
	}
}

func TestParseSteal(t *testing.T) {
	stat := "cpu  900 0 300 5000 10 0 20 77 0 0\n" +
		"cpu0 400 0 100 2500 5 0 10 31 0 0\n" +
		"cpu1 500 0 200 2500 5 0 10 46 0 0\n" +
		"cpu10 1 2 3 4 5 6 7\n" +
		"intr 12345\n"
	for cpu, want := range map[int]uint64{0: 31, 1: 46} {
		if got, err := parseSteal(stat, cpu); err != nil || got != want {
			t.Errorf("parseSteal(cpu%d) = %d, %v; want %d", cpu, got, err, want)
		}
	}
	if _, err := parseSteal(stat, 10); err == nil {
		t.Error("a cpu line without a steal field should fail")
	}
	if _, err := parseSteal(stat, 2); err == nil {
		t.Error("a cpu missing from /proc/stat should fail")
	}
}

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{"0-1": {0, 1}, "3": {3}, "0-2,5,7-8": {0, 1, 2, 5, 7, 8}} {
		got, err := parseCPUList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a", "3-1"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q) should fail", bad)
		}
	}
}

func TestParseWrk(t *testing.T) {
	out := "Running 1s test @ http://127.0.0.1:1/\n  1 threads and 4 connections\n" +
		"benchenvoy: requests=5000 duration_us=1000500 connect=0 read=1 write=0 timeout=0 non2xx3xx=7 p50_us=80 p99_us=450 p999_us=900\n"
	r, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	want := wrkResult{requests: 5000, duration: 1000500 * time.Microsecond, read: 1, non2xx3xx: 7,
		p50: 80 * time.Microsecond, p99: 450 * time.Microsecond, p999: 900 * time.Microsecond}
	if r != want {
		t.Errorf("parseWrk = %+v, want %+v", r, want)
	}
	if _, err := parseWrk("Running 1s test\n"); err == nil {
		t.Error("output without the result line should fail")
	}
	if _, err := parseWrk("benchenvoy: requests=5 duration_us=1\n"); err == nil {
		t.Error("a result line with missing fields should fail")
	}
}

// The scale variants are divided by the 50-client row of their cycle, in
// the same round: a 100,000-client run at 0.8 of its round's 50-client
// speed, with twice its p99.9, reads 0.8 and 2 whatever the rounds' drift;
// and only -scale adds them.
func TestScaleRowsArePaired(t *testing.T) {
	if slices.ContainsFunc(variants(Options{}), func(v variant) bool { return v.scaleBase != "" }) {
		t.Fatal("scale variants without -scale")
	}
	vs := variants(Options{Clients: 1, Scale: true})
	res := &Results{Variants: vs, Samples: make([][]sample, len(vs))}
	for i, v := range vs {
		for _, speed := range []float64{1000, 3000, 2000} {
			f, tail := 1.0, time.Duration(1e9/speed)
			if v.name == VariantScale100k {
				f, tail = 0.8, 2*tail
			}
			s := sample{qps: speed * f, p999: tail, statuses: statusCounts{total: 10, c2: 10}}
			if v.withHonest {
				// (rounds of 10, 30 and 20 honest requests, 50 of the 60
				// admitted, where the median of the rounds' shares is 1)
				s.honestSent, s.honestOK = uint64(speed/100), uint64(speed/100)
				if speed == 3000 {
					s.honestOK = 20
				}
			}
			res.Samples[i] = append(res.Samples[i], s)
		}
	}
	var seen bool
	for _, row := range res.Rows() {
		switch row.Name {
		case VariantScale100k:
			seen = true
			if d := row.QPSvsBase - 0.8; d > 1e-9 || d < -1e-9 {
				t.Errorf("%s: × 50 clients %.4f, want 0.8", row.Name, row.QPSvsBase)
			}
			if d := row.P999vsBase - 2; d > 1e-9 || d < -1e-9 {
				t.Errorf("%s: p99.9 × 50 clients %.4f, want 2", row.Name, row.P999vsBase)
			}
		case VariantNoop:
			if !math.IsNaN(row.QPSvsBase) {
				t.Errorf("%s has a scale ratio", row.Name)
			}
		case VariantScaleFlood1s:
			if d := row.HonestKept - 50.0/60; d > 1e-9 || d < -1e-9 {
				t.Errorf("%s: honest kept %.4f, want 50/60 (every round's requests together)", row.Name, row.HonestKept)
			}
		}
		if row.Name != VariantScaleFlood1s && !math.IsNaN(row.HonestKept) {
			t.Errorf("%s has an honest client's share", row.Name)
		}
	}
	if !seen {
		t.Fatal("no scale-100k row")
	}
	var out bytes.Buffer
	res.writeScale(&out, res.Rows())
	if !strings.Contains(out.String(), VariantScaleFlood1s) || !strings.Contains(out.String(), "83.3%") {
		t.Errorf("the scale table lacks %s, or its honest client's 83.3%%:\n%s", VariantScaleFlood1s, out.String())
	}
}

func TestParseIngressStats(t *testing.T) {
	body := []byte("http.ingress.downstream_rq_1xx: 0\nhttp.ingress.downstream_rq_2xx: 90\n" +
		"http.ingress.downstream_rq_3xx: 0\nhttp.ingress.downstream_rq_4xx: 9\nhttp.ingress.downstream_rq_5xx: 1\n" +
		"http.ingress.downstream_rq_total: 100\nhttp.ingress.downstream_rq_time: P0(nan,1)\n")
	s, err := parseIngressStats(body)
	if err != nil {
		t.Fatal(err)
	}
	if want := (statusCounts{total: 100, c2: 90, c4: 9, c5: 1}); s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
	if _, err := parseIngressStats([]byte("http.ingress.downstream_rq_2xx: 1\n")); err == nil {
		t.Error("missing counters should fail")
	}
}

// TestRowsArePaired checks that ratios are taken round by round: the
// machine's speed drifts between rounds, and the variant is 10% slower than
// the no-op in two rounds and disturbed in the third. The paired median is
// 0.9; a ratio of medians would give 1000/2000 = 0.5.
func TestRowsArePaired(t *testing.T) {
	vs := variants(Options{Clients: 1})
	res := &Results{Variants: vs, Samples: make([][]sample, len(vs))}
	speeds := []float64{1000, 3000, 2000}
	slower := []float64{0.9, 0.9, 0.5}
	for i, v := range vs {
		for r, speed := range speeds {
			if v.name == VariantDefaults {
				speed *= slower[r]
			}
			res.Samples[i] = append(res.Samples[i], sample{
				qps:       speed,
				cpuPerReq: time.Duration(1e9 / speed),
				p50:       time.Duration(1e6 / speed), p99: time.Duration(1e7 / speed),
				statuses: statusCounts{total: 10, c2: 10},
			})
		}
	}
	for _, row := range res.Rows() {
		want := 1.0
		if row.Name == VariantDefaults {
			want = 0.9
		}
		if d := row.QPSvsNoop - want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: ×noop %.4f, want %.4f", row.Name, row.QPSvsNoop, want)
		}
		if d := row.QPSvsLocalRL - want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: ×local_rl %.4f, want %.4f", row.Name, row.QPSvsLocalRL, want)
		}
		wantKnown := 1 / 0.9 // median of 1/0.9, 1/0.9, 1/0.5
		if row.Name == VariantDefaults {
			wantKnown = 1
		}
		if d := row.QPSvsDefaults - wantKnown; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: ×borrowcycle %.4f, want %.4f", row.Name, row.QPSvsDefaults, wantKnown)
		}
		if row.Responses != 30 {
			t.Errorf("%s: %d responses, want 30", row.Name, row.Responses)
		}
	}
}

// TestBootstrapRewrites renders every variant's bootstrap from the shipped
// one without Envoy: a change to envoy/envoy.yaml that the rewrites no
// longer understand fails here first.
func TestBootstrapRewrites(t *testing.T) {
	o := Options{Wasm: "/x/borrowcycle.wasm", Noop: "/x/noop.wasm", Clients: 3}
	for _, v := range variants(o) {
		b, err := envoyrun.DefaultBootstrap()
		if err != nil {
			t.Fatal(err)
		}
		if err := v.filter(b); err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		if b, err = directResponse(b); err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		raw, err := b.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		out := string(raw)
		if !strings.Contains(out, "hello from benchenvoy") || strings.Count(out, "direct_response") != 2 {
			t.Errorf("%s: the ingress route is not a direct_response:\n%s", v.name, out)
		}
		if v.name == VariantLocalRL {
			for _, want := range []string{"client-02", "DRAFT_VERSION_03", "descriptor_key: client_id", "header_name: x-client-id"} {
				if !strings.Contains(out, want) {
					t.Errorf("local_ratelimit bootstrap lacks %q", want)
				}
			}
		}
		if v.config != "" && !strings.Contains(out, v.config) {
			t.Errorf("%s: plugin configuration %s not in the bootstrap", v.name, v.config)
		}
	}
}

// -only keeps the named variants and the baselines the table divides by,
// in table order, and names what it does not know.
func TestOnlySelectsVariants(t *testing.T) {
	names := func(vs []variant) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.name)
		}
		return out
	}
	got := names(selected(variants(Options{}), []string{VariantReject}))
	want := []string{VariantLocalRL, VariantNoop, VariantDefaults, VariantReject}
	if !slices.Equal(got, want) {
		t.Errorf("-only %s selects %v, want %v", VariantReject, got, want)
	}
	if all := selected(variants(Options{}), nil); len(all) != len(variants(Options{})) {
		t.Errorf("no -only selects %d variants, want all %d", len(all), len(variants(Options{})))
	}
	if bad := unknownVariants([]string{VariantLean, "borrowcycle-fast"}); !slices.Equal(bad, []string{"borrowcycle-fast"}) {
		t.Errorf("unknown variants %v, want [borrowcycle-fast]", bad)
	}
}

// perf's report is split by place: the JIT's per-thread names all count as
// the guest, Envoy's binary as Envoy, the kernel as kernel, the rest as
// libraries; a line that is not a count and a place is an error.
func TestParseDSOReport(t *testing.T) {
	report := `# Samples: 11K of event 'cpu-clock'
#      Samples  Shared Object
# ............  .................
#
          1500  [JIT] tid 8571
           500  [JIT] tid 8572
          2000  [kernel.kallsyms]
            40  [vdso]
            60  libc.so.6
          5900  envoy
`
	s, err := parseDSOReport(strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	if s.samples != 10000 || s.guest != 0.2 || s.envoy != 0.59 || s.kernel != 0.2 || s.libs != 0.01 {
		t.Errorf("split %+v, want 10000 samples: guest 0.2, envoy 0.59, kernel 0.2, libs 0.01", s)
	}
	if _, err := parseDSOReport(strings.NewReader("lots envoy\n")); err == nil {
		t.Error("a line without a sample count was accepted")
	}
	if _, err := parseDSOReport(strings.NewReader("# nothing\n")); err == nil {
		t.Error("a report without samples was accepted")
	}
}
