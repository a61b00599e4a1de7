package filter

import (
	"github.com/borrowcycle/borrowcycle/engine/enginetest"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// These tests run the filter with no host at all: the rules of
// docs/contract.md, from a client header to the plan the host carries out.

func mustFilter(t testing.TB, config string) (*Filter, *enginetest.ManualClock) {
	t.Helper()
	set, err := ParseSettings([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	clock := enginetest.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f, err := New(set, engine.NewMemStore(), clock, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f, clock
}

func TestReplyPlans(t *testing.T) {
	over := engine.Decision{Reason: engine.ReasonOverLimit, WouldReject: true, Limit: 3, Remaining: 0,
		Reset: 7500 * time.Millisecond, RetryAfter: 7500 * time.Millisecond, Plan: 4}
	cases := []struct {
		name, config string
		d            engine.Decision
		want         Reply
	}{
		{"over_limit", `{"capacity": 3, "cycle": "10s"}`, over, Reply{Status: 429, Headers: [][2]string{
			{"x-borrowcycle-reason", "over_limit"}, {"x-envoy-ratelimited", "true"},
			{"retry-after", "8"}, {"x-ratelimit-limit", "3"}, {"x-ratelimit-remaining", "0"}, {"x-ratelimit-reset", "8"},
		}, Body: []byte("borrowcycle: over_limit: this client is over its share for now; retry after the retry-after delay\n")}},
		{"ietf with debug", `{"capacity": 3, "cycle": "1500ms", "rate_limit_headers": "ietf", "name": "api", "status_code": 503, "debug_headers": true}`,
			over, Reply{Status: 503, Headers: [][2]string{
				{"x-borrowcycle-reason", "over_limit"}, {"x-envoy-ratelimited", "true"},
				{"retry-after", "8"}, {"ratelimit-policy", `"api";q=3;w=2`}, {"ratelimit", `"api";r=0;t=8`}, {"x-borrowcycle-plan", "4"},
			}, Body: []byte("borrowcycle: over_limit: this client is over its share for now; retry after the retry-after delay\n")}},
		{"no rate-limit headers", `{"capacity": 3, "cycle": "10s", "rate_limit_headers": "none"}`,
			engine.Decision{Reason: engine.ReasonPending, WouldReject: true}, Reply{Status: 429, Headers: [][2]string{
				{"x-borrowcycle-reason", "pending"}, {"x-envoy-ratelimited", "true"}, {"retry-after", "1"},
			}, Body: []byte("borrowcycle: pending: new client is being registered; retry after the retry-after delay\n")}},
		{"anonymous", `{"capacity": 3, "cycle": "10s", "client_header": "X-Tenant"}`,
			engine.Decision{Reason: engine.ReasonAnonymous, WouldReject: true}, Reply{Status: 429, Headers: [][2]string{
				{"x-borrowcycle-reason", "anonymous"},
			}, Body: []byte("borrowcycle: anonymous: missing or invalid client id header \"x-tenant\"\n")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, _ := mustFilter(t, c.config)
			if got := f.Reply(Outcome{Decision: c.d}); !reflect.DeepEqual(got, c.want) {
				t.Errorf("reply:\n got  %+v\n want %+v", got, c.want)
			}
		})
	}
}

// A refusal's retry-after and reset name the engine's retry time, not the
// window's end, and the jitter moves both later by a uniform draw in
// [0, retry_after_jitter], except a pacer's turn.
func TestReplyRetryTimeAndJitter(t *testing.T) {
	for _, c := range []struct {
		name, config string
		wait         time.Duration // the engine's retry time
		draw         int64         // what the random source returns
		retry, reset string
		ietf         bool
		turn         bool
	}{
		{"a turn is not moved", `{"capacity": 10, "cycle": "10s", "retry_after_jitter": "3s"}`, 1200 * time.Millisecond, int64(3 * time.Second), "2", "2", false, true},
		{"no jitter: the retry time, rounded up", `{"capacity": 10, "cycle": "10s"}`, 1200 * time.Millisecond, 0, "2", "2", false, false},
		{"a retry due now: one second in both", `{"capacity": 10, "cycle": "10s"}`, 0, 0, "1", "1", false, false},
		{"the least jitter", `{"capacity": 10, "cycle": "10s", "retry_after_jitter": "3s"}`, 1200 * time.Millisecond, 0, "2", "2", false, false},
		{"the most jitter", `{"capacity": 10, "cycle": "10s", "retry_after_jitter": "3s"}`, 1200 * time.Millisecond, int64(3 * time.Second), "5", "5", false, false},
		{"ietf's t= moves with it", `{"capacity": 10, "cycle": "10s", "retry_after_jitter": "3s", "rate_limit_headers": "ietf"}`,
			1200 * time.Millisecond, int64(1900 * time.Millisecond), "4", `"default";r=0;t=4`, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, _ := mustFilter(t, c.config)
			var bound int64
			f.limits[0].resp.rand = func(n int64) int64 { bound = n; return c.draw }
			d := engine.Decision{Reason: engine.ReasonOverLimit, WouldReject: true, Limit: 10,
				Reset: 7500 * time.Millisecond, RetryAfter: c.wait, Turn: c.turn}
			h := f.Reply(Outcome{Decision: d}).Headers
			resetAt := 5
			if c.ietf {
				resetAt = 4
			}
			if h[2] != [2]string{"retry-after", c.retry} || h[resetAt][1] != c.reset {
				t.Errorf("headers %q, want retry-after %s and reset %s", h, c.retry, c.reset)
			}
			if want := int64(f.Settings().Limits[0].RetryAfterJitter); want > 0 && !c.turn && bound != want+1 {
				t.Errorf("drew in [0, %d), want [0, %d]", bound, want)
			}
		})
	}
	// An admitted response's reset stays the window's end.
	f, _ := mustFilter(t, `{"capacity": 10, "cycle": "10s", "retry_after_jitter": "3s"}`)
	ok := engine.Decision{Allowed: true, Reason: engine.ReasonOK, Limit: 10, Remaining: 4, Reset: 7500 * time.Millisecond}
	if h := f.ResponseHeaders(Outcome{Decision: ok}); h[2] != [2]string{"x-ratelimit-reset", "8"} {
		t.Errorf("admitted: %q, want the window's end", h)
	}
}

func TestResponseHeaderPlans(t *testing.T) {
	ok := engine.Decision{Allowed: true, Limit: 10, Remaining: 7, Reset: 2 * time.Second, Plan: 9}
	cases := []struct {
		name, config string
		d            engine.Decision
		want         [][2]string
	}{
		{"default", `{}`, ok, [][2]string{{"x-ratelimit-limit", "10"}, {"x-ratelimit-remaining", "7"}, {"x-ratelimit-reset", "2"}}},
		{"ietf", `{"rate_limit_headers": "ietf"}`, ok, [][2]string{{"ratelimit-policy", `"default";q=10;w=10`}, {"ratelimit", `"default";r=7;t=2`}}},
		{"not on allowed", `{"headers_on_allowed": false}`, ok, nil},
		{"style none", `{"rate_limit_headers": "none"}`, ok, nil},
		{"debug only", `{"headers_on_allowed": false, "debug_headers": true}`, ok, [][2]string{{"x-borrowcycle-plan", "9"}}},
		{"store failure admitted: no share to report", `{}`, engine.Decision{Allowed: true, Reason: engine.ReasonStoreFailure}, nil},
		{"anonymous in passthrough", `{"mode": "passthrough"}`, engine.Decision{Allowed: true, WouldReject: true, Reason: engine.ReasonAnonymous}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			config := `{"capacity": 10, "cycle": "10s", ` + c.config[1:]
			if c.config == `{}` {
				config = `{"capacity": 10, "cycle": "10s"}`
			}
			f, _ := mustFilter(t, config)
			if got := f.ResponseHeaders(Outcome{Decision: c.d}); len(got) != len(c.want) || len(got) > 0 && !reflect.DeepEqual(got, c.want) {
				t.Errorf("headers = %q, want %q", got, c.want)
			}
		})
	}
}

func TestDecideReadsTheClientID(t *testing.T) {
	f, clock := mustFilter(t, `{"capacity": 2, "cycle": "10s"}`)
	for _, c := range []struct {
		value string
		found bool
	}{{"", false}, {" \t", true}, {string(make([]byte, DefaultMaxClientIDBytes+1)), true}} {
		req := headers{}
		if c.found {
			req = headers{{"x-client-id", c.value}}
		}
		if d := f.Decide(req).Decision; d.Allowed || d.Reason != engine.ReasonAnonymous {
			t.Errorf("Decide(%q, %t) = %+v, want anonymous", c.value, c.found, d)
		}
	}
	// A lone client's share is the whole capacity; surrounding blanks are
	// not part of its id.
	clock.Advance(time.Second)
	admitted := 0
	for i := 0; i < 5; i++ {
		if f.Decide(headers{{"x-client-id", " alice\t"}}).Decision.Allowed {
			admitted++
		}
	}
	if admitted != 2 {
		t.Errorf("admitted %d of 5 over a capacity of 2", admitted)
	}
	if d := f.Decide(headers{{"x-client-id", "alice"}}).Decision; d.Allowed || d.Reason != engine.ReasonOverLimit {
		t.Errorf("the trimmed id is a different client: %+v", d)
	}
}

func TestFailSafe(t *testing.T) {
	cases := []struct {
		config string
		reject bool
	}{
		{`{"capacity": 1, "cycle": "1s"}`, false},
		{`{"capacity": 1, "cycle": "1s", "failure_mode_deny": true}`, true},
		{`{"capacity": 1, "cycle": "1s", "failure_mode_deny": true, "mode": "passthrough"}`, false},
	}
	for _, c := range cases {
		f, _ := mustFilter(t, c.config)
		d := f.FailSafe().Decision
		if d.Allowed == c.reject || d.Reason != engine.ReasonStoreFailure {
			t.Errorf("%s: FailSafe = %+v, want reject=%t for store_failure", c.config, d, c.reject)
		}
	}
}

func TestTickPeriod(t *testing.T) {
	for cycle, want := range map[string]time.Duration{"500ms": 100 * time.Millisecond, "5s": 500 * time.Millisecond, "1m": time.Second} {
		f, _ := mustFilter(t, `{"capacity": 1, "cycle": "`+cycle+`"}`)
		if got := f.TickPeriod(); got != want {
			t.Errorf("cycle %s: tick period %s, want %s", cycle, got, want)
		}
	}
}

// TestPlansDoNotAllocate holds the request path's promise: planning the
// headers of an admitted response or a rejection allocates nothing, for
// numbers of any size (strconv allocates above 99).
func TestPlansDoNotAllocate(t *testing.T) {
	d := Outcome{Decision: engine.Decision{Allowed: true, Limit: 123456, Remaining: 98765, Reset: 4321 * time.Second, Plan: 1 << 40}}
	over := d
	over.Decision.Allowed, over.Decision.Reason, over.Decision.RetryAfter = false, engine.ReasonOverLimit, 4321*time.Second
	for _, style := range []string{"x-ratelimit", "ietf"} {
		f, _ := mustFilter(t, `{"capacity": 1000000, "cycle": "1h", "debug_headers": true, "rate_limit_headers": "`+style+`"}`)
		if n := testing.AllocsPerRun(100, func() { f.ResponseHeaders(d) }); n != 0 {
			t.Errorf("%s: ResponseHeaders allocates %.1f times", style, n)
		}
		if n := testing.AllocsPerRun(100, func() { f.Reply(over) }); n != 0 {
			t.Errorf("%s: Reply allocates %.1f times", style, n)
		}
		// The values are the numbers, and a later plan leaves an earlier
		// one's strings alone only until it is made: check them first.
		if h := f.ResponseHeaders(d); h[0][1] == "" || h[len(h)-1][1] != "1099511627776" {
			t.Errorf("%s: headers %q", style, h)
		}
	}
}

// BenchmarkRequestPath is the filter's own work per request, natively
// (the compiled module adds host calls; tools/wasmhost measures those):
// a decision for one of 100 registered clients and its plan.
func BenchmarkRequestPath(b *testing.B) {
	for _, c := range []struct{ name, config string }{
		{"admitted", `{"capacity": 1099511627776, "cycle": "1h", "min_cycle": "1ms"}`},
		{"admitted_no_headers", `{"capacity": 1099511627776, "cycle": "1h", "min_cycle": "1ms", "headers_on_allowed": false}`},
		{"rejected", `{"capacity": 100, "cycle": "1h", "min_cycle": "1ms"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			f, clock := mustFilter(b, c.config)
			// Converted to the interface once, as the host's field-less
			// reader is: a slice in an interface would allocate.
			reqs := make([]Request, 100)
			for i := range reqs {
				reqs[i] = headers{{DefaultClientHeader, "client-" + strconv.Itoa(i)}}
			}
			for round := 0; round < 3; round++ { // register, then use up the shares
				for _, r := range reqs {
					f.Decide(r)
				}
				clock.Advance(time.Millisecond)
				f.Tick(nil)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				o := f.Decide(reqs[i%len(reqs)])
				if o.Decision.Allowed {
					f.ResponseHeaders(o)
				} else {
					f.Reply(o)
				}
			}
		})
	}
}

// headers is a request for tests: its headers in order, looked up by exact
// name as Envoy looks up lower-cased names. Its method does not allocate,
// so benchmarks measure the filter alone.
type headers [][2]string

func (h headers) Header(name string) (string, bool) {
	for _, kv := range h {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

func (h headers) HeaderCopies(name string) (string, int) { return HeaderCopies(h, name) }

// Property implements Request: headers carry no properties.
func (headers) Property(string) ([]byte, bool) { return nil, false }
