package e2e

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/plugin/filter"
)

// upstreamBody is what the demo upstream in envoy/envoy.yaml answers.
const upstreamBody = "hello from the demo upstream\n"

// result is one request's outcome, with the client-side times that bound
// when Envoy decided it.
type result struct {
	client string
	status int
	header http.Header
	body   string
	sent   time.Time
	recv   time.Time
	err    error
}

func (r result) reason() string { return r.header.Get("x-borrowcycle-reason") }

func (r result) String() string {
	if r.err != nil {
		return fmt.Sprintf("client %q: error %v", r.client, r.err)
	}
	return fmt.Sprintf("client %q: %d reason=%q body=%q headers=%v", r.client, r.status, r.reason(), r.body, r.header)
}

// newClient returns an HTTP client with its own single keep-alive
// connection. Envoy hands each connection to one worker, so giving every
// goroutine its own connection spreads a client's requests over workers.
func newClient() *http.Client {
	return &http.Client{
		Timeout: 15 * time.Second,
		Transport: &http.Transport{
			MaxIdleConnsPerHost: 1,
			MaxConnsPerHost:     1,
			DisableCompression:  true,
		},
	}
}

// get sends GET url with the client id in header (none when id is nil).
func get(c *http.Client, url, header string, id *string) result {
	r := result{}
	if id != nil {
		r.client = *id
	}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		r.err = err
		return r
	}
	if id != nil {
		req.Header.Set(header, *id)
	}
	return do(c, req, r)
}

