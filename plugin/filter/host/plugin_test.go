//go:build !wasm

package host

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

func TestStartLogsOneSummaryLine(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 100, "cycle": "10s", "name": "api"}`)
		infos := h.logsContaining(`borrowcycle: limit "api"`)
		if len(infos) != 1 || len(h.GetInfoLogs()) != 1 {
			t.Fatalf("info logs = %q, want exactly one summary line", h.GetInfoLogs())
		}
		if !strings.Contains(infos[0], "capacity 100 per 10s") {
			t.Errorf("summary %q does not state the capacity", infos[0])
		}
		if got, want := h.GetTickPeriod(), uint32(1000); got != want {
			t.Errorf("tick period = %d ms, want %d", got, want)
		}
		if errs := h.GetErrorLogs(); len(errs) != 0 {
			t.Errorf("error logs on a valid start: %q", errs)
		}
	})
}

func TestConfigErrorFailsStartWithOneLine(t *testing.T) {
	cases := []struct{ config, field string }{
		{``, "capacity"},
		{`{"cycle": "10s"}`, "capacity"},
		{`{"capacity": 0, "cycle": "10s"}`, "capacity"},
		{`{"capacity": "10", "cycle": "10s"}`, "capacity"},
		{`{"capacity": 10}`, "cycle"},
		{`{"capacity": 10, "cycle": "abc"}`, "cycle"},
		{`{"capacity": 10, "cycle": "169h"}`, "cycle"},
		{`{"capacity": 10, "cycle": "10s", "reservation": 1.5}`, "reservation"},
		{`{"capacity": 10, "cycle": "10s", "client_header": "x client"}`, "client_header"},
		{`{"capacity": 10, "cycle": "10s", "client_header": "x-a", "client_id": {"from": "header"}}`, "client_id"},
		{`{"capacity": 10, "cycle": "10s", "client_id": {"from": "x"}}`, "client_id.from"},
		{`{"capacity": 10, "cycle": "10s", "client_id": {"from": "metadata", "filter": "f"}}`, "client_id.path"},
		{`{"capacity": 10, "cycle": "10s", "mode": "shadow"}`, "mode"},
		{`{"capacity": 10, "cycle": "10s", "max_clients": 100001}`, "max_clients"},
		{`{"capacity": 10, "cycle": "10s", "idle_cycles": 0}`, "idle_cycles"},
		{`{"capacity": 10, "cycle": "10s", "min_cycle": "11s"}`, "min_cycle"},
		{`{"capacity": 10, "cycle": "10s", "failure_mode_deny": "yes"}`, "failure_mode_deny"},
		{`{"capacity": 10, "cycle": "10s", "rate_limit_headers": "draft"}`, "rate_limit_headers"},
		{`{"capacity": 10, "cycle": "10s", "headers_on_allowed": 1}`, "headers_on_allowed"},
		{`{"capacity": 10, "cycle": "10s", "status_code": 200}`, "status_code"},
		{`{"capacity": 10, "cycle": "10s", "max_client_id_bytes": 5000}`, "max_client_id_bytes"},
		{`{"capacity": 10, "cycle": "10s", "name": "Bad-Name"}`, "name"},
		{`{"capacity": 10, "cycle": "10s", "debug_headers": null}`, "debug_headers"},
		{`{"capacity": 10, "cycle": "10s", "burst": 5}`, "burst"},
		{`{"capacity": 10, "cycle": "10s"`, "json"},
	}
	eachRunner(t, func(t *testing.T, runner string) {
		for _, c := range cases {
			t.Run(c.field, func(t *testing.T) {
				h := newHost(t, runner, c.config)
				if h.StartPlugin() {
					markStarted(runner, c.config) // its metrics now live in the VM
					t.Fatalf("OnPluginStart succeeded for %s", c.config)
				}
				errs := h.GetErrorLogs()
				prefix := "borrowcycle: invalid configuration: " + c.field + ": "
				if len(errs) != 1 || !strings.HasPrefix(errs[0], prefix) {
					t.Fatalf("error logs = %q, want one line starting %q", errs, prefix)
				}
				if n := len(h.GetInfoLogs()) + len(h.GetWarnLogs()) + len(h.GetCriticalLogs()); n != 0 {
					t.Errorf("%d other log lines on a config error", n)
				}
			})
		}
	})
}

// An upstream's own rate-limit headers are replaced by the limit's: the
// client reads one set.
func TestUpstreamRateLimitHeadersAreReplaced(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 10, "cycle": "10s", "name": "upstream"}`)
		id := h.InitializeHttpContext()
		h.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "test"}, {"x-client-id", "a"}}, true)
		h.CallOnResponseHeaders(id, [][2]string{{":status", "200"},
			{"x-ratelimit-limit", "5000"}, {"x-ratelimit-remaining", "4999"}, {"x-ratelimit-reset", "3600"}}, false)
		got := map[string][]string{}
		for _, kv := range h.GetCurrentResponseHeaders(id) {
			got[kv[0]] = append(got[kv[0]], strings.Clone(kv[1]))
		}
		h.CompleteHttpContext(id)
		for name, v := range map[string]string{"x-ratelimit-limit": "10", "x-ratelimit-remaining": "9", "x-ratelimit-reset": "10"} {
			if len(got[name]) != 1 || got[name][0] != v {
				t.Errorf("%s: %q, want the limit's %q alone", name, got[name], v)
			}
		}
	})
}

