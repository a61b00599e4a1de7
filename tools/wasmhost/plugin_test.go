package wasmhost

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/borrowcycle/borrowcycle/internal/capcheck"
)

// These tests run the real plugin (build/borrowcycle.wasm) against
// docs/contract.md, on several VMs as Envoy's workers would.

// pluginHost starts the plugin on vms VMs with the given configuration
// fields, debug headers on, and fails the test at the end if the plugin
// called an import the host only stubs.
func pluginHost(t *testing.T, vms int, cfg map[string]any) *Host {
	t.Helper()
	cfg["debug_headers"] = true
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, pluginWasm, Options{VMs: vms, PluginConfig: raw, LogLevel: LogWarn})
	t.Cleanup(func() {
		if calls := h.StubCalls(); len(calls) > 0 {
			t.Errorf("plugin called unimplemented imports: %v", calls)
		}
	})
	return h
}

func TestPluginImportsSatisfied(t *testing.T) {
	checkImports(t, loadModule(t, pluginWasm))
}

// rejectionBodies are the contract's one-line bodies (each sent with a
// trailing newline).
var rejectionBodies = map[string]string{
	"over_limit":    "borrowcycle: over_limit: this client is over its share for now; retry after the retry-after delay",
	"pending":       "borrowcycle: pending: new client is being registered; retry after the retry-after delay",
	"table_full":    "borrowcycle: table_full: too many distinct clients",
	"store_failure": "borrowcycle: store_failure: limiter state unavailable",
	"anonymous":     `borrowcycle: anonymous: missing or invalid client id header "x-client-id"`,
}

// checkResponse checks one response against the contract and returns its
// outcome: "allowed" or the rejection reason.
func checkResponse(t *testing.T, r Result) string {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("request failed: %v", r.Err)
	}
	for _, name := range []string{"x-borrowcycle-plan", "x-ratelimit-limit", "x-ratelimit-remaining",
		"x-ratelimit-reset", "x-borrowcycle-reason", "retry-after", "x-envoy-ratelimited", "content-type"} {
		if n := len(r.Values(name)); n > 1 {
			t.Fatalf("%s appears %d times: %v", name, n, r)
		}
	}
	if r.Header("x-borrowcycle-plan") == "" {
		t.Fatalf("no x-borrowcycle-plan with debug_headers: %v", r)
	}
	if r.Continued() {
		if r.Header("x-ratelimit-limit") == "" || r.Header("x-borrowcycle-reason") != "" {
			t.Fatalf("admitted response headers: %v", r)
		}
		return "allowed"
	}
	reason := r.Header("x-borrowcycle-reason")
	if r.Status != 429 || r.Body != rejectionBodies[reason]+"\n" || r.Header("content-type") != "text/plain" {
		t.Fatalf("rejection does not follow the contract: %v", r)
	}
	if reason == "anonymous" {
		if r.Header("retry-after") != "" || r.Header("x-envoy-ratelimited") != "" {
			t.Fatalf("anonymous rejection with retry headers: %v", r)
		}
		return reason
	}
	if ra, err := strconv.Atoi(r.Header("retry-after")); err != nil || ra < 1 || r.Header("x-envoy-ratelimited") != "true" {
		t.Fatalf("rejection retry headers: %v", r)
	}
	return reason
}

// ledger tallies what clients saw. Every admission goes to a
// capcheck.Checker, attributed to the aligned window of the host clock's
// time (the clock stands still while requests are driven, so that is when
// the plugin decided) and to the share period the plugin reports in
// x-borrowcycle-plan.
type ledger struct {
	clock    *Clock
	cycle    time.Duration
	cap      *capcheck.Checker
	mu       sync.Mutex
	cycles   map[string]int            // cycle → admitted
	share    map[string]map[string]int // cycle → client → x-ratelimit-limit
	outcomes map[string]int            // allowed or reason → count
}

