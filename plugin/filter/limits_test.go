package filter

import (
	"strings"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// several is the contract's example: search, export at cost 5, the health
// check excluded (no limit matches it), and everything else under default.
const several = `{"cycle": "10s", "capacity": 100, "client_header": "x-tenant",
	"limits": [
		{"name": "health", "capacity": 1, "match": {"path_exact": "/healthz", "headers": {"x-probe": "*"}}},
		{"name": "search", "match": {"path_prefix": "/search", "methods": ["GET", "HEAD"]}},
		{"name": "export", "capacity": 20, "cost": 5, "match": {"path_prefix": "/export"}},
		{"name": "writes", "match": {"methods": ["POST", "PUT"], "headers": {"x-env": "prod"}}}
	]}`

func TestMatchFirstMatchDecides(t *testing.T) {
	f, _ := mustFilter(t, several)
	cases := []struct {
		name string
		req  headers
		want int
	}{
		{"search GET", headers{{":path", "/search"}, {":method", "GET"}}, 1},
		{"search with a query string", headers{{":path", "/search?q=a/export"}, {":method", "HEAD"}}, 1},
		{"search prefix is a string prefix", headers{{":path", "/searchable"}, {":method", "GET"}}, 1},
		{"search POST falls to writes", headers{{":path", "/search"}, {":method", "POST"}, {"x-env", "prod"}}, 3},
		{"search POST elsewhere matches nothing", headers{{":path", "/search"}, {":method", "POST"}, {"x-env", "dev"}}, -1},
		{"export any method", headers{{":path", "/export/all"}, {":method", "DELETE"}}, 2},
		{"the query string is not the path", headers{{":path", "/?p=/export"}, {":method", "GET"}}, -1},
		{"health with the probe header", headers{{":path", "/healthz"}, {":method", "GET"}, {"x-probe", ""}}, 0},
		{"health without it", headers{{":path", "/healthz"}, {":method", "GET"}}, -1},
		{"health exact, not prefix", headers{{":path", "/healthz/deep"}, {"x-probe", "1"}}, -1},
		{"methods are case-sensitive", headers{{":path", "/search"}, {":method", "get"}}, -1},
		{"writes needs the exact value", headers{{":path", "/x"}, {":method", "PUT"}, {"x-env", "Prod"}}, -1},
		{"no pseudo-headers at all", headers{}, -1},
	}
	for _, c := range cases {
		if got := f.Match(c.req); got != c.want {
			t.Errorf("%s: Match = %d, want %d", c.name, got, c.want)
		}
	}
}

// countingRequest records which headers the filter read.
type countingRequest struct {
	headers
	read []string
}

func (r *countingRequest) Header(name string) (string, bool) {
	r.read = append(r.read, name)
	return r.headers.Header(name)
}

func (r *countingRequest) HeaderCopies(name string) (string, int) {
	r.read = append(r.read, name)
	return r.headers.HeaderCopies(name)
}

func TestMatchReadsOnlyWhatLimitsNeed(t *testing.T) {
	cases := []struct {
		config string
		want   string
	}{
		{`{"capacity": 5, "cycle": "1s"}`, "x-client-id"},
		{`{"capacity": 5, "cycle": "1s", "match": {"methods": ["GET"]}}`, ":method x-client-id"},
		{`{"capacity": 5, "cycle": "1s", "limits": [{"name": "a", "match": {"path_prefix": "/a"}}, {"name": "b", "match": {"path_exact": "/"}}]}`, ":path x-client-id"},
	}
	for _, c := range cases {
		f, _ := mustFilter(t, c.config)
		req := &countingRequest{headers: headers{{":path", "/"}, {":method", "GET"}, {"x-client-id", "a"}}}
		f.Decide(req)
		if got := strings.Join(req.read, " "); got != c.want {
			t.Errorf("%s: read %q, want %q", c.config, got, c.want)
		}
	}
}

func TestLimitsInheritTopLevelFields(t *testing.T) {
	s, err := ParseSettings([]byte(several))
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		name     string
		capacity int64
		cost     int64
		prefix   string
	}
	for i, w := range []want{{"health", 1, 1, "borrowcycle/health"}, {"search", 100, 1, "borrowcycle/search"},
		{"export", 20, 5, "borrowcycle/export"}, {"writes", 100, 1, "borrowcycle/writes"}} {
		c := s.Limits[i]
		if c.Name != w.name || c.Engine.Capacity != w.capacity || c.Cost != w.cost || c.Engine.KeyPrefix != w.prefix ||
			c.ClientHeader != "x-tenant" || c.Engine.Cycle != 10*time.Second {
			t.Errorf("limits[%d] = name %q capacity %d cost %d key %q header %q cycle %s, want %+v",
				i, c.Name, c.Engine.Capacity, c.Cost, c.Engine.KeyPrefix, c.ClientHeader, c.Engine.Cycle, w)
		}
	}
	// The single-limit form is one limit that matches every request.
	s, err = ParseSettings([]byte(`{"capacity": 3, "cycle": "1s"}`))
	if err != nil || len(s.Limits) != 1 || !s.Limits[0].Match.IsZero() || s.Limits[0].Cost != 1 || s.Limits[0].Name != "default" {
		t.Errorf("single-limit form = %+v, %v", s, err)
	}
}

