package engine

import (
	"fmt"
	"testing"
	"time"
)

// Retry-After names the earliest moment a retry can succeed, for every
// reason (retryAfter), and for a client the budget left short, when the
// budget may next grant it a unit (budgetMoreAt).

func TestRetryAfterByReason(t *testing.T) {
	cfg := Defaults(100, 10*time.Second)
	cfg.MinCycle = time.Second
	s := int64(time.Second)
	start := t0.UnixNano()
	p := &plan{id: 2, roll: 1, window: windowIndex(start, &cfg), at: start + 3*s, n: 2} // a re-plan
	now := start + 3500*int64(time.Millisecond)                                         // 6.5 s before the window's end
	end := 6500 * time.Millisecond
	tests := []struct {
		name   string
		reason Reason
		at     retryAt
		want   time.Duration
	}{
		{"over_limit: the next unit", ReasonOverLimit, retryAt{accrues: now + 300*int64(time.Millisecond)}, 300 * time.Millisecond},
		{"over_limit: share or budget spent: the window's end", ReasonOverLimit, retryAt{spent: true}, end},
		{"over_limit: a unit after the window's end is the window's end", ReasonOverLimit, retryAt{accrues: now + 9*s}, end},
		{"over_limit: a pacer's turn in the next window", ReasonOverLimit, retryAt{accrues: now + 300*int64(time.Millisecond), turn: now + 9*s}, 9 * time.Second},
		{"pending: the next re-plan", ReasonPending, retryAt{}, 500 * time.Millisecond},
		{"pending with the budget spent: the window's end", ReasonPending, retryAt{spent: true}, end},
		{"table_full: the next plan", ReasonTableFull, retryAt{}, end},
		{"too_many_ids: the next window", ReasonTooManyIDs, retryAt{}, end},
		{"contended: shortly", ReasonContended, retryAt{}, time.Second},
		{"store_failure: a second", ReasonStoreFailure, retryAt{}, time.Second},
	}
	for _, tc := range tests {
		if got := retryAfter(tc.reason, p, &cfg, now, tc.at); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}

	// Near the window's end, the next re-plan falls in the next window:
	// a newcomer asking again at its start is counted by its first
	// re-plan, MinCycle into it under a partition, at once under fair.
	late := &plan{id: 2, roll: 1, window: p.window, at: start + 9500*int64(time.Millisecond), n: 2}
	at := start + 9800*int64(time.Millisecond)
	if got, want := retryAfter(ReasonPending, late, &cfg, at, retryAt{}), 200*time.Millisecond+cfg.MinCycle; got != want {
		t.Errorf("pending near the end, seed: %v, want %v", got, want)
	}
	fair := cfg
	fair.Policy = Fair{}
	if got, want := retryAfter(ReasonPending, late, &fair, at, retryAt{}), 200*time.Millisecond; got != want {
		t.Errorf("pending near the end, fair: %v, want %v", got, want)
	}
	// A roll made late in its window holds the first re-plan back only
	// MinCycle from the window's start.
	lateRoll := &plan{id: 3, roll: 3, window: p.window, at: start + 5*s, n: 2}
	if !replanAllowed(lateRoll, &cfg, start+5*s+1) {
		t.Error("a re-plan just after a late roll, more than MinCycle into the window, is not allowed")
	}
}