// newLedger returns a ledger for a plugin configured with capacity per
// cycle, running on h.
func newLedger(h *Host, capacity int64, cycle time.Duration) *ledger {
	return &ledger{clock: h.Clock(), cycle: cycle, cap: capcheck.New(capacity),
		cycles: map[string]int{}, share: map[string]map[string]int{}, outcomes: map[string]int{}}
}

func (l *ledger) record(t *testing.T, client string, r Result) {
	outcome := checkResponse(t, r)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.outcomes[outcome]++
	cycle := r.Header("x-borrowcycle-plan")
	var share int
	if limit := r.Header("x-ratelimit-limit"); limit != "" && (outcome == "allowed" || outcome == "over_limit") {
		var err error
		if share, err = strconv.Atoi(limit); err != nil {
			t.Fatalf("x-ratelimit-limit %q", limit)
		}
		if l.share[cycle] == nil {
			l.share[cycle] = map[string]int{}
		}
		if prev, ok := l.share[cycle][client]; ok && prev != share {
			t.Fatalf("cycle %s client %s: share %d then %d", cycle, client, prev, share)
		}
		l.share[cycle][client] = share
	}
	if outcome == "allowed" {
		period, err := strconv.ParseUint(cycle, 10, 64)
		if err != nil {
			t.Fatalf("x-borrowcycle-plan %q: %v", cycle, err)
		}
		window, _, _ := engine.WindowAt(l.clock.Now(), l.cycle, 0)
		l.cycles[cycle]++
		l.cap.Admit(capcheck.Admission{Window: window, Period: period, Client: client, Share: int64(share)})
	}
}

// checkShares asserts the limiter's promise: no aligned window admits more
// than the capacity, no client more than its share in a share period, and
// the shares announced in one cycle add up to no more than the capacity.
func (l *ledger) checkShares(t *testing.T) {
	t.Helper()
	l.cap.Check(t)
	if w, n := l.cap.WorstWindow(); n > 0 {
		t.Logf("worst aligned window %d: %d admitted, capacity %d", w, n, l.capacity())
	}
	for cycle, byClient := range l.share {
		shares := 0
		for _, s := range byClient {
			shares += s
		}
		if int64(shares) > l.capacity() {
			t.Errorf("cycle %s: shares sum %d, capacity %d", cycle, shares, l.capacity())
		}
	}
}

func (l *ledger) capacity() int64 { return l.cap.Capacity() }

func TestPluginSharesHoldAcrossVMs(t *testing.T) {
	for _, vms := range []int{2, 4, 8} {
		t.Run(fmt.Sprintf("%dVMs", vms), func(t *testing.T) {
			const capacity = 60
			h := pluginHost(t, vms, map[string]any{"capacity": capacity, "cycle": "2s", "min_cycle": "200ms"})
			// Requests per client per 250 ms step: two heavy clients, a
			// medium one and light ones, 8 steps to a cycle.
			demand := []int{12, 8, 4, 2, 1, 1}
			var reqs [][][2]string
			var clients []string
			for c, n := range demand {
				for i := 0; i < n; i++ {
					clients = append(clients, "client-"+strconv.Itoa(c))
					reqs = append(reqs, Request("/", clients[len(clients)-1]))
				}
			}
			l := newLedger(h, capacity, 2*time.Second)
			for step := 0; step < 40; step++ {
				results := h.DriveAll(reqs, Seeded(vms, uint64(step)))
				for i, r := range results {
					l.record(t, clients[i], r)
				}
				h.Clock().Advance(250 * time.Millisecond)
				if err := h.TickAll(); err != nil {
					t.Fatal(err)
				}
			}
			l.checkShares(t)
			if len(l.cycles) < 4 || l.outcomes["over_limit"] == 0 {
				t.Fatalf("load did not exercise the limit: %d cycles, outcomes %v", len(l.cycles), l.outcomes)
			}
			t.Logf("%d cycles, %d windows, outcomes %v", len(l.cycles), len(l.cap.Windows()), l.outcomes)
		})
	}
}

