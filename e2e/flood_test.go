package e2e

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// TestFloodKeepsKnownClients: a flood of never-seen ids (each sent once,
// against max_clients 10,000) while four registered clients
// keep asking for more than their shares. Throughout, no aligned window
// admits more than the capacity, and in every window in which a known
// client was refused it had been admitted its announced share, give or take
// a few units. The product claim holds: in every whole window of the flood
// (the windows where it starts and stops excepted) the known clients
// together are admitted at least 80% of what they were admitted per window
// before it, in the same run: the flood's ids enter the plan at most one
// per re-plan, counted at the one unit they asked for. The known clients'
// throughput during the flood over their throughput without it is logged,
// not asserted: it is a speed figure (the target is ≥ 0.8), and this box
// is shared.
func TestFloodKeepsKnownClients(t *testing.T) {
	const (
		capacity = 200 // per second
		quiet    = 4 * time.Second
		flood    = 14 * time.Second
		// floodIDs is far more ids than the flood sends (about 10,000 a
		// second): an id sent twice has asked again, and is a proven
		// newcomer counted at the default share, as the product promises a
		// genuine one; wrapping around 100,000 ids used to turn the flood's
		// last seconds into that, and dip the known clients' shares.
		floodIDs  = 10_000_000
		floodConn = 16
		// slack is the "few units" a known client may fall short of its
		// share in a window it was refused in: units leased to a worker
		// that the client's next requests did not reach before the window
		// ended.
		slack = 4
	)
	tg := configuredTarget(t, map[string]any{
		"capacity":      capacity,
		"cycle":         "1s",
		"max_clients":   10_000,
		"debug_headers": true,
	}, startOpts{concurrency: 2})
	known := []string{"known-1", "known-2", "known-3", "known-4"}
	tg.registerAll(t, known)

	var sent atomic.Int64
	senders := []sender{{
		conns: floodConn, start: quiet, stop: quiet + flood,
		next: func() string { return fmt.Sprintf("flood-%07d", sent.Add(1)%floodIDs) },
	}}
	for _, id := range known {
		senders = append(senders, sender{id: id, conns: 2, stop: quiet + flood})
	}
	t0, rs := load(tg, senders)
	floodStart := t0.Add(quiet)

	l := newWindowLedger(tg.settings)
	type tally struct {
		admitted, refused int
		minShare          int64
	}
	// What each known client saw per aligned window, counting only the
	// answers sent and received in that window (so the window decided them).
	perWindow := map[int64]map[string]*tally{}
	var knownBefore, knownDuring, floodOutcomes = 0, 0, map[string]int{}
	admittedIn := map[int64]int{} // known clients' admissions, by the window they were received in
	for _, r := range rs {
		if r.err != nil {
			t.Fatalf("request failed: %v", r)
		}
		outcome := "allowed"
		switch {
		case r.status == 200:
			l.admit(t, r)
		case r.reason() == "over_limit" || r.reason() == "pending" || r.reason() == "table_full":
			outcome = r.reason()
		default:
			t.Fatalf("unexpected response: %v", r)
		}
		if !strings.HasPrefix(r.client, "known-") {
			floodOutcomes[outcome]++
			continue
		}
		if outcome == "pending" || outcome == "table_full" {
			t.Errorf("registered client refused as %s: %v", outcome, r)
			continue
		}
		if r.sent.Before(floodStart) {
			knownBefore++
		} else {
			knownDuring++
		}
		w, _, _ := engine.WindowAt(r.recv, tg.settings.Engine.Cycle, 0)
		if outcome == "allowed" {
			admittedIn[w]++
		}
		if sentIn, _, _ := engine.WindowAt(r.sent, tg.settings.Engine.Cycle, 0); sentIn != w {
			continue
		}
		if perWindow[w] == nil {
			perWindow[w] = map[string]*tally{}
		}
		k := perWindow[w][r.client]
		if k == nil {
			k = &tally{minShare: -1}
			perWindow[w][r.client] = k
		}
		if share := intHeader(t, r, "x-ratelimit-limit"); k.minShare < 0 || share < k.minShare {
			k.minShare = share
		}
		if outcome == "allowed" {
			k.admitted++
		} else {
			k.refused++
		}
	}
	l.Check(t)
	worst, _ := l.report(t)

	// Known clients keep their shares: refused in a window means they asked
	// for more than it, so they must have had it. Only whole windows count
	// (the load started and stopped inside the first and last).
	first, _, _ := engine.WindowAt(t0, tg.settings.Engine.Cycle, 0)
	last, _, _ := engine.WindowAt(t0.Add(quiet+flood), tg.settings.Engine.Cycle, 0)
	floodFrom, _, _ := engine.WindowAt(floodStart, tg.settings.Engine.Cycle, 0)
	tested := 0
	for w := first + 1; w < last; w++ {
		phase := "quiet"
		if w > floodFrom {
			phase = "flood"
		} else if w == floodFrom {
			phase = "flood starts"
		}
		line := fmt.Sprintf("window %d (%s):", w, phase)
		for _, id := range known {
			k := perWindow[w][id]
			if k == nil {
				t.Errorf("window %d: known client %s got no answer sent and received in the window", w, id)
				continue
			}
			line += fmt.Sprintf(" %s %d/%d share %d;", id, k.admitted, k.admitted+k.refused, k.minShare)
			if k.refused == 0 {
				continue
			}
			tested++
			if int64(k.admitted) < k.minShare-slack {
				t.Errorf("window %d: known client %s admitted %d, refused %d, share %d: it did not get its share", w, id, k.admitted, k.refused, k.minShare)
			}
		}
		t.Log(line)
	}
	if tested == 0 {
		t.Errorf("no known client asked for more than its share: the test measured nothing")
	}
	// Known clients' admissions per window, before the flood and during it.
	var quietSum, quietN int
	var beforeW, duringW []int
	for w := first + 1; w < floodFrom; w++ {
		quietSum += admittedIn[w]
		quietN++
		beforeW = append(beforeW, admittedIn[w])
	}
	if quietN == 0 || quietSum == 0 {
		t.Fatalf("no whole window before the flood admitted a known client: nothing to compare with")
	}
	perQuiet := float64(quietSum) / float64(quietN)
	worstRatio := 2.0
	for w := floodFrom + 1; w < last; w++ {
		duringW = append(duringW, admittedIn[w])
		ratio := float64(admittedIn[w]) / perQuiet
		worstRatio = min(worstRatio, ratio)
		if ratio < 0.8 {
			t.Errorf("window %d of the flood: known clients admitted %d, %.2f of the %.0f per window before it (want ≥ 0.80)", w, admittedIn[w], ratio, perQuiet)
		}
	}
	if len(duringW) == 0 {
		t.Fatalf("no whole window of the flood: nothing measured")
	}
	t.Logf("known clients admitted per window: before the flood %v (mean %.0f), during it %v; worst flood window %.2f of the mean before",
		beforeW, perQuiet, duringW, worstRatio)
	before := float64(knownBefore) / quiet.Seconds()
	during := float64(knownDuring) / flood.Seconds()
	t.Logf("flood: %d requests from %d distinct ids (id space %d), outcomes %v", sent.Load(), min(sent.Load(), floodIDs), floodIDs, floodOutcomes)
	if sent.Load() > floodIDs {
		t.Errorf("the flood sent %d requests from %d ids: ids repeated, so it was not a flood of never-seen ids (raise floodIDs)", sent.Load(), floodIDs)
	}
	t.Logf("known-client throughput: %.0f req/s without the flood, %.0f req/s during it: ratio %.2f (the test's own load generator shares the CPUs with Envoy, so this is not the filter's cost: make bench-envoy's flood row measures that)",
		before, during, during/before)
	t.Logf("worst aligned window %.2f × capacity", worst)
}