func TestLimitsValidation(t *testing.T) {
	many := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`{"name": "l` + strings.Repeat("x", i) + `", "match": {"path_prefix": "/"}}`)
		}
		return b.String()
	}
	manyHeaders := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`"h` + strings.Repeat("x", i) + `": "*"`)
		}
		return b.String()
	}
	top := `"capacity": 10, "cycle": "1s", `
	cases := []struct{ config, want string }{
		{`{` + top + `"limits": {}}`, `limits: must be an array, got an object`},
		{`{` + top + `"limits": []}`, `limits: must hold 1 to 64 limits, got 0`},
		{`{` + top + `"limits": [` + many(65) + `]}`, `limits: must hold 1 to 64 limits, got 65`},
		{`{` + top + `"name": "x", "limits": [{"name": "a"}]}`, `name: not allowed at the top level with limits: each limit gives its own`},
		{`{` + top + `"match": {"methods": ["GET"]}, "limits": [{"name": "a"}]}`, `match: not allowed at the top level with limits: each limit gives its own`},
		{`{` + top + `"limits": [{"name": "a"}, 3]}`, `limits[1]: must be an object, got a number`},
		{`{` + top + `"limits": [{"match": {"path_exact": "/"}}]}`, `limits[0].name: required: each limit needs its own name`},
		{`{` + top + `"limits": [{"name": "a", "limits": []}]}`, `limits[0].limits: unknown field`},
		{`{` + top + `"limits": [{"name": "a", "capacityy": 3}]}`, `limits[0].capacityy: unknown field`},
		{`{"cycle": "1s", "limits": [{"name": "a"}]}`, `limits[0].capacity: required`},
		{`{` + top + `"limits": [{"name": "a", "capacity": 0}]}`, `limits[0].capacity: must be an integer in [1, 1099511627776], got 0`},
		{`{"capacity": 0, "cycle": "1s", "limits": [{"name": "a"}]}`, `capacity: must be an integer in [1, 1099511627776], got 0`},
		{`{` + top + `"limits": [{"name": "a", "match": {"path_prefix": "/"}}, {"name": "a", "match": {"path_prefix": "/b"}}]}`, `limits[1].name: duplicate of limits[0].name "a"`},
		{`{` + top + `"limits": [{"name": "a"}, {"name": "b", "match": {"path_prefix": "/b"}}]}`, `limits[1]: unreachable: limits[0] has no match, so it decides every request`},
		{`{` + top + `"limits": [{"name": "a", "match": {}}]}`, `limits[0].match: must give at least one of path_prefix, path_exact, methods, headers; omit match to match every request`},
		{`{` + top + `"limits": [{"name": "a", "match": []}]}`, `limits[0].match: must be an object, got an array`},
		{`{` + top + `"limits": [{"name": "a", "match": {"path": "/"}}]}`, `limits[0].match.path: unknown field`},
		{`{` + top + `"limits": [{"name": "a", "match": {"path_prefix": "search"}}]}`, `limits[0].match.path_prefix: must be a path starting with "/" of at most 1024 bytes, got "search"`},
		{`{` + top + `"limits": [{"name": "a", "match": {"path_exact": "/s?q=1"}}]}`, `limits[0].match.path_exact: must not contain "?" or "#": paths are matched without their query string, got "/s?q=1"`},
		{`{` + top + `"limits": [{"name": "a", "match": {"methods": []}}]}`, `limits[0].match.methods: must list at least one method`},
		{`{` + top + `"limits": [{"name": "a", "match": {"methods": "GET"}}]}`, `limits[0].match.methods: must be an array, got a string`},
		{`{` + top + `"limits": [{"name": "a", "match": {"path_prefix": "/"}}, {"name": "b", "match": {"methods": ["get"]}}]}`, `limits[1].match.methods[0]: must be an upper-case HTTP method of 1 to 32 token characters, got "get"`},
		{`{` + top + `"limits": [{"name": "a", "match": {"methods": ["GET", "GET"]}}]}`, `limits[0].match.methods[1]: duplicate of limits[0].match.methods[0] "GET"`},
		{`{` + top + `"limits": [{"name": "a", "match": {"methods": [1]}}]}`, `limits[0].match.methods[0]: must be a string, got a number`},
		{`{` + top + `"limits": [{"name": "a", "match": {"headers": {}}}]}`, `limits[0].match.headers: must hold 1 to 16 headers, got 0`},
		{`{` + top + `"limits": [{"name": "a", "match": {"headers": {` + manyHeaders(17) + `}}}]}`, `limits[0].match.headers: must hold 1 to 16 headers, got 17`},
		{`{` + top + `"limits": [{"name": "a", "match": {"headers": {"x y": "1"}}}]}`, `limits[0].match.headers.x y: must be an HTTP header name of 1 to 256 token characters, or ":authority"`},
		{`{` + top + `"limits": [{"name": "a", "match": {"headers": {"X-A": "1", "x-a": "2"}}}]}`, `limits[0].match.headers.x-a: duplicate header (names are case-insensitive)`},
		{`{` + top + `"limits": [{"name": "a", "match": {"headers": {"x-a": ""}}}]}`, `limits[0].match.headers.x-a: must be "*" or a value of 1 to 1024 bytes`},
		{`{` + top + `"limits": [{"name": "a", "match": {"headers": {"x-a": true}}}]}`, `limits[0].match.headers.x-a: must be a string, got a boolean`},
		{`{` + top + `"limits": [{"name": "a", "cost": 0}]}`, `limits[0].cost: must be an integer in [1, 1048576], got 0`},
		{`{` + top + `"limits": [{"name": "a", "cost": 11}]}`, `limits[0].cost: must not exceed capacity (10), got 11`},
		{`{` + top + `"cost": 11, "limits": [{"name": "a"}]}`, `cost: must not exceed capacity (10), got 11`},
		{`{"capacity": 100, "cycle": "1m", "burst": 0.1, "cost": 20}`, `cost: must not exceed the units pacing lets through at once (10, from burst and capacity), got 20`},
		{`{"windows": [{"capacity": 100, "cycle": "1m"}, {"capacity": 10, "cycle": "1s"}], "burst": 0.1, "cost": 5}`, `cost: must not exceed the units pacing lets through at once (2, from burst and capacity), got 5`},
		{`{` + top + `"limits": [{"name": "a", "min_cycle": "2s"}]}`, `limits[0].min_cycle: must be in (0s, 1s], got 2s`},
		{`{` + top + `"unlimited": true}`, `unlimited: unknown field`},
		{`{` + top + `"limits": [{"name": "h", "unlimited": true, "cost": 2, "match": {"path_exact": "/h"}}, {"name": "d"}]}`, `limits[0].cost: not allowed with unlimited: an unlimited rule has only name and match`},
		{`{` + top + `"limits": [{"name": "h", "unlimited": 1}]}`, `limits[0].unlimited: must be a boolean, got a number`},
		{`{` + top + `"limits": [{"name": "h", "unlimited": true}]}`, `limits: every limit is unlimited: at least one must limit`},
		{`{` + top + `"log_client_id": "yes"}`, `log_client_id: must be a boolean, got a string`},
		{`{` + top + `"access_log": 0}`, `access_log: must be a boolean, got a number`},
		{`{` + top + `"match": {"methods": ["GET"]}, "cost": 2.5}`, `cost: must be an integer in [1, 1048576], got 2.5`},
	}
	for _, c := range cases {
		_, err := ParseSettings([]byte(c.config))
		if err == nil {
			t.Errorf("%s: accepted, want %q", c.config, c.want)
			continue
		}
		if err.Error() != c.want {
			t.Errorf("%.80s:\n got  %q\n want %q", c.config, err.Error(), c.want)
		}
	}
}

