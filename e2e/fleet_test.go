package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/borrowcycle/borrowcycle/internal/capcheck"
	"github.com/borrowcycle/borrowcycle/internal/envoyrun"
	"gopkg.in/yaml.v3"
)

// Fleet mode against real Envoys (--concurrency 2) and a real 2-peer
// Gubernator cluster (docs/contract.md, "Fleet mode"). Each test logs its
// figures; docs/design.md explains the bounds checked.

const (
	fleetCycle    = 2 * time.Second
	fleetCap      = 100
	fleetFallback = 10
)

func fleetConfig() map[string]any {
	return map[string]any{
		"capacity": fleetCap, "cycle": fleetCycle.String(),
		"fleet": map[string]any{
			"cluster": envoyrun.GubernatorCluster, "capacity": fleetCap, "fallback_capacity": fleetFallback,
			"sync_interval": "200ms", "timeout": "150ms",
		},
	}
}

// fleetEnvoy starts an Envoy on envoy/fleet.yaml whose Gubernator cluster
// is the given gateway ports on loopback.
func fleetEnvoy(t *testing.T, name string, cfg map[string]any, ports []int) *target {
	t.Helper()
	if setup.compose {
		t.Skip("compose target: fleet tests start their own Envoys and Gubernator peers")
	}
	needLocalEnvoy(t)
	raw := mustJSON(t, cfg)
	s, err := parseSettings(raw)
	if err != nil {
		t.Fatal(err)
	}
	b, err := envoyrun.FleetBootstrap()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetPluginConfig(raw); err != nil {
		t.Fatal(err)
	}
	return startLocal(t, b, s, startOpts{concurrency: 2, name: name, edit: func(b *envoyrun.Bootstrap) error {
		return b.SetClusterEndpoints(envoyrun.GubernatorCluster, ports...)
	}})
}

// fleetResponse is one request's outcome, by Envoy.
type fleetResponse struct {
	envoy      int
	sent, recv time.Time
	status     int
	err        error
}

// pacedLoad sends from senders goroutines per Envoy, one request every
// 20 ms each, as client "<envoy>-<sender>"; only the first active[i]
// senders of Envoy i send, so the demand split can move mid-test.
type pacedLoad struct {
	active []atomic.Int32
	mu     sync.Mutex
	out    []fleetResponse
	stop   chan struct{}
	wg     sync.WaitGroup
}

const sendersPerEnvoy = 10

func startLoad(tgs []*target) *pacedLoad {
	l := &pacedLoad{active: make([]atomic.Int32, len(tgs)), stop: make(chan struct{})}
	for i, tg := range tgs {
		for k := 0; k < sendersPerEnvoy; k++ {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				c, id := newClient(), fmt.Sprintf("e%d-s%d", i, k)
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-l.stop:
						return
					case <-tick.C:
					}
					if int32(k) >= l.active[i].Load() {
						continue
					}
					r := tg.get(c, id)
					l.mu.Lock()
					l.out = append(l.out, fleetResponse{envoy: i, sent: r.sent, recv: r.recv, status: r.status, err: r.err})
					l.mu.Unlock()
				}
			}()
		}
	}
	return l
}

func (l *pacedLoad) set(active ...int32) {
	for i, a := range active {
		l.active[i].Store(a)
	}
}

func (l *pacedLoad) finish() []fleetResponse {
	close(l.stop)
	l.wg.Wait()
	return l.out
}

// fleetWindows tallies responses per aligned window: admitted and asked per
// Envoy, and a capacity checker over the fleet (edge admissions, sent in
// the window before, are tolerated as in windowLedger).
type fleetWindows struct {
	admitted, asked map[int64][]int
	check           *capcheck.Checker
	errors          int
}

func tally(rs []fleetResponse, envoys int, capacity int64, from, to time.Time) fleetWindows {
	w := fleetWindows{admitted: map[int64][]int{}, asked: map[int64][]int{}, check: capcheck.New(capacity)}
	for _, r := range rs {
		if r.err != nil {
			w.errors++
			continue
		}
		if r.recv.Before(from) || !r.recv.Before(to) {
			continue
		}
		k, _, _ := engine.WindowAt(r.recv, fleetCycle, 0)
		sentIn, _, _ := engine.WindowAt(r.sent, fleetCycle, 0)
		if w.asked[k] == nil {
			w.asked[k], w.admitted[k] = make([]int, envoys), make([]int, envoys)
		}
		w.asked[k][r.envoy]++
		if r.status == http.StatusOK {
			w.admitted[k][r.envoy]++
			w.check.Admit(capcheck.Admission{Window: k, Edge: sentIn != k, Cost: 1})
		}
	}
	return w
}