func TestBudgetMoreAt(t *testing.T) {
	cfg := Defaults(100, 10*time.Second)
	fleet := cfg
	fleet.Fleet = &Fleet{Capacity: 300, SyncInterval: 200 * time.Millisecond, Timeout: 100 * time.Millisecond}
	s := int64(time.Second)
	start := t0.UnixNano()
	end := start + 10*s
	at := func(f float64) int64 { return start + int64(f*float64(10*s)) + 1 }
	now := start + 3*s
	under := borrowGate{on: true, had: 10, lv: 20, guar: 5, burst: 1, elapsed: 0.3}
	tests := []struct {
		name    string
		cfg     *Config
		seen    budgetSeen
		gate    borrowGate
		clipped bool
		want    int64
	}{
		{"the budget is spent: not before the window's end", &cfg, budgetSeen{granted: 100, left: 100}, under, true, 0},
		{"fleet mode, what is held is spent: the next lease", &fleet, budgetSeen{granted: 40, left: 40, held: true}, borrowGate{}, false,
			now + int64(300*time.Millisecond)},
		{"cut by the budget, not the gate, with units left: nothing accrues", &cfg, budgetSeen{granted: 90, left: 100}, borrowGate{}, false, 0},
		{"under its entitlement: the later of its level (0.5) and the pool (0.6)", &cfg, budgetSeen{granted: 60, left: 100}, under, true, at(0.6)},
		{"the level later than the pool", &cfg, budgetSeen{granted: 30, left: 100}, under, true, at(0.5)},
		{"paced, its guarantee accrues first: (23/50 - 0.2) / 0.8 = 0.325",
			&cfg, budgetSeen{granted: 60, left: 100}, borrowGate{on: true, had: 23, lv: 40, guar: 50, burst: 0.2, elapsed: 0.3}, true, at(0.325)},
		{"past its entitlement: the late pool (2 kept) serves before its level",
			&cfg, budgetSeen{granted: 60, left: 100}, borrowGate{on: true, had: 19, lv: 20, guar: 5, burst: 1, past: true, keep: 2, elapsed: 0.3}, true,
			at(fairLag + (1-fairLag)*0.62)},
		{"its level reached for the window, no late pool: not in this window", &cfg, budgetSeen{granted: 60, left: 100},
			borrowGate{on: true, had: 20, lv: 20, guar: 5, burst: 1, elapsed: 0.3}, true, 0},
		{"what is owed counts as granted: the pool past 60 + 10", &cfg, budgetSeen{granted: 60, owed: 10, left: 100}, under, true, at(0.7)},
		{"the rest is owed: not in this window", &cfg, budgetSeen{granted: 60, owed: 40, left: 100}, under, true, 0},
		{"fleet mode, the rest of what is held is owed: the next lease", &fleet, budgetSeen{granted: 30, owed: 10, left: 40, held: true}, under, true,
			now + int64(300*time.Millisecond)},
	}
	for _, tc := range tests {
		if got := budgetMoreAt(tc.seen, tc.gate, tc.clipped, tc.cfg, now, start, end); got != tc.want {
			t.Errorf("%s: %d, want %d (%+.3fs from now)", tc.name, got, tc.want, float64(got-tc.want)/1e9)
		}
	}
}

// Under the fair policy, a client refused by the borrow gate is told when
// its next unit accrues, and asking then succeeds (with nobody else
// taking it); once the window's budget is spent, it is told the window's
// end.
func TestFairRetryAfterIsWhenTheNextUnitAccrues(t *testing.T) {
	cfg := Defaults(10, 10*time.Second)
	cfg.MinCycle = time.Second
	cfg.Policy = Fair{}
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	l.TickAt(t0)
	now := t0.Add(time.Second)
	admitted, retries := 0, 0
	for admitted < 10 && now.Before(t0.Add(cfg.Cycle)) {
		d := l.AdmitAt(now, "a")
		if d.Allowed {
			admitted++
			continue
		}
		if d.RetryAfter <= 0 {
			t.Fatalf("refused at %v with Retry-After %v", now.Sub(t0), d.RetryAfter)
		}
		next := now.Add(d.RetryAfter)
		if !next.Before(t0.Add(cfg.Cycle)) {
			break // told the window's end
		}
		retries++
		if again := l.AdmitAt(next, "a"); !again.Allowed {
			t.Fatalf("retry at %v, when told (Retry-After %v at %v), refused: %+v", next.Sub(t0), d.RetryAfter, now.Sub(t0), again)
		} else {
			admitted++
		}
		now = next
	}
	if retries == 0 {
		t.Fatal("no retry was told a time within the window: the gate never held the client back")
	}
	// Nobody else asked: a had the whole capacity (the fair policy lends
	// what is idle). With the budget spent, it is told the window's end.
	d := l.AdmitAt(now, "a")
	if admitted != 10 || d.Allowed || d.RetryAfter != d.Reset || d.Reset <= 0 || d.Remaining != 0 {
		t.Errorf("after %d admitted of 10: %+v, want a refusal until the window's end with remaining 0", admitted, d)
	}
	t.Logf("client a: %d admitted, %d of them at the Retry-After it was told", admitted, retries)
}

// Paced, a client the limit's pacer held back (not the budget, which has
// units left) is told its turn at the pacer, not the window's end, and a
// retry then is admitted. (After a second of idle the pacer
// holds two units: the one accrued, kept by its grace, and its burst.)
func TestPacedRetryAfterIsThePacersNextUnit(t *testing.T) {
	l := pacedThree(t)
	now := t0.Add(time.Second)
	for _, c := range []string{"a", "b"} {
		if d := l.AdmitAt(now, c); !d.Allowed {
			t.Fatalf("%s refused: %+v", c, d)
		}
	}
	d := l.AdmitAt(now, "c")
	if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter >= d.Reset || !d.Turn {
		t.Fatalf("c right after a and b: %+v, want a refusal until its turn at the pacer, before the window's end", d)
	}
	if again := l.AdmitAt(now.Add(d.RetryAfter), "c"); !again.Allowed {
		t.Errorf("c retried at its Retry-After (%v): %+v", d.RetryAfter, again)
	}
}