func TestUnlimitedRule(t *testing.T) {
	f, clock := mustFilter(t, `{"capacity": 1, "cycle": "10s", "limits": [
		{"name": "health", "unlimited": true, "match": {"path_exact": "/healthz"}},
		{"name": "default"}]}`)
	clock.Advance(time.Second)
	if p := f.Settings().Primary(); p != 1 {
		t.Errorf("primary limit = %d, want 1 (the first that limits)", p)
	}
	health := headers{{":path", "/healthz?full=1"}, {"x-client-id", "probe"}}
	for range 5 {
		if o := f.Decide(health); o.Matched() {
			t.Fatalf("health check = %+v, want it to pass unlimited", o)
		}
	}
	other := headers{{":path", "/health"}, {"x-client-id", "probe"}}
	if o := f.Decide(other); o.Limit != 1 || !o.Decision.Allowed {
		t.Fatalf("first other request = %+v, want admitted by default", o)
	}
	if o := f.Decide(other); o.Decision.Allowed {
		t.Errorf("second other request over a capacity of 1 admitted: %+v", o)
	}
	if o := f.FailSafe(); o.Limit != 1 {
		t.Errorf("FailSafe speaks for limit %d, want the primary 1", o.Limit)
	}
}

func TestParseConfigWantsOneLimit(t *testing.T) {
	_, err := ParseConfig([]byte(several))
	if err == nil || err.Error() != "limits: this caller runs exactly one limit, got 4" {
		t.Errorf("ParseConfig of four limits: %v", err)
	}
}