func windowIndex(t time.Time) int64 { k, _, _ := engine.WindowAt(t, fleetCycle, 0); return k }

// waitWindowStart sleeps to the start of the next aligned window.
func waitWindowStart() time.Time {
	_, _, end := engine.WindowAt(time.Now(), fleetCycle, 0)
	time.Sleep(time.Until(end))
	return end
}

// statOf reads one of the limit's fleet counters after a flush.
func statOf(t *testing.T, tg *target, name string) int64 {
	t.Helper()
	st, err := tg.flushedStats()
	if err != nil {
		t.Fatal(err)
	}
	return st["wasmcustom.borrowcycle."+tg.settings.Name+".fleet."+name]
}

func TestFleetSharesOneCapacityByDemand(t *testing.T) {
	g := startGubernator(t, 2)
	tgs := []*target{
		fleetEnvoy(t, "envoy-a", fleetConfig(), g.httpPorts()),
		fleetEnvoy(t, "envoy-b", fleetConfig(), g.httpPorts()),
	}
	const phase = 6 // windows
	load := startLoad(tgs)
	start := waitWindowStart()
	callouts0 := []int64{statOf(t, tgs[0], "callouts"), statOf(t, tgs[1], "callouts")}
	load.set(8, 2) // 80/20
	time.Sleep(phase * fleetCycle)
	load.set(2, 8) // moved mid-test
	time.Sleep(phase * fleetCycle)
	rs := load.finish()
	end := start.Add(2 * phase * fleetCycle)
	w := tally(rs, 2, fleetCap, start, end)
	if w.errors > 0 {
		t.Errorf("%d requests failed", w.errors)
	}
	if v := w.check.Violations(); len(v) > 0 {
		t.Errorf("fleet over capacity: %v", v)
	}
	k0 := windowIndex(start)
	var sumAdmitted, sumHeavyAdm, sumHeavyAsk, sumAsk float64
	var worst float64
	var phaseHeavy, phaseLight, phaseWins [2]int
	n := 0
	for k := k0; k < k0+2*phase; k++ {
		adm, ask := w.admitted[k], w.asked[k]
		if adm == nil {
			t.Errorf("window %d: no responses", k-k0)
			continue
		}
		heavy := 0
		if k-k0 >= phase {
			heavy = 1
		}
		total := adm[0] + adm[1]
		t.Logf("window %2d: admitted %3d + %3d = %3d of %d (%.2f); asked %4d + %4d", k-k0, adm[0], adm[1], total, fleetCap,
			float64(total)/fleetCap, ask[0], ask[1])
		worst = max(worst, float64(total)/fleetCap)
		// The split is judged over the windows after the two that follow a
		// change of split: the demand split is read from the previous and
		// current windows' posts. (The count of single windows the heavy
		// replica won is logged.)
		if (k-k0)%phase < 2 {
			continue
		}
		p := (k - k0) / phase
		phaseHeavy[p] += adm[heavy]
		phaseLight[p] += adm[1-heavy]
		if adm[heavy] > adm[1-heavy] {
			phaseWins[p]++
		}
		n++
		sumAdmitted += float64(total)
		sumHeavyAdm += float64(adm[heavy])
		sumHeavyAsk += float64(ask[heavy])
		sumAsk += float64(ask[0] + ask[1])
	}
	for p := range phaseHeavy {
		settled := phase - 2
		share := float64(phaseHeavy[p]) / float64(max(1, phaseHeavy[p]+phaseLight[p]))
		t.Logf("split %d: the replica with 80%% of the demand admitted %d to the other's %d (%.2f), and more in %d of %d settled windows",
			p+1, phaseHeavy[p], phaseLight[p], share, phaseWins[p], settled)
		if share < 0.75 {
			t.Errorf("split %d: the replica with 80%% of the demand admitted %.2f of the settled windows' admissions, want ≥ 0.75", p+1, share)
		}
	}
	callouts := []int64{statOf(t, tgs[0], "callouts") - callouts0[0], statOf(t, tgs[1], "callouts") - callouts0[1]}
	secs := end.Sub(start).Seconds()
	for i, tg := range tgs {
		t.Logf("envoy %d: leased %d, gave back %d, %d callouts failed", i, statOf(t, tg, "leased"), statOf(t, tg, "given_back"), statOf(t, tg, "failures"))
	}
	t.Logf("FLEET figures (%d settled windows of %s, fleet capacity %d):", n, fleetCycle, fleetCap)
	t.Logf("  fleet admitted per window / capacity: mean %.2f, worst %.2f (edge admissions included)", sumAdmitted/float64(n)/fleetCap, worst)
	t.Logf("  budget split (heavy replica's share of admissions) %.2f vs demand split %.2f", sumHeavyAdm/sumAdmitted, sumHeavyAsk/sumAsk)
	t.Logf("  callouts per second per Envoy: %.1f and %.1f (sync_interval 200ms; retries included)",
		float64(callouts[0])/secs, float64(callouts[1])/secs)
	if sumAdmitted/float64(n) < 0.95*fleetCap {
		t.Errorf("the fleet used %.1f of %d per settled window: want ≥ 0.95 of it", sumAdmitted/float64(n), fleetCap)
	}
}