// The product's worked example through the plugin on four VMs: the shares
// of each cycle are engine.Allocate of the previous cycle's demand, which
// the VMs counted separately and the host's shared data aggregated.
func TestPluginBorrowingMatchesAllocate(t *testing.T) {
	const capacity, reservation = 40, 0.1
	h := pluginHost(t, 4, map[string]any{"capacity": capacity, "cycle": "10s", "min_cycle": "1s",
		"reservation": reservation, "idle_cycles": 5})
	clients := []string{"A", "B", "C", "D"}
	registerAll(t, h, clients)

	demands := [][]int64{{2, 15, 10, 10}, {3, 15, 50, 10}, {0, 15, 50, 5}}
	var prev []int64
	for row, demand := range demands {
		l := newLedger(h, capacity, 10*time.Second)
		h.Clock().Advance(time.Second)
		sendDemand(t, h, l, clients, demand, uint64(row))
		if len(l.cycles) != 1 {
			t.Fatalf("row %d spans cycles %v", row, l.cycles)
		}
		l.checkShares(t)
		if prev != nil {
			checkShareHeaders(t, l, clients, demand, engine.Allocate(capacity, reservation, prev))
		}
		prev = demand
		finishCycle(t, h, 9*time.Second)
	}
	// One request each reads the shares of the cycle after the last row.
	l := newLedger(h, capacity, 10*time.Second)
	sendDemand(t, h, l, clients, []int64{1, 1, 1, 1}, 99)
	want := engine.Allocate(capacity, reservation, prev)
	checkShareHeaders(t, l, clients, []int64{1, 1, 1, 1}, want)
	t.Logf("final shares %v", want)
}

// registerAll sends one request per client per second until each has been
// admitted once, then waits out the window that registration re-planned, so
// the next window is a full one starting now.
func registerAll(t *testing.T, h *Host, clients []string) {
	t.Helper()
	admitted := map[string]bool{}
	var last Result
	for step := 0; len(admitted) < len(clients); step++ {
		if step > 20 {
			t.Fatalf("clients not registered after 20 s: %v", admitted)
		}
		for i, c := range clients {
			if !admitted[c] {
				r := h.Do(i%h.VMs(), Request("/", c))
				if checkResponse(t, r) == "allowed" {
					admitted[c], last = true, r
				}
			}
		}
		h.Clock().Advance(time.Second)
		if err := h.TickAll(); err != nil {
			t.Fatal(err)
		}
	}
	reset, err := strconv.Atoi(last.Header("x-ratelimit-reset"))
	if err != nil {
		t.Fatalf("x-ratelimit-reset: %v", last)
	}
	finishCycle(t, h, time.Duration(reset)*time.Second-time.Second)
}

// finishCycle lets the workers flush their counts with a tick, then moves
// to the window's end and ticks again, which plans the next window.
func finishCycle(t *testing.T, h *Host, untilDeadline time.Duration) {
	t.Helper()
	for _, d := range []time.Duration{untilDeadline - 500*time.Millisecond, 500 * time.Millisecond} {
		h.Clock().Advance(d)
		if err := h.TickAll(); err != nil {
			t.Fatal(err)
		}
	}
}

// sendDemand sends demand[i] requests from clients[i], concurrently over
// the VMs.
func sendDemand(t *testing.T, h *Host, l *ledger, clients []string, demand []int64, seed uint64) {
	t.Helper()
	var who []string
	for i, n := range demand {
		for j := int64(0); j < n; j++ {
			who = append(who, clients[i])
		}
	}
	h.Drive(len(who), Seeded(h.VMs(), seed), func(i int) [][2]string { return Request("/", who[i]) },
		func(i int, r Result) { l.record(t, who[i], r) })
}

func checkShareHeaders(t *testing.T, l *ledger, clients []string, demand, want []int64) {
	t.Helper()
	for _, byClient := range l.share {
		for i, c := range clients {
			if demand[i] == 0 {
				continue // no request, no header to read
			}
			if got := byClient[c]; int64(got) != want[i] {
				t.Errorf("client %s share %d, want %d (engine.Allocate: %v, seen %v)", c, got, want[i], want, byClient)
			}
		}
	}
}