// TestCostChargesUnits: a request of cost c takes c units of the client's
// share (engine.Limiter.AdmitNAt), or is rejected with nothing taken.
func TestCostChargesUnits(t *testing.T) {
	f, clock := mustFilter(t, `{"capacity": 7, "cycle": "10s", "limits": [
		{"name": "export", "cost": 5, "match": {"path_prefix": "/export"}},
		{"name": "search", "match": {"path_prefix": "/search"}}]}`)
	clock.Advance(time.Second)
	export := headers{{":path", "/export"}, {"x-client-id", "alice"}}
	o := f.Decide(export)
	if o.Limit != 0 || !o.Decision.Allowed || o.Decision.Limit != 7 || o.Decision.Remaining != 2 {
		t.Fatalf("first export = %+v, want admitted with 2 of 7 left", o)
	}
	if h := f.ResponseHeaders(o); len(h) != 3 || h[1] != [2]string{"x-ratelimit-remaining", "2"} {
		t.Errorf("headers after a cost-5 request: %q", h)
	}
	o = f.Decide(export)
	if o.Decision.Allowed || o.Decision.Reason != engine.ReasonOverLimit {
		t.Fatalf("second export = %+v, want over_limit with 2 units left for a cost of 5", o)
	}
	if o.Decision.Remaining != 0 {
		t.Errorf("rejected cost-5 request says remaining %d: a 429 never says there is room", o.Decision.Remaining)
	}
	r := f.Reply(o)
	// The clock starts on a window boundary and moved 1 s: the aligned
	// 10 s window ends in 9 s.
	if r.Headers[2] != [2]string{"retry-after", "9"} {
		t.Errorf("retry-after = %q, want the end of the aligned window", r.Headers[2])
	}
	// Limits are separate pools: search is untouched by export.
	o = f.Decide(headers{{":path", "/search"}, {"x-client-id", "alice"}})
	if o.Limit != 1 || !o.Decision.Allowed {
		t.Errorf("search after export's pool ran dry = %+v, want admitted", o)
	}
}

func TestAccessLogRecord(t *testing.T) {
	f, clock := mustFilter(t, `{"capacity": 2, "cycle": "10s", "limits": [
		{"name": "search", "match": {"path_prefix": "/search"}},
		{"name": "raw", "log_client_id": true, "mode": "passthrough"}]}`)
	clock.Advance(time.Second)
	hash := func(id string) string { return string(appendHex64(nil, engine.HashID(id))) }
	cases := []struct {
		req  headers
		want string
	}{
		{headers{{":path", "/search"}, {"x-client-id", "alice"}}, "limit=search action=allowed reason=ok share=2 remaining=1 client=" + hash("alice")},
		{headers{{":path", "/search"}, {"x-client-id", "alice"}}, "limit=search action=allowed reason=ok share=2 remaining=0 client=" + hash("alice")},
		{headers{{":path", "/search"}, {"x-client-id", "alice"}}, "limit=search action=rejected reason=over_limit share=2 remaining=0 client=" + hash("alice")},
		{headers{{":path", "/search"}}, "limit=search action=rejected reason=anonymous share=0 remaining=0 client=-"},
		{headers{{":path", "/"}, {"x-client-id", "bob 100%\"\x01é"}},
			"limit=raw action=allowed reason=ok share=2 remaining=1 client=" + hash("bob 100%\"\x01é") + " id=bob%20100%25%22%01%c3%a9"},
	}
	for i, c := range cases {
		if got := string(f.AccessLog(f.Decide(c.req))); got != c.want {
			t.Errorf("request %d:\n got  %q\n want %q", i, got, c.want)
		}
	}
	if got := f.AccessLog(Outcome{Limit: -1}); got != nil {
		t.Errorf("unmatched request has record %q, want none", got)
	}
}

// access_log false is inherited like the other fields, and a limit may
// turn it back on: only its decisions get a record.
func TestAccessLogOff(t *testing.T) {
	f, clock := mustFilter(t, `{"capacity": 2, "cycle": "10s", "access_log": false, "limits": [
		{"name": "search", "match": {"path_prefix": "/search"}},
		{"name": "rest", "access_log": true}]}`)
	clock.Advance(time.Second)
	if got := f.AccessLog(f.Decide(headers{{":path", "/search"}, {"x-client-id", "alice"}})); got != nil {
		t.Errorf("search (access_log off) has record %q, want none", got)
	}
	if got := string(f.AccessLog(f.Decide(headers{{":path", "/"}, {"x-client-id", "alice"}}))); !strings.HasPrefix(got, "limit=rest action=allowed") {
		t.Errorf("rest (access_log on) has record %q, want limit=rest's", got)
	}
}