// startFleetPair starts two Envoys on a two-peer Gubernator cluster under
// an even paced load, and returns once two windows have settled, with the
// start of the first.
func startFleetPair(t *testing.T) (*gubernatorCluster, []*target, *pacedLoad, time.Time) {
	t.Helper()
	g := startGubernator(t, 2)
	tgs := []*target{
		fleetEnvoy(t, "envoy-a", fleetConfig(), g.httpPorts()),
		fleetEnvoy(t, "envoy-b", fleetConfig(), g.httpPorts()),
	}
	load := startLoad(tgs)
	start := waitWindowStart()
	load.set(5, 5)
	time.Sleep(2 * fleetCycle)
	return g, tgs, load, start
}

// finishWithinFallbacks ends the load and checks the whole run against
// the bound of an outage: no request failed, and no window admitted more
// than the fleet capacity plus both fallbacks.
func finishWithinFallbacks(t *testing.T, load *pacedLoad, start time.Time) ([]fleetResponse, fleetWindows, time.Time) {
	t.Helper()
	rs := load.finish()
	end := time.Now()
	all := tally(rs, 2, fleetCap+2*fleetFallback, start, end)
	if all.errors > 0 {
		t.Errorf("%d requests failed", all.errors)
	}
	if v := all.check.Violations(); len(v) > 0 {
		t.Errorf("over capacity + fallbacks: %v", v)
	}
	return rs, all, end
}

