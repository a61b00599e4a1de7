package engine

// Plans read in slices: counts and attempts, from a review of the fixes.

import (
	"strconv"
	"testing"
	"time"
)

// A provisional re-plan counts the unproven newcomer whose request made
// it (promoted) in its count, as planning in place does: newcomers one
// min_cycle apart never take the table past max_clients.
func TestAProvisionalReplanCountsItsPromotedNewcomer(t *testing.T) {
	run := func(inPlace int) (admitted, counted int, l *Limiter, cfg Config) {
		cfg = Defaults(100_000, time.Second)
		n := 2 * planInPlaceMax
		cfg.MaxClients = n + 1
		l, ids := declared(t, cfg, n)
		l.view.inPlaceMax = inPlace
		for _, id := range ids {
			if !l.AdmitAt(t0.Add(time.Millisecond), id).Allowed {
				t.Fatalf("%s refused", id)
			}
		}
		if l.view.plan.provisional || int(l.view.plan.n) != n {
			t.Fatalf("setup: plan %+v", l.view.plan)
		}
		for i := 1; i <= 5; i++ {
			at := t0.Add(time.Duration(i) * (cfg.MinCycle + time.Millisecond))
			if l.AdmitAt(at, "newcomer-"+strconv.Itoa(i)).Allowed {
				admitted++
			}
		}
		return admitted, len(l.Snapshot().Clients), l, cfg
	}
	refAdmitted, refCounted, _, _ := run(1 << 30)
	t.Logf("planned in place: %d newcomers admitted, %d clients counted", refAdmitted, refCounted)
	admitted, counted, l, cfg := run(planInPlaceMax)
	t.Logf("provisional re-plans: %d newcomers admitted, %d clients counted; plan n %d pending %d provisional %v",
		admitted, counted, l.view.plan.n, l.view.plan.pending, l.view.plan.provisional)
	if counted > cfg.MaxClients {
		t.Errorf("%d clients counted under provisional re-plans, max_clients %d (in place: %d)", counted, cfg.MaxClients, refCounted)
	}
	// And the plan read in slices then counts them all.
	at := t0.Add(6 * (cfg.MinCycle + time.Millisecond))
	for i := 0; l.view.plan.provisional && i < 400; i++ {
		at = at.Add(PlanTick)
		l.PlanAt(at)
	}
	if p := l.view.plan; int(p.n)+int(p.pending) > cfg.MaxClients {
		t.Errorf("completed plan: n %d + pending %d > max_clients %d", p.n, p.pending, cfg.MaxClients)
	}
}

// An attempt to complete a plan read in slices that loses its CAS leaves
// nothing to the retry: one that publishes a provisional re-plan instead
// (over another worker's completed plan, with a proof pending) starts its
// read, and its event is no completion.
func TestACompletionThatLosesItsCASLeavesNothingToTheRetry(t *testing.T) {
	cfg := Defaults(100_000, time.Second)
	cfg.MaxClients = 4 * planInPlaceMax
	cfg.MinCycle = 2 * time.Millisecond
	mem := NewMemStore()
	ip := &interposedStore{Store: mem}
	obs := &rollovers{}
	l, err := New(cfg, ip, WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	n := 2 * planInPlaceMax
	if err := l.RegisterAt(t0, clientIDs(n)...); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		l.AdmitAt(t0.Add(time.Millisecond), "client-"+strconv.Itoa(i))
	}
	next := t0.Add(cfg.Cycle)
	l.AdmitAt(next, "client-7")
	if !l.view.plan.provisional || !l.Planning() {
		t.Fatalf("no provisional roll: %+v", l.view.plan)
	}
	at := next
	fired := false
	ip.before = func(key string) {
		s := &l.view.sliced
		if fired || key != l.view.budgetKey || !s.computing || s.math.phase != phaseDone || (s.judges && !s.judging.done()) {
			return
		}
		// Inside replan's publish, after it read the provisional plan:
		// another worker publishes the plan it read over the table (a
		// takeover, whose tick read its clock 3 ms before this one's), with
		// one client proven since (pending).
		fired = true
		raw, cas, err := mem.Get(l.view.planKey)
		if err != nil {
			t.Fatal(err)
		}
		var p plan
		if err := decodePlan(raw, &p); err != nil {
			t.Fatal(err)
		}
		p.id++
		p.replan, p.provisional, p.carried = true, false, false
		p.pending = 1
		p.at = at.UnixNano() - 3*int64(time.Millisecond)
		if err := mem.Set(l.view.planKey, appendPlan(nil, &p), cas); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; l.Planning() && i < 400; i++ {
		at = at.Add(PlanTick)
		l.PlanAt(at)
	}
	ip.before = nil
	if !fired {
		t.Fatal("the hook never fired")
	}
	p := l.view.plan
	last := obs.events[len(obs.events)-1]
	t.Logf("after the retry: plan %d provisional %v carried %v replan %v; Planning %v; last event %+v", p.id, p.provisional, p.carried, p.replan, l.Planning(), last)
	if p.provisional && !l.Planning() {
		t.Errorf("this worker published a provisional re-plan over a plan that was not provisional, and does not read it")
	}
	if last.Completes && last.Provisional {
		t.Errorf("the event of a provisional re-plan says Completes")
	}
	// Nobody reads it until the takeover, three quarters of a window
	// after it was published: the publisher's read would have met a
	// deadline half a window after it.
	published := time.Duration(l.view.plan.at - next.UnixNano())
	read := time.Duration(-1)
	for at = at.Add(PlanTick); at.Before(next.Add(cfg.Cycle - time.Millisecond)); at = at.Add(PlanTick) {
		l.TickAt(at)
		l.PlanAt(at)
		if !l.view.plan.provisional {
			read = at.Sub(next)
			break
		}
	}
	t.Logf("the provisional re-plan published at +%v was read at +%v (-1: not in its window)", published, read)
	if read < 0 || read > published+cfg.Cycle/planDeadline {
		t.Errorf("the provisional re-plan published at +%v was read at +%v, past its deadline +%v", published, read, published+cfg.Cycle/planDeadline)
	}
}

// sharePrint sees the reservation in force: with an explicit Seed policy,
// the policy's own.
func TestSharePrintSeesTheSeedPolicysReservation(t *testing.T) {
	a := Defaults(100, time.Second)
	a.Policy = Seed{Reservation: 0.1}
	b := a
	b.Policy = Seed{Reservation: 0.9}
	if sharePrint(&a) == sharePrint(&b) {
		t.Errorf("Seed{0.1} and Seed{0.9} have the same sharePrint")
	}
}