func TestOverLimitReplyCarriesEveryHeader(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 3, "cycle": "10s", "name": "over"}`)
		for i := 0; i < 3; i++ {
			r := h.from("alice")
			if !r.admitted() {
				t.Fatalf("request %d rejected: %+v", i, r.local)
			}
			want := map[string]string{"x-ratelimit-limit": "3", "x-ratelimit-remaining": strconv.Itoa(2 - i), "x-ratelimit-reset": "10"}
			checkHeaders(t, r.headers, want)
		}
		h.advance(2500 * time.Millisecond)
		r := h.from("alice")
		if r.admitted() || r.local == nil {
			t.Fatal("fourth request admitted over a share of 3")
		}
		if r.local.StatusCode != 429 {
			t.Errorf("status = %d, want 429", r.local.StatusCode)
		}
		checkHeaders(t, r.headers, map[string]string{
			"x-envoy-ratelimited":   "true",
			"x-borrowcycle-reason":  "over_limit",
			"retry-after":           "8", // 7.5 s to the end of the cycle, rounded up
			"x-ratelimit-limit":     "3",
			"x-ratelimit-remaining": "0",
			"x-ratelimit-reset":     "8",
		})
		if got, want := string(r.local.Data), "borrowcycle: over_limit: this client is over its share for now; retry after the retry-after delay\n"; got != want {
			t.Errorf("body = %q, want %q", got, want)
		}
		if _, ok := r.headers["x-borrowcycle-plan"]; ok {
			t.Error("debug header present without debug_headers")
		}
	})
}

func TestIETFHeaders(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 2, "cycle": "1500ms", "rate_limit_headers": "ietf", "name": "ietf_api", "status_code": 503}`)
		r := h.from("bob")
		checkHeaders(t, r.headers, map[string]string{
			"ratelimit-policy": `"ietf_api";q=2;w=2`, // 1.5 s cycle, rounded up
			"ratelimit":        `"ietf_api";r=1;t=2`,
		})
		if _, ok := r.headers["x-ratelimit-limit"]; ok {
			t.Error("x-ratelimit headers sent in ietf style")
		}
		h.from("bob")
		h.advance(time.Second)
		r = h.from("bob")
		if r.local == nil || r.local.StatusCode != 503 {
			t.Fatalf("third request: local reply %+v, want status 503", r.local)
		}
		checkHeaders(t, r.headers, map[string]string{
			"ratelimit-policy": `"ietf_api";q=2;w=2`,
			"ratelimit":        `"ietf_api";r=0;t=1`,
			"retry-after":      "1",
		})
	})
}