func TestFleetPeersDownThenBack(t *testing.T) {
	g, tgs, load, start := startFleetPair(t)
	g.stop(1)
	t.Log("peer 1 stopped")
	time.Sleep(3 * fleetCycle)
	g.stop(0)
	bothDown := time.Now()
	t.Log("peer 0 stopped: the whole cluster is down")
	time.Sleep(3 * fleetCycle)
	leasedBefore := []int64{statOf(t, tgs[0], "leased"), statOf(t, tgs[1], "leased")}
	answeredBefore := []int64{answered(t, tgs[0]), answered(t, tgs[1])}
	g.start(0)
	g.start(1)
	back := time.Now()
	g.waitReady()
	ready := time.Now()
	// Recovery, from the cluster answering again, as the flushed counters
	// show it (up to one tick period late): each Envoy's first answered
	// callout (it rejoins), then its first lease (leasing goes on through
	// the fallback, so it comes with the next sync).
	var rejoined, recovered []time.Duration
	for i, tg := range tgs {
		for answered(t, tg) == answeredBefore[i] {
			if time.Since(back) > 30*time.Second {
				t.Fatalf("envoy %d: no callout answered in 30 s after the peers came back", i)
			}
			time.Sleep(20 * time.Millisecond)
		}
		rejoined = append(rejoined, time.Since(ready))
	}
	for i, tg := range tgs {
		for {
			st, err := fetchStats(tg.admin)
			if err != nil {
				t.Fatal(err)
			}
			if st["wasmcustom.borrowcycle."+tg.settings.Name+".fleet.leased"] != leasedBefore[i] {
				break
			}
			if time.Since(back) > 30*time.Second {
				t.Fatalf("envoy %d leased nothing in 30 s after the peers came back", i)
			}
			time.Sleep(20 * time.Millisecond)
		}
		recovered = append(recovered, time.Since(ready))
	}
	restartedIn := windowIndex(time.Now())
	time.Sleep(4 * fleetCycle)
	rs, all, end := finishWithinFallbacks(t, load, start)
	// Windows wholly inside the outage: each Envoy serves, within its fallback.
	from, _, _ := engine.WindowAt(bothDown, fleetCycle, 0)
	for k := from + 2; k < windowIndex(back); k++ {
		for i, adm := range all.admitted[k] {
			t.Logf("outage window %d: envoy %d admitted %d (fallback %d)", k-from, i, adm, fleetFallback)
			if adm == 0 || adm > fleetFallback+edgeOf(rs, i, k) {
				t.Errorf("outage window %d: envoy %d admitted %d, want 1..%d", k-from, i, adm, fleetFallback)
			}
		}
	}
	// Once the fallback is out of force (from the window after the one of
	// the first answer; one more for margin), the fleet is bounded by its
	// capacity alone.
	settled := time.Unix(0, (restartedIn+2)*int64(fleetCycle)) // window starts: no offset
	after := tally(rs, 2, fleetCap, settled, end)
	if v := after.check.Violations(); len(v) > 0 {
		t.Errorf("after recovery, over the fleet capacity: %v", v)
	}
	for i, tg := range tgs {
		fb := statOf(t, tg, "fallbacks")
		logs := fallbackLogLines(tg)
		if fb < 1 || int64(logs) != fb {
			t.Errorf("envoy %d: %d fallback episodes counted, %d logged: want at least one, one line each", i, fb, logs)
		}
	}
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	t.Logf("FLEET recovery: the restarted peers answered %s after their start; from then, envoy a rejoined after %s and leased again after %s, envoy b after %s and %s (sync_interval 200ms, cycle %s, counters flushed every 100 ms tick)",
		ms(ready.Sub(back)), ms(rejoined[0]), ms(recovered[0]), ms(rejoined[1]), ms(recovered[1]), fleetCycle)
}

// answered is how many of the Envoy's callouts were answered well so far.
func answered(t *testing.T, tg *target) int64 {
	t.Helper()
	st, err := fetchStats(tg.admin)
	if err != nil {
		t.Fatal(err)
	}
	prefix := "wasmcustom.borrowcycle." + tg.settings.Name + ".fleet."
	return st[prefix+"callouts"] - st[prefix+"failures"]
}

// fallbackLogLines counts the log lines that open a fallback episode.
func fallbackLogLines(tg *target) int {
	n := 0
	for _, line := range strings.Split(tg.envoy.Log(), "\n") {
		if strings.Contains(line, "fleet: Gubernator") && strings.Contains(line, "admitting at most fallback_capacity") {
			n++
		}
	}
	return n
}

// edgeOf counts Envoy i's admissions received in window k but sent in the
// one before: Envoy may have decided them before the boundary.
func edgeOf(rs []fleetResponse, i int, k int64) int {
	n := 0
	for _, r := range rs {
		if r.envoy == i && r.err == nil && r.status == http.StatusOK && windowIndex(r.recv) == k && windowIndex(r.sent) != k {
			n++
		}
	}
	return n
}