// Paced, a client that had its paced amount is told when its next unit
// accrues (pacedAmount rounds up: as soon as the exact amount passes what
// it has), and is admitted then; once it had its whole share, the
// window's end.
func TestPacedClientRetryAfterIsItsNextUnit(t *testing.T) {
	l := pacedThree(t)
	now := t0.Add(40 * time.Millisecond)
	if d := l.AdmitAt(now, "a"); !d.Allowed || d.Limit != 2 {
		t.Fatalf("a's first request: %+v, want admitted with a share of 2", d)
	}
	d := l.AdmitAt(now, "a")
	// Its share of 2 paces as ceil(2 × (0.2 + 0.8 f)): the second unit
	// comes once f passes 0.375, 1.875 s into the 5 s window.
	want := 1875*time.Millisecond - 40*time.Millisecond
	if d.Allowed || d.RetryAfter < want || d.RetryAfter > want+time.Millisecond {
		t.Fatalf("a's second request: %+v, want a refusal until its next unit, %v", d, want)
	}
	if again := l.AdmitAt(now.Add(d.RetryAfter), "a"); !again.Allowed {
		t.Fatalf("a retried at its Retry-After: %+v", again)
	}
	if last := l.AdmitAt(now.Add(d.RetryAfter), "a"); last.Allowed || last.RetryAfter != last.Reset {
		t.Errorf("a with its whole share: %+v, want a refusal until the window's end", last)
	}
}

// pacedThree is a limit of 6 per 5 s paced with burst 0.2, its three
// clients a, b and c registered at t0: a share of 2 each.
func pacedThree(t *testing.T) *Limiter {
	t.Helper()
	cfg := Defaults(6, 5*time.Second)
	cfg.MinCycle = 500 * time.Millisecond
	cfg.Pace, cfg.Burst = true, 0.2
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	l.TickAt(t0)
	return l
}

// retryingAttempt is one request of a simulated retrying client.
type retryingAttempt struct {
	client  int
	at      time.Time
	retry   bool // made at the Retry-After of the client's last refusal
	d       Decision
	windowK int64
}

// retryingClients runs clients that send each requests one after the
// other, 2 ms apart, alternating over the workers, and that obey
// Retry-After as an HTTP client does: whole seconds, rounded up (RFC 9110).
// Client i starts i × stagger after start.
func retryingClients(workers []*Limiter, start time.Time, stagger time.Duration, clients, each int) []retryingAttempt {
	type client struct {
		next  time.Time
		done  int
		retry bool
	}
	cs := make([]*client, clients)
	for i := range cs {
		cs[i] = &client{next: start.Add(time.Duration(i) * stagger)}
	}
	var out []retryingAttempt
	for n := 0; ; n++ {
		ci := -1
		for i, c := range cs {
			if c.done < each && (ci < 0 || c.next.Before(cs[ci].next)) {
				ci = i
			}
		}
		if ci < 0 {
			return out
		}
		c := cs[ci]
		w := workers[n%len(workers)]
		d := w.AdmitAt(c.next, fmt.Sprintf("retrying-%d", ci))
		k, _, _ := WindowAt(c.next, w.cfg.Cycle, w.cfg.WindowOffset)
		out = append(out, retryingAttempt{client: ci, at: c.next, retry: c.retry, d: d, windowK: k})
		c.retry = !d.Allowed
		if d.Allowed {
			c.done++
			c.next = c.next.Add(2 * time.Millisecond)
		} else {
			c.next = c.next.Add((d.RetryAfter+time.Second-1)/time.Second*time.Second + 2*time.Millisecond)
		}
	}
}