func TestNoRateLimitHeadersWhenDisabled(t *testing.T) {
	configs := []string{
		`{"capacity": 5, "cycle": "10s", "headers_on_allowed": false, "name": "quiet"}`,
		`{"capacity": 5, "cycle": "10s", "rate_limit_headers": "none", "name": "none"}`,
	}
	eachRunner(t, func(t *testing.T, runner string) {
		for i, cfg := range configs {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				h := startHost(t, runner, cfg)
				r := h.from("carol")
				if !r.admitted() {
					t.Fatalf("%s: first request rejected", cfg)
				}
				for name := range r.headers {
					if strings.Contains(name, "ratelimit") {
						t.Errorf("%s: admitted response has %s", cfg, name)
					}
				}
			})
		}
	})
}

func TestAnonymousRequests(t *testing.T) {
	cases := map[string][][2]string{
		"missing":     nil,
		"empty":       {{"x-client-id", ""}},
		"blank":       {{"x-client-id", " \t "}},
		"too long":    {{"x-client-id", strings.Repeat("x", 17)}},
		"other name":  {{"x-tenant", "dave"}},
		"long padded": {{"x-client-id", "\t" + strings.Repeat("y", 17) + " "}},
	}
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 10, "cycle": "10s", "max_client_id_bytes": 16, "debug_headers": true, "name": "anon"}`)
		for name, headers := range cases {
			r := h.request(headers...)
			if r.local == nil {
				t.Fatalf("%s: anonymous request admitted", name)
			}
			if r.local.StatusCode != 429 {
				t.Errorf("%s: status = %d, want 429", name, r.local.StatusCode)
			}
			if got, want := string(r.local.Data), `borrowcycle: anonymous: missing or invalid client id header "x-client-id"`+"\n"; got != want {
				t.Errorf("%s: body = %q, want %q", name, got, want)
			}
			checkHeaders(t, r.headers, map[string]string{"x-borrowcycle-reason": "anonymous"})
			for _, absent := range []string{"retry-after", "x-envoy-ratelimited"} {
				if _, ok := r.headers[absent]; ok {
					t.Errorf("%s: anonymous reply has %s", name, absent)
				}
			}
			if _, ok := r.headers["x-borrowcycle-plan"]; !ok {
				t.Errorf("%s: debug header missing from a local reply", name)
			}
		}
		// Exactly 16 bytes after trimming is a valid id.
		if r := h.from("  " + strings.Repeat("z", 16) + "\t"); !r.admitted() {
			t.Errorf("a 16-byte id was rejected: %+v", r.local)
		}
		h.flushMetrics()
		if got := h.counter("borrowcycle.anon.requests_rejected.anonymous"); got != uint64(len(cases)) {
			t.Errorf("requests_rejected.anonymous = %d, want %d", got, len(cases))
		}
	})
}

// TestBorrowingAcrossCycles follows four clients through cycles whose
// demands differ and checks each client's share against engine.Allocate.
func TestBorrowingAcrossCycles(t *testing.T) {
	const capacity, reservation = 40, 0.1
	clients := []string{"a", "b", "c", "d"}
	eachRunner(t, func(t *testing.T, runner string) {
		// min_cycle = cycle: newcomers wait for the deadline, so every cycle
		// is a full one and demand is not rescaled.
		h := startHost(t, runner, `{"capacity": 40, "cycle": "10s", "min_cycle": "10s", "name": "borrow"}`)
		if r := h.from("a"); !r.admitted() {
			t.Fatalf("first client rejected: %+v", r.local)
		}
		for _, c := range clients[1:] {
			r := h.from(c)
			if r.local == nil || r.headers["x-borrowcycle-reason"] != "pending" {
				t.Fatalf("newcomer %s: got %+v, want a pending reply", c, r.headers)
			}
			checkHeaders(t, r.headers, map[string]string{"retry-after": "10"})
			// Asking again proves a newcomer (an id that asked once is
			// not counted by the next plan); it still waits.
			if r := h.from(c); r.local == nil || r.headers["x-borrowcycle-reason"] != "pending" {
				t.Fatalf("newcomer %s again: got %+v, want a pending reply", c, r.headers)
			}
		}
		// Cycle 1 demand: a sent 1, the others were pending.
		demand := []int64{1, 0, 0, 0}
		// The proven newcomers join at the deadline, counted at the default share.
		prev := []int64{demand[0], capacity / 4, capacity / 4, capacity / 4}
		for cycle, next := range [][]int64{{2, 15, 10, 10}, {20, 20, 20, 20}, {0, 30, 1, 3}, {9, 9, 9, 9}} {
			h.advance(10 * time.Second)
			h.Tick()
			want := engine.Allocate(capacity, reservation, prev)
			for i, c := range clients {
				sent := next[i]
				admitted := h.admittedOf(c, int(sent))
				if wantAdmit := min(sent, want[i]); int64(admitted) != wantAdmit {
					t.Errorf("cycle %d: %s admitted %d of %d, want %d (shares %v from demands %v)",
						cycle+2, c, admitted, sent, wantAdmit, want, prev)
				}
				if sent == 0 {
					continue
				}
				r := h.from(c) // one more: shows the share, and counts as demand
				if got := r.headers["x-ratelimit-limit"]; got != strconv.FormatInt(want[i], 10) {
					t.Errorf("cycle %d: %s limit header = %q, want %d", cycle+2, c, got, want[i])
				}
				next[i]++
			}
			prev = next
		}
	})
}

func TestPassthroughAdmitsAndCounts(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 2, "cycle": "10s", "mode": "passthrough", "name": "pass"}`)
		for i := 0; i < 5; i++ {
			r := h.from("erin")
			if !r.admitted() {
				t.Fatalf("passthrough rejected request %d: %+v", i, r.local)
			}
			if i >= 2 {
				checkHeaders(t, r.headers, map[string]string{"x-ratelimit-limit": "2", "x-ratelimit-remaining": "0"})
			}
		}
		if r := h.request(); !r.admitted() {
			t.Fatal("passthrough rejected an anonymous request")
		}
		if r := h.from("frank"); !r.admitted() {
			t.Fatal("passthrough rejected a pending newcomer")
		}
		h.flushMetrics()
		h.checkCounters("borrowcycle.pass.", map[string]uint64{
			"requests_allowed":                    7,
			"requests_would_reject.over_limit":    3,
			"requests_would_reject.anonymous":     1,
			"requests_would_reject.pending":       1,
			"requests_would_reject.table_full":    0,
			"requests_would_reject.store_failure": 0,
			"requests_rejected.over_limit":        0,
			"requests_rejected.anonymous":         0,
			"requests_rejected.pending":           0,
		})
	})
}