func TestFleetGarbageAndTimeoutsNeverStallAWorker(t *testing.T) {
	var mode atomic.Value
	mode.Store("garbage")
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load().(string) {
		case "garbage":
			_, _ = w.Write([]byte("<html>not gubernator</html>"))
		case "status":
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		case "slow": // well past the 150 ms timeout
			time.Sleep(400 * time.Millisecond)
			_, _ = w.Write([]byte(`{"responses":[]}`))
		case "wrong-count": // one answer more than the requests
			body, _ := io.ReadAll(r.Body)
			n := strings.Count(string(body), `"unique_key"`) + 1
			_, _ = w.Write([]byte(`{"responses":[` + strings.TrimSuffix(strings.Repeat(`{"status":"UNDER_LIMIT","remaining":"5","error":""},`, n), ",") + `]}`))
		case "huge":
			_, _ = w.Write([]byte(`{"responses":[` + strings.Repeat(" ", 200<<10) + `]}`))
		case "peer-error":
			_, _ = w.Write([]byte(`{"responses":[{"status":"UNDER_LIMIT","limit":"0","remaining":"0","error":"Error while fetching rate limit from peer"}]}`))
		}
	}))
	defer fake.Close()
	port, err := strconv.Atoi(fake.URL[strings.LastIndex(fake.URL, ":")+1:])
	if err != nil {
		t.Fatal(err)
	}
	tg := fleetEnvoy(t, "envoy", fleetConfig(), []int{port})
	load := startLoad([]*target{tg})
	start := waitWindowStart()
	load.set(5)
	modes := []string{"garbage", "status", "slow", "wrong-count", "huge", "peer-error"}
	for _, m := range modes {
		mode.Store(m)
		time.Sleep(2 * fleetCycle)
	}
	rs := load.finish()
	w := tally(rs, 1, fleetFallback, start, start.Add(time.Duration(2*len(modes))*fleetCycle))
	if w.errors > 0 {
		t.Errorf("%d requests got no answer", w.errors)
	}
	// Gubernator never answered: the Envoy held only its fallback.
	if v := w.check.Violations(); len(v) > 0 {
		t.Errorf("beyond the fallback: %v", v)
	}
	k0 := windowIndex(start)
	for k := k0; k < k0+int64(2*len(modes)); k++ {
		if adm := w.admitted[k]; adm == nil || adm[0] == 0 {
			t.Errorf("window %d (%s): nothing admitted: the worker stalled or the fallback is not in force", k-k0, modes[(k-k0)/2])
		}
	}
	fails, episodes := statOf(t, tg, "failures"), statOf(t, tg, "fallbacks")
	if logs := fallbackLogLines(tg); episodes != 1 || logs != 1 {
		t.Errorf("%d episodes, %d log lines: want one of each for one long outage", episodes, logs)
	}
	if fails < int64(len(modes)) {
		t.Errorf("%d failed callouts counted", fails)
	}
	t.Logf("%d callouts failed over %d modes of garbage and timeouts; %d requests answered", fails, len(modes), len(rs))
}