// do sends req, filling r with what came back and when.
func do(c *http.Client, req *http.Request, r result) result {
	r.sent = time.Now()
	resp, err := c.Do(req)
	if err != nil {
		r.err, r.recv = err, time.Now()
		return r
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	r.recv = time.Now()
	r.status, r.header, r.body, r.err = resp.StatusCode, resp.Header, string(body), err
	return r
}

func (tg *target) get(c *http.Client, id string) result {
	return get(c, tg.url+"/", tg.settings.ClientHeader, &id)
}

// register sends requests as id until one is not a pending rejection,
// sleeping as retry-after says (a newcomer waits for the re-plan that
// registers it, at most one per min_cycle). Before each attempt it sends
// one request from every client in keep, so that clients registered
// earlier are not forgotten as idle (idle_cycles windows without demand)
// while later ones wait. It returns every response of id, the last one
// not pending.
func (tg *target) register(t *testing.T, c *http.Client, id string, keep ...string) []result {
	t.Helper()
	var out []result
	deadline := time.Now().Add(tg.settings.Engine.Cycle + 30*time.Second)
	for time.Now().Before(deadline) {
		for _, k := range keep {
			if r := tg.get(c, k); r.err != nil || (r.status != 200 && r.reason() != "over_limit") {
				t.Fatalf("keeping %s active while registering %s: %v", k, id, r)
			}
		}
		r := tg.get(c, id)
		out = append(out, r)
		if r.err != nil {
			t.Fatalf("register %s: %v", id, r.err)
		}
		if r.reason() != "pending" {
			return out
		}
		wait := 100 * time.Millisecond
		if s, err := strconv.Atoi(r.header.Get("retry-after")); err == nil && s > 0 {
			// retry-after is whole seconds rounded up; min_cycle may be
			// much shorter, so poll a few times within it.
			wait = min(time.Duration(s)*time.Second, max(tg.settings.Engine.MinCycle/2, 20*time.Millisecond))
		}
		time.Sleep(wait)
	}
	t.Fatalf("client %s still pending after %d attempts", id, len(out))
	return nil
}

// registerAll registers ids one after the other, in order (registration
// order is slot order, which breaks ties in the rounding of shares).
func (tg *target) registerAll(t *testing.T, ids []string) {
	t.Helper()
	c := newClient()
	for i, id := range ids {
		if r := tg.register(t, c, id, ids[:i]...); r[len(r)-1].status != 200 {
			t.Fatalf("client %s not admitted after registration: %v", id, r[len(r)-1])
		}
	}
}

// Bodies of the rejections, per docs/contract.md.
var rejectBodies = map[string]string{
	"over_limit":    "borrowcycle: over_limit: this client is over its share for now; retry after the retry-after delay",
	"pending":       "borrowcycle: pending: new client is being registered; retry after the retry-after delay",
	"table_full":    "borrowcycle: table_full: too many distinct clients",
	"store_failure": "borrowcycle: store_failure: limiter state unavailable",
	"contended":     "borrowcycle: contended: limiter state busy; retry after the retry-after delay",
}

func anonymousBody(header string) string {
	return fmt.Sprintf("borrowcycle: anonymous: missing or invalid client id header %q", header)
}

// bodyLine is the response body without its line ending: the contract
// says "one line" and does not fix whether the newline is sent.
func bodyLine(body string) string { return strings.TrimRight(body, "\r\n") }

func cycleSeconds(s settings) int64 { return int64(math.Ceil(s.Engine.Cycle.Seconds())) }

// checkAllowed checks an admitted response and returns its share (-1 when
// the response carries no rate-limit headers).
func checkAllowed(t *testing.T, s settings, r result) int64 {
	t.Helper()
	if r.err != nil || r.status != http.StatusOK || r.body != upstreamBody {
		t.Errorf("want 200 with the upstream body, got %v", r)
		return -1
	}
	if !s.HeadersOnAllowed || s.RateLimitHeaders == filter.StyleNone {
		checkNoRateLimitHeaders(t, r)
		return -1
	}
	return checkRateLimitHeaders(t, s, r)
}

// checkRejected checks a local rejection with a retry-after (every reason
// but anonymous) and returns its share.
func checkRejected(t *testing.T, s settings, r result, reason string) int64 {
	t.Helper()
	if r.err != nil || r.status != int(s.StatusCode) || r.reason() != reason {
		t.Errorf("want %d %s, got %v", s.StatusCode, reason, r)
		return -1
	}
	if got := bodyLine(r.body); got != rejectBodies[reason] {
		t.Errorf("%s body = %q, want %q", reason, got, rejectBodies[reason])
	}
	if strings.Count(strings.TrimRight(r.body, "\n"), "\n") != 0 {
		t.Errorf("%s body is not one line: %q", reason, r.body)
	}
	wantHeader(t, r, "content-type", "text/plain")
	wantHeader(t, r, "x-envoy-ratelimited", "true")
	ra, err := strconv.ParseInt(r.header.Get("retry-after"), 10, 64)
	if err != nil || ra < 1 {
		t.Errorf("%s retry-after = %q, want whole seconds >= 1", reason, r.header.Get("retry-after"))
	}
	if reason == "over_limit" && ra > cycleSeconds(s) {
		t.Errorf("over_limit retry-after = %d s, longer than the %s cycle", ra, s.Engine.Cycle)
	}
	if s.RateLimitHeaders == filter.StyleNone {
		checkNoRateLimitHeaders(t, r)
		return -1
	}
	share := checkRateLimitHeaders(t, s, r)
	if reason == "over_limit" {
		if rem := remaining(r, s); rem != 0 {
			t.Errorf("over_limit response says %d remaining, want 0", rem)
		}
	}
	return share
}

// checkAnonymous checks the rejection of a request without a usable id.
func checkAnonymous(t *testing.T, s settings, r result) {
	t.Helper()
	if r.err != nil || r.status != int(s.StatusCode) || r.reason() != "anonymous" {
		t.Errorf("want %d anonymous, got %v", s.StatusCode, r)
		return
	}
	if got, want := bodyLine(r.body), anonymousBody(s.ClientHeader); got != want {
		t.Errorf("anonymous body = %q, want %q", got, want)
	}
	for _, h := range []string{"retry-after", "x-envoy-ratelimited"} {
		if v := r.header.Values(h); len(v) != 0 {
			t.Errorf("anonymous rejection carries %s: %q, want none", h, v)
		}
	}
}

func wantHeader(t *testing.T, r result, name, want string) {
	t.Helper()
	if got := r.header.Values(name); len(got) != 1 || got[0] != want {
		t.Errorf("%s = %q, want exactly %q (%v)", name, got, want, r)
	}
}

var rateLimitHeaderNames = []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit-policy", "ratelimit"}

func checkNoRateLimitHeaders(t *testing.T, r result) {
	t.Helper()
	for _, h := range rateLimitHeaderNames {
		if v := r.header.Values(h); len(v) != 0 {
			t.Errorf("response carries %s: %q, want no rate-limit headers", h, v)
		}
	}
}

var (
	ietfPolicy = regexp.MustCompile(`^"([a-z0-9_]+)";q=(\d+);w=(\d+)$`)
	ietfState  = regexp.MustCompile(`^"([a-z0-9_]+)";r=(\d+);t=(\d+)$`)
)

// checkRateLimitHeaders checks the headers of the configured style and
// returns the share they announce.
func checkRateLimitHeaders(t *testing.T, s settings, r result) int64 {
	t.Helper()
	var share, rem, reset int64
	switch s.RateLimitHeaders {
	case filter.StyleXRateLimit:
		share = intHeader(t, r, "x-ratelimit-limit")
		rem = intHeader(t, r, "x-ratelimit-remaining")
		reset = intHeader(t, r, "x-ratelimit-reset")
		for _, h := range []string{"ratelimit-policy", "ratelimit"} {
			if v := r.header.Values(h); len(v) != 0 {
				t.Errorf("x-ratelimit style response also carries %s: %q", h, v)
			}
		}
	case filter.StyleIETF:
		p := ietfPolicy.FindStringSubmatch(r.header.Get("ratelimit-policy"))
		st := ietfState.FindStringSubmatch(r.header.Get("ratelimit"))
		if p == nil || st == nil {
			t.Errorf("ietf headers malformed: ratelimit-policy=%q ratelimit=%q", r.header.Get("ratelimit-policy"), r.header.Get("ratelimit"))
			return -1
		}
		if p[1] != s.Name || st[1] != s.Name {
			t.Errorf("ietf headers name %q/%q, want %q", p[1], st[1], s.Name)
		}
		if w := atoi(p[3]); w != cycleSeconds(s) {
			t.Errorf("ratelimit-policy w=%d, want the cycle %d s", w, cycleSeconds(s))
		}
		share, rem, reset = atoi(p[2]), atoi(st[2]), atoi(st[3])
		for _, h := range []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"} {
			if v := r.header.Values(h); len(v) != 0 {
				t.Errorf("ietf style response also carries %s: %q", h, v)
			}
		}
	default:
		t.Fatalf("unknown header style %s", s.RateLimitHeaders)
	}
	if share < 0 || share > s.Engine.Capacity {
		t.Errorf("share %d outside [0, capacity %d]", share, s.Engine.Capacity)
	}
	if rem < 0 || rem > share {
		t.Errorf("remaining %d outside [0, share %d]", rem, share)
	}
	if reset < 0 || reset > cycleSeconds(s) {
		t.Errorf("reset %d s outside [0, cycle %d s]", reset, cycleSeconds(s))
	}
	return share
}