func TestHostileHeadersLeaveServiceIntact(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 100000, "cycle": "10s", "max_clients": 64, "name": "hostile"}`)
		if r := h.from("good"); !r.admitted() {
			t.Fatalf("existing client rejected: %+v", r.local)
		}
		hostile := map[string]string{
			"100 KB":     strings.Repeat("A", 100<<10),
			"NUL bytes":  "evil\x00\x00id",
			"CRLF":       "evil\r\nx-injected: 1",
			"all bytes":  allBytes(),
			"only NULs":  "\x00\x00",
			"utf-8 junk": "\xff\xfe\xc0\x80",
		}
		for name, v := range hostile {
			r := h.from(v)
			if r.admitted() && name == "100 KB" {
				t.Errorf("%s: admitted a %d-byte id", name, len(v))
			}
			for k := range r.headers {
				if strings.Contains(k, "injected") {
					t.Errorf("%s: reply carries header %q", name, k)
				}
			}
		}
		for i := 0; i < 10000; i++ {
			h.from("flood-" + strconv.Itoa(i))
		}
		h.flushMetrics()
		if got := h.counter("borrowcycle.hostile.requests_rejected.table_full"); got == 0 {
			t.Error("10k distinct ids never filled a 64-client table")
		}
		if n := h.admittedOf("good", 50); n != 50 {
			t.Errorf("existing client admitted %d of 50 after the flood", n)
		}
		if got := h.counter("borrowcycle.hostile.panics"); got != 0 {
			t.Errorf("panics = %d", got)
		}
	})
}

func allBytes() string {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return string(b)
}

func TestMetricValues(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 10, "cycle": "10s", "min_cycle": "2s", "max_clients": 2, "name": "m"}`)
		h.from("a") // first client: registers at once, in the plan of its window
		if got := h.counter("borrowcycle.m.requests_allowed"); got != 0 {
			t.Errorf("requests_allowed = %d before any tick: counted by a host call per request", got)
		}
		h.from("b") // pending: min_cycle not reached
		h.from("b") // pending again, and proven: b now holds a place
		h.from("c") // table_full: a + proven pending b fill 2 slots
		h.advance(2 * time.Second)
		h.from("b")           // a re-plan of the window registers b (early)
		h.admittedOf("a", 10) // a's share is 5 after the re-plan, of which it used 1
		h.request()
		h.advance(10 * time.Second)
		h.Tick() // the next window's plan (deadline)
		h.flushMetrics()
		h.checkCounters("borrowcycle.m.", map[string]uint64{
			"requests_allowed":                6, // a: 1+4, b: 1
			"requests_rejected.pending":       2,
			"requests_rejected.table_full":    1,
			"requests_rejected.over_limit":    6,
			"requests_rejected.anonymous":     1,
			"requests_rejected.store_failure": 0,
			"rollovers.early":                 1, // the re-plan for b
			"rollovers.deadline":              2, // the first window's plan, and the next one's
			"cas_retries":                     0,
			"store_failures":                  0,
			"panics":                          0,
		})
		if got := h.gauge("borrowcycle.m.clients_active"); got != 2 {
			t.Errorf("clients_active = %d, want 2", got)
		}
		// The first window, judged by the roll past it: equal shares of 5;
		// a was granted 5 of the 11 it asked for, b 1 of the 2 its
		// counted requests asked for (its proof was not counted): b left 4
		// to the others, both were held below what they asked for, and
		// against max-min on those demands (a 8, b 2) Jain's index is
		// (5/8 + 1/2)² / (2 × ((5/8)² + (1/2)²)) = 0.988.
		h.checkCounters("borrowcycle.m.", map[string]uint64{"units_lent": 4, "units_borrowed": 0})
		if got := h.gauge("borrowcycle.m.clients_held_below"); got != 2 {
			t.Errorf("clients_held_below = %d, want 2", got)
		}
		if got := h.gauge("borrowcycle.m.jain_index_permille"); got != 988 {
			t.Errorf("jain_index_permille = %d, want 988", got)
		}
	})
}