func TestPluginBadConfigFailsOnCanary(t *testing.T) {
	for field, cfg := range map[string]string{
		"capacity": `{"capacity":0,"cycle":"10s"}`,
		"cycle":    `{"capacity":10,"cycle":"forever"}`,
		"bogus":    `{"capacity":10,"cycle":"10s","bogus":true}`,
	} {
		_, err := New(context.Background(), loadModule(t, pluginWasm), Options{VMs: 2, PluginConfig: []byte(cfg)})
		if err == nil {
			t.Fatalf("%s started", cfg)
		}
		want := "borrowcycle: invalid configuration: " + field
		if !strings.Contains(err.Error(), "canary") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q, want the canary to report %q", cfg, err, want)
		}
	}
}

func TestPluginTrappedVMIsIsolated(t *testing.T) {
	h := pluginHost(t, 3, map[string]any{"capacity": 1000, "cycle": "10s"})
	if r := h.Do(1, Request("/", "a")); !r.Continued() {
		t.Fatalf("before the trap: %v", r)
	}
	if _, err := h.VM(1).Call("proxy_on_request_headers", 123456, 0, 1); err == nil {
		t.Fatal("garbage context id did not trap")
	}
	// Client a is registered, and the capacity is ample: every request a
	// healthy VM gets must be admitted.
	healthy := driveAroundTrap(t, h, 90, func(r Result) bool { return checkResponse(t, r) == "allowed" })
	if healthy != 60 {
		t.Fatalf("healthy VMs admitted %d of 60", healthy)
	}
}

// The counters Envoy would export equal what the clients saw, summed over
// every VM.
func TestPluginMetricsMatchClients(t *testing.T) {
	h := pluginHost(t, 4, map[string]any{"capacity": 30, "cycle": "1s", "min_cycle": "100ms", "max_clients": 5})
	l := newLedger(h, 30, time.Second)
	var mu sync.Mutex
	for step := 0; step < 12; step++ {
		// Ten named clients for five table slots, plus anonymous requests.
		h.Drive(80, Seeded(4, uint64(step)), func(i int) [][2]string {
			if i%8 == 0 {
				return Request("/", "")
			}
			return Request("/", "m"+strconv.Itoa(i%10))
		}, func(i int, r Result) {
			mu.Lock()
			defer mu.Unlock()
			l.record(t, "m"+strconv.Itoa(i%10), r)
		})
		h.Clock().Advance(250 * time.Millisecond)
		if err := h.TickAll(); err != nil {
			t.Fatal(err)
		}
	}
	l.checkShares(t)
	prefix := "borrowcycle.default."
	if got := h.Metric(prefix + "requests_allowed"); got != int64(l.outcomes["allowed"]) {
		t.Errorf("requests_allowed = %d, clients saw %d", got, l.outcomes["allowed"])
	}
	for _, reason := range []string{"over_limit", "anonymous", "table_full", "pending", "store_failure"} {
		if got := h.Metric(prefix + "requests_rejected." + reason); got != int64(l.outcomes[reason]) {
			t.Errorf("requests_rejected.%s = %d, clients saw %d", reason, got, l.outcomes[reason])
		}
	}
	for _, seen := range []string{"allowed", "over_limit", "anonymous", "table_full"} {
		if l.outcomes[seen] == 0 {
			t.Errorf("load produced no %s response: %v", seen, l.outcomes)
		}
	}
	t.Logf("outcomes %v; metrics %s", l.outcomes, metricList(h))
}

func metricList(h *Host) string {
	snap := h.Metrics().Snapshot()
	names := make([]string, 0, len(snap))
	for k, v := range snap {
		if v != 0 {
			names = append(names, fmt.Sprintf("%s=%d", strings.TrimPrefix(k, "borrowcycle.default."), v))
		}
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}