// Under the seed policy, two newcomers arrive just after a third took the
// first plan, which gives it the whole window; it spends it at once. Told
// to wait for the re-plan, they find the budget spent there: from then on
// they are told the window's end (not the next re-plan), and the next
// window counts what they asked for, at the default share of 2 each. From
// that window on, every retry made at Retry-After succeeds.
func TestRetryingClientsUnderSeed(t *testing.T) {
	cfg := Defaults(6, 5*time.Second)
	store := NewMemStore()
	workers := []*Limiter{newLimiter(t, cfg, store), newLimiter(t, cfg, store)}
	start := t0.Add(5*time.Second + 20*time.Millisecond)
	k0, _, end0 := WindowAt(start, cfg.Cycle, cfg.WindowOffset)
	attempts := retryingClients(workers, start, time.Millisecond, 3, 10)
	done := make([]int, 3)
	for _, a := range attempts {
		if a.d.Allowed {
			done[a.client]++
		}
		if a.d.Turn {
			t.Errorf("client %d told a turn, unpaced: %+v", a.client, a.d)
		}
		if a.windowK == k0+1 && a.d.Allowed && a.d.Limit != 2 {
			t.Errorf("client %d's share in the second window: %d, want 2 (everyone asked for more than 6/3)", a.client, a.d.Limit)
		}
		// (A worker reads a request's time as at least its latest reading:
		// the two workers' readings differ by a few milliseconds here.)
		if off := a.at.Add(a.d.RetryAfter).Sub(end0); a.d.Reason == ReasonPending && a.retry && (off < -5*time.Millisecond || off > 5*time.Millisecond) {
			t.Errorf("client %d pending again at %v, the budget spent: Retry-After %v, want the window's end", a.client, a.at.Sub(start), a.d.RetryAfter)
		}
	}
	retries, ok := retriesAfterFirst(t, attempts, k0)
	for i, n := range done {
		if n != 10 {
			t.Errorf("client %d completed %d of 10", i, n)
		}
	}
	if retries == 0 {
		t.Fatal("no retry after the first window: the test shows nothing")
	}
	t.Logf("%d of %d retries after the first window succeeded, %d attempts in all", ok, retries, len(attempts))
}

// retryingRun runs three retrying clients of ten requests over two workers
// of cfg on one store, from just after a window's start, each stagger
// after the one before, and returns their attempts, that first window,
// the units admitted per window and the last window that admitted any.
func retryingRun(t *testing.T, cfg Config, stagger time.Duration) (attempts []retryingAttempt, k0 int64, per map[int64]int64, last int64) {
	t.Helper()
	store := NewMemStore()
	workers := []*Limiter{newLimiter(t, cfg, store), newLimiter(t, cfg, store)}
	start := t0.Add(5*time.Second + 20*time.Millisecond)
	k0, _, _ = WindowAt(start, cfg.Cycle, cfg.WindowOffset)
	attempts = retryingClients(workers, start, stagger, 3, 10)
	per = map[int64]int64{}
	for _, a := range attempts {
		if a.d.Allowed {
			per[a.windowK]++
			last = a.windowK
		}
	}
	return attempts, k0, per, last
}

// retriesAfterFirst counts the retries made at Retry-After after window k0
// and those that succeeded, and reports each that did not.
func retriesAfterFirst(t *testing.T, attempts []retryingAttempt, k0 int64) (retries, ok int) {
	t.Helper()
	for _, a := range attempts {
		if !a.retry || a.windowK == k0 {
			continue
		}
		retries++
		if a.d.Allowed {
			ok++
		} else {
			t.Errorf("client %d's retry at %v, when told, refused: %+v", a.client, a.at.Sub(t0), a.d)
		}
	}
	return retries, ok
}

// Clients that obey Retry-After and are refused together come back
// together: under the fair policy (10 per 5 s) the pool's next unit would
// go to one of them only. Each refused client books its unit for the time
// it is told, so from the second window on every retry made at
// Retry-After succeeds. Staggered, a client is refused while another has
// yet to take its guarantee: the pool's one unit past the guarantees is
// booked by the first refused, and the second is told the window's end,
// not a unit the third's guarantee will take.
func TestRetryingClientsSucceedUnderFair(t *testing.T) {
	for _, stagger := range []time.Duration{time.Millisecond, 3 * time.Millisecond, 5 * time.Millisecond} {
		t.Run(fmt.Sprint("stagger ", stagger), func(t *testing.T) {
			cfg := Defaults(10, 5*time.Second)
			cfg.Policy = Fair{}
			attempts, k0, per, last := retryingRun(t, cfg, stagger)
			retries, ok := retriesAfterFirst(t, attempts, k0)
			if last < k0+2 || retries == 0 {
				t.Fatalf("done by window %d with %d retries after the first: too little to show anything", last-k0, retries)
			}
			t.Logf("admitted per window %v; %d of %d retries after the first window succeeded, %d attempts in all", per, ok, retries, len(attempts))
		})
	}
}