func TestDebugHeaderNamesThePlan(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 1, "cycle": "10s", "debug_headers": true, "name": "debug"}`)
		first := h.from("a").headers["x-borrowcycle-plan"]
		rejected := h.from("a")
		if rejected.local == nil || rejected.headers["x-borrowcycle-plan"] != first || first == "" {
			t.Fatalf("plan header: admitted %q, rejected %q", first, rejected.headers["x-borrowcycle-plan"])
		}
		h.advance(10 * time.Second)
		next := h.from("a").headers["x-borrowcycle-plan"]
		if a, b := mustAtoi(t, first), mustAtoi(t, next); b != a+1 {
			t.Errorf("plan after the window's end = %d, want %d", b, a+1)
		}
	})
}

func TestCorruptSharedStateIsReset(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 10, "cycle": "10s", "name": "corrupt"}`)
		h.from("a")
		// The test host's shared data is the plugin's, in both runners.
		corruptSharedData(t, "borrowcycle/corrupt/r12/p") // (engine: recordKey)
		h.advance(10 * time.Second)
		if r := h.from("a"); !r.admitted() {
			t.Fatalf("request after corruption rejected: %+v", r.headers)
		}
		if len(h.logsContaining("unreadable shared value")) == 0 {
			t.Errorf("no warning about the reset; warn logs %q", h.GetWarnLogs())
		}
	})
}