// TestFleetExamplesParse checks the shipped fleet examples with the plugin's
// own parser: envoy/fleet.yaml (whose fleet cluster must exist in it) and
// the Istio WasmPlugin.
func TestFleetExamplesParse(t *testing.T) {
	b, err := envoyrun.FleetBootstrap()
	if err != nil {
		t.Fatal(err)
	}
	s := bootstrapSettings(t, b, "envoy/fleet.yaml")
	if s.FleetCluster != envoyrun.GubernatorCluster || s.Engine.Fleet == nil {
		t.Errorf("envoy/fleet.yaml: fleet cluster %q, fleet %+v", s.FleetCluster, s.Engine.Fleet)
	}
	if err := b.SetClusterEndpoints(s.FleetCluster, 1); err != nil {
		t.Errorf("envoy/fleet.yaml has no cluster %q: %v", s.FleetCluster, err)
	}
	root, err := envoyrun.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	docs, err := os.ReadFile(filepath.Join(root, "envoy", "istio", "fleet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(string(docs), "\n---\n")
	var plugin map[string]any
	if err := yaml.Unmarshal([]byte(parts[len(parts)-1]), &plugin); err != nil {
		t.Fatal(err)
	}
	cfg := mustJSON(t, field(t, plugin, "spec", "pluginConfig"))
	is, err := parseSettings(cfg)
	if err != nil {
		t.Fatalf("envoy/istio/fleet.yaml pluginConfig: %v", err)
	}
	if !strings.HasPrefix(is.FleetCluster, "outbound|1050||") {
		t.Errorf("Istio fleet cluster %q: want Istio's outbound|port||host name", is.FleetCluster)
	}
}

// A fleet.cluster Envoy does not know cannot be caught at start (the
// plugin cannot list Envoy's clusters), so every refused callout is
// counted as a failure and logged, naming the field to check; the
// fallback serves meanwhile.
func TestFleetMisspelledClusterIsLoggedEveryTime(t *testing.T) {
	cfg := fleetConfig()
	cfg["fleet"].(map[string]any)["cluster"] = "gubernatr"
	ports, err := envoyrun.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	tg := fleetEnvoy(t, "misspelled", cfg, ports)
	c := newClient()
	admitted := 0
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if r := tg.get(c, "alice"); r.err == nil && r.status == http.StatusOK {
			admitted++
		}
		time.Sleep(20 * time.Millisecond)
	}
	lines := 0
	for _, line := range strings.Split(tg.envoy.Log(), "\n") {
		if strings.Contains(line, `refused the callout to cluster "gubernatr"`) && strings.Contains(line, "fleet.cluster") {
			lines++
		}
	}
	failures, callouts := statOf(t, tg, "failures"), statOf(t, tg, "callouts")
	t.Logf("3 s with fleet.cluster misspelled: %d callouts, %d failures, %d log lines, %d of %d-unit fallback admitted", callouts, failures, lines, admitted, fleetFallback)
	if failures < 5 || callouts < failures || lines < 5 {
		t.Errorf("%d callouts, %d failures, %d log lines in 3 s at a 200ms sync: want every refused callout counted and logged", callouts, failures, lines)
	}
	if admitted == 0 || admitted > 3*fleetFallback {
		t.Errorf("admitted %d in 3 s (parts of at most three windows), want the fallback (%d per window)", admitted, fleetFallback)
	}
}

// One peer of two stalled (SIGSTOP), then one down (killed): no peer dies
// while the filter's callouts time out on the stalled owner, the fleet
// keeps serving throughout, and with one peer down it keeps most of its
// capacity: callouts that get no answer are retried on the other peer,
// and the fallback lasts only until an answer.
func TestFleetOnePeerStalledOrDown(t *testing.T) {
	g, tgs, load, start := startFleetPair(t)
	g.pause(0)
	stalled := time.Now()
	t.Log("peer 0 stalled (SIGSTOP)")
	time.Sleep(3 * fleetCycle)
	g.resume(0)
	resumed := time.Now()
	t.Log("peer 0 resumed")
	time.Sleep(2 * fleetCycle)
	for i := range g.peers {
		if g.exited(i) {
			t.Fatalf("peer %d died while callouts timed out on the stalled peer 0:\n%s", i, g.logTail(i, 3000))
		}
	}
	g.stop(1)
	down := time.Now()
	t.Log("peer 1 stopped")
	const outage = 6 // windows
	time.Sleep(outage * fleetCycle)
	_, all, end := finishWithinFallbacks(t, load, start)
	if len(all.check.Violations()) > 0 {
		for k := windowIndex(start); k <= windowIndex(end); k++ {
			t.Logf("window %d (stall from %d to %d, peer down from %d): admitted %v", k, windowIndex(stalled), windowIndex(resumed), windowIndex(down), all.admitted[k])
		}
	}
	// Stalled: every window wholly inside the stall still serves.
	for k := windowIndex(stalled) + 1; k < windowIndex(resumed); k++ {
		adm := all.admitted[k]
		t.Logf("stall window %d: admitted %d + %d", k-windowIndex(stalled), adm[0], adm[1])
		if adm[0]+adm[1] == 0 {
			t.Errorf("stall window %d: nothing admitted", k-windowIndex(stalled))
		}
	}
	// Down: the windows wholly inside the outage, from the first one.
	var sum int
	n := 0
	for k := windowIndex(down) + 1; k < windowIndex(end); k++ {
		adm := all.admitted[k]
		t.Logf("one-down window %d: admitted %d + %d = %d of %d", k-windowIndex(down), adm[0], adm[1], adm[0]+adm[1], fleetCap)
		sum += adm[0] + adm[1]
		n++
	}
	avail := float64(sum) / float64(max(n, 1)*fleetCap)
	failures := []int64{statOf(t, tgs[0], "failures"), statOf(t, tgs[1], "failures")}
	lost := 0
	for _, tg := range tgs {
		lost += strings.Count(tg.envoy.Log(), "answered from a new count")
	}
	t.Logf("FLEET one peer of two down: the fleet admitted %.2f of its capacity over %d windows; failed callouts over the run %v, fallback episodes %d and %d, lost counts seen %d",
		avail, n, failures, statOf(t, tgs[0], "fallbacks"), statOf(t, tgs[1], "fallbacks"), lost)
	if n < outage-2 || avail < 0.8 {
		t.Errorf("one peer of two down: the fleet admitted %.2f of its capacity over %d windows, want ≥ 0.8", avail, n)
	}
	if g.exited(0) {
		t.Errorf("peer 0 died:\n%s", g.logTail(0, 3000))
	}
}