// Paced with burst 0.2 (6 per 5 s: one unit every 833 ms, a tolerance
// under one unit), three clients that obey Retry-After in whole seconds
// would come back together, a whole number of seconds after being refused
// together, and find one unit between them. Each is told its turn at the
// pacer instead, so from the second window on every retry made at
// Retry-After succeeds. The pacer's grace keeps each unit until the next
// whole second, so every window from the second on admits its whole
// capacity (a pacer that forfeits a unit at once admits one per second: 5
// of 6).
func TestRetryingClientsUsePacedCapacity(t *testing.T) {
	cfg := Defaults(6, 5*time.Second)
	cfg.Pace, cfg.Burst = true, 0.2
	attempts, k0, per, last := retryingRun(t, cfg, time.Millisecond)
	retries, ok := retriesAfterFirst(t, attempts, k0)
	if last < k0+3 || retries == 0 {
		t.Fatalf("done by window %d with %d retries after the first: too little to show anything", last-k0, retries)
	}
	for k := k0 + 1; k < last; k++ {
		if per[k] != cfg.Capacity {
			t.Errorf("window %d admitted %d of %d", k-k0, per[k], cfg.Capacity)
		}
	}
	t.Logf("admitted per window %v; %d of %d retries after the first window succeeded, %d attempts in all", per, ok, retries, len(attempts))
}

// Under the fair policy (10 per 5 s), a busy client sends a request 2 ms
// after its last answer and obeys Retry-After in whole seconds, while a
// light one takes one unit at the start of each window. The busy client
// gets what the light one leaves: from the second window on, every window
// admits at least 9 of its 10.
// Counting the rest of the light client's guarantee as owed to it until
// the window's end told the busy one the window's end instead: 6 a window.
func TestBusyClientGetsWhatALightOneLeavesUnderFair(t *testing.T) {
	cfg := Defaults(10, 5*time.Second)
	cfg.Policy = Fair{}
	store := NewMemStore()
	workers := []*Limiter{newLimiter(t, cfg, store), newLimiter(t, cfg, store)}
	start := t0.Add(5 * time.Second)
	k0, _, _ := WindowAt(start, cfg.Cycle, cfg.WindowOffset)
	const windows = 6
	per := map[int64]int{}
	busy, light := start.Add(2*time.Millisecond), start.Add(time.Millisecond)
	end := start.Add(windows * cfg.Cycle)
	for n := 0; ; n++ {
		client, at := "busy", &busy
		if light.Before(busy) {
			client, at = "light", &light
		}
		if !at.Before(end) {
			break
		}
		d := workers[n%2].AdmitAt(*at, client)
		k, s, _ := WindowAt(*at, cfg.Cycle, cfg.WindowOffset)
		if d.Allowed {
			per[k]++
		}
		switch {
		case client == "light":
			light = s.Add(cfg.Cycle + time.Millisecond)
		case d.Allowed:
			busy = busy.Add(2 * time.Millisecond)
		default:
			busy = busy.Add((d.RetryAfter+time.Second-1)/time.Second*time.Second + 2*time.Millisecond)
		}
	}
	for k := k0 + 1; k < k0+windows; k++ {
		if per[k] < 9 {
			t.Errorf("window %d admitted %d of 10, want at least 9: the busy client was not lent what the light one left", k-k0, per[k])
		}
	}
	t.Logf("admitted per window from the first: %v", per)
}

// A newcomer told pending near the window's end, obeying Retry-After, is
// admitted at its retry, under every policy: the window's first re-plan
// counts it.
func TestPendingNewcomerRetryingIntoTheNextWindow(t *testing.T) {
	for _, pol := range []Policy{Seed{Reservation: 0.1}, Static{}, Fair{}} {
		cfg := Defaults(20, time.Second)
		cfg.Policy, cfg.MinCycle = pol, 100*time.Millisecond
		l := newLimiter(t, cfg, NewMemStore())
		l.AdmitAt(t0.Add(100*time.Millisecond), "old")
		l.AdmitAt(t0.Add(940*time.Millisecond), "other") // a re-plan at 0.94 s
		first := l.AdmitAt(t0.Add(960*time.Millisecond), "new")
		if first.Reason != ReasonPending {
			t.Fatalf("%s: the newcomer at 0.96 s: %+v, want pending", pol.Name(), first)
		}
		retry := t0.Add(960 * time.Millisecond).Add(first.RetryAfter)
		if d := l.AdmitAt(retry, "new"); !d.Allowed {
			t.Errorf("%s: told %v, the retry at %v was refused: %+v", pol.Name(), first.RetryAfter, retry.Sub(t0), d)
		}
	}
}