func checkHeaders(t *testing.T, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("header %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

// While a worker reads a plan over a large table a slice at a time, it
// ticks every engine.PlanTick, and at the filter's own period again once
// the plan is read.
func TestTicksComeFastWhileAPlanIsReadInSlices(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 1000000, "cycle": "10s", "min_cycle": "100ms", "max_clients": 4096, "name": "slices"}`)
		normal := h.GetTickPeriod()
		ids := clientIDs(1100) // more than a request plans over
		register(h, ids)
		if n := h.admittedOf(ids[0], 1); n != 1 {
			t.Fatalf("%s not counted after two rounds", ids[0])
		}
		h.advance(10 * time.Second) // the next window: a request rolls it, provisionally
		h.from(ids[1])
		h.Tick()
		if got := h.GetTickPeriod(); got != uint32(engine.PlanTick.Milliseconds()) {
			t.Fatalf("tick period while a plan is read in slices: %d ms, want %d", got, engine.PlanTick.Milliseconds())
		}
		tickUntil(t, h, normal, 200, "the plan is still read")
		if n := h.admittedOf(ids[2], 1); n != 1 {
			t.Errorf("a counted client refused under the plan read in slices")
		}
	})
}

// The clock steps back while a plan is read in slices: 3 s (a late
// reading, within a window) or 15 s (a step, past a whole window). The
// fast ticks go on until the plan is done, then stop, and a counted client
// is admitted.
func TestFastTicksSurviveAClockStepBack(t *testing.T) {
	for _, back := range []time.Duration{3 * time.Second, 15 * time.Second} {
		t.Run(back.String(), func(t *testing.T) {
			eachRunner(t, func(t *testing.T, runner string) {
				h := startHost(t, runner, `{"capacity": 1000000, "cycle": "10s", "min_cycle": "100ms", "max_clients": 4096, "name": "stepback"}`)
				normal := h.GetTickPeriod()
				ids := clientIDs(1100) // more than a request plans over
				register(h, ids)
				h.advance(10 * time.Second) // the next window: a request rolls it, provisionally
				h.from(ids[1])
				h.Tick()
				if got := h.GetTickPeriod(); got != uint32(engine.PlanTick.Milliseconds()) {
					t.Fatalf("tick period while a plan is read in slices: %d ms, want %d", got, engine.PlanTick.Milliseconds())
				}
				h.advance(engine.PlanTick)
				h.Tick()
				h.advance(-back)
				tickUntil(t, h, normal, 400, "still ticking fast past the step back")
				if n := h.admittedOf(ids[2], 1); n != 1 {
					t.Errorf("a counted client refused after the step back")
				}
			})
		})
	}
}

// In a window's last eighth, a worker holding demand of clients far below
// their share ticks every engine.PlanTick to write it, and at the
// filter's own period again once it is written, before the window ends.
func TestTicksComeFastWhileDemandIsWrittenBeforeAWindowEnds(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 100000000, "cycle": "10s", "min_cycle": "100ms", "max_clients": 512, "name": "closing"}`)
		normal := h.GetTickPeriod()
		ids := clientIDs(300)
		register(h, ids)
		h.advance(10 * time.Second) // a window planned with every client counted
		h.Tick()
		for round := 0; round < 3; round++ { // a chunk's first request leases it, the rest wait
			for _, id := range ids {
				h.from(id)
			}
		}
		if got := h.GetTickPeriod(); got != normal {
			t.Fatalf("tick period %d ms before the window's last eighth, want %d", got, normal)
		}
		h.advance(8800 * time.Millisecond) // into the last eighth
		h.Tick()
		if got := h.GetTickPeriod(); got != uint32(engine.PlanTick.Milliseconds()) {
			t.Fatalf("tick period with demand to write in the last eighth: %d ms, want %d", got, engine.PlanTick.Milliseconds())
		}
		tickUntil(t, h, normal, 300, "demand still written")
	})
}

// tickUntil ticks h every engine.PlanTick until its tick period is normal
// again, failing with what after most ticks.
func tickUntil(t *testing.T, h *host, normal uint32, most int, what string) {
	t.Helper()
	for i := 0; h.GetTickPeriod() != normal; i++ {
		if i > most {
			t.Fatalf("%s after %d fast ticks", what, i)
		}
		h.advance(engine.PlanTick)
		h.Tick()
	}
}

func clientIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "client-" + strconv.Itoa(i)
	}
	return ids
}

// register sends each id twice, 200 ms and a tick apart: a newcomer's
// second request proves it.
func register(h *host, ids []string) {
	for range 2 {
		for _, id := range ids {
			h.from(id)
		}
		h.advance(200 * time.Millisecond)
		h.Tick()
	}
}