func remaining(r result, s settings) int64 {
	if s.RateLimitHeaders == filter.StyleIETF {
		if m := ietfState.FindStringSubmatch(r.header.Get("ratelimit")); m != nil {
			return atoi(m[2])
		}
		return -1
	}
	v, err := strconv.ParseInt(r.header.Get("x-ratelimit-remaining"), 10, 64)
	if err != nil {
		return -1
	}
	return v
}

func intHeader(t *testing.T, r result, name string) int64 {
	t.Helper()
	v := r.header.Values(name)
	if len(v) != 1 {
		t.Errorf("%s = %q, want one integer", name, v)
		return -1
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil {
		t.Errorf("%s = %q, want an integer", name, v[0])
		return -1
	}
	return n
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// cycleOf returns the x-borrowcycle-plan header (debug_headers).
func cycleOf(t *testing.T, r result) string {
	t.Helper()
	c := r.header.Get("x-borrowcycle-plan")
	if c == "" {
		t.Fatalf("response without x-borrowcycle-plan although debug_headers is on: %v", r)
	}
	return c
}

// fetchStats reads the admin /stats text output as name -> value, for the
// counters and gauges (histogram lines are skipped).
func fetchStats(admin string) (map[string]int64, error) {
	body, err := fetchText(admin + "/stats")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(val, 10, 64); err == nil {
			out[name] = n
		}
	}
	return out, sc.Err()
}

func fetchText(url string) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, raw)
	}
	return string(raw), nil
}

// promSample is one Prometheus series and value.
type promSample struct {
	name   string
	labels string // the text between the braces, as Envoy prints it
	value  float64
}

// fetchPrometheus reads /stats/prometheus, keyed by `name{labels}`, and the
// # TYPE of each metric name.
func fetchPrometheus(admin string) (map[string]promSample, map[string]string, error) {
	body, err := fetchText(admin + "/stats/prometheus")
	if err != nil {
		return nil, nil, err
	}
	samples, types := map[string]promSample{}, map[string]string{}
	line := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} (\S+)$`)
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		text := sc.Text()
		if f := strings.Fields(text); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
			continue
		}
		m := line.FindStringSubmatch(text)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		samples[m[1]+"{"+m[2]+"}"] = promSample{name: m[1], labels: m[2], value: v}
	}
	return samples, types, sc.Err()
}
