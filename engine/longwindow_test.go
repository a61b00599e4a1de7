package engine

import (
	"fmt"
	"testing"
	"time"
)

// TestDayLongWindowFlood: in a window of a day, a flood of one-shot ids
// (one a second for three hours, each asking once) keeps few of them
// counted, however long it lasts: re-plans promote one per min_cycle (a
// minute by default), and a promoted one-shot id is retired after
// oneShotPlans × min_cycle. A genuine newcomer arriving three hours in is
// admitted within about a minute, and the known clients keep their shares:
// each of the three counted then has about a third, the one-shot ids only
// their reservations.
func TestDayLongWindowFlood(t *testing.T) {
	cfg := Defaults(100_000, 24*time.Hour)
	if cfg.MinCycle != time.Minute {
		t.Fatalf("default min_cycle of a day-long window: %v, want 1m", cfg.MinCycle)
	}
	l := newLimiter(t, cfg, NewMemStore())
	start := t0.Truncate(24 * time.Hour)
	if err := l.RegisterAt(start, "a", "b"); err != nil {
		t.Fatal(err)
	}
	at := start.Add(time.Second)
	most := 0
	for i := 0; at.Before(start.Add(3 * time.Hour)); i++ {
		l.AdmitAt(at, fmt.Sprintf("flood-%d", i))
		if i%60 == 0 {
			l.TickAt(at)
			most = max(most, l.ActiveClients())
		}
		at = at.Add(time.Second)
	}
	t.Logf("counted clients during 3 h of one-shot ids: at most %d", most)
	if most > 2+oneShotPlans+2 {
		t.Errorf("up to %d clients counted during the flood, want at most the 2 known ones and about %d one-shot ids", most, oneShotPlans)
	}
	first := at
	for {
		d := l.AdmitAt(at, "genuine")
		if d.Allowed {
			break
		}
		if d.Reason != ReasonPending && d.Reason != ReasonTableFull || d.RetryAfter > cfg.MinCycle+time.Second {
			t.Fatalf("genuine newcomer at %v: %+v, want admitted, or told to retry within min_cycle", at.Sub(first), d)
		}
		at = at.Add(max(d.RetryAfter, time.Second))
		l.AdmitAt(at, fmt.Sprintf("flood-late-%d", at.Unix()))
		if at.Sub(first) > 3*time.Minute {
			t.Fatalf("genuine newcomer still refused %v after its first request: %+v", at.Sub(first), d)
		}
	}
	t.Logf("genuine newcomer admitted %v after its first request", at.Sub(first))
	for _, c := range []string{"a", "b"} {
		if d := l.AdmitAt(at, c); !d.Allowed || d.Limit < 100_000/3*9/10 {
			t.Errorf("%s after the flood: %+v, want admitted with most of a third of the capacity", c, d)
		}
	}
}

// TestRetiredOneShotKeepsItsCap: a client capped at one unit a day that
// asks once is a one-shot id; retired once its one-shot life is over, it
// asks again in the same window and is proven with what it was granted:
// it never gets more than its cap in the window.
func TestRetiredOneShotKeepsItsCap(t *testing.T) {
	cfg := Defaults(1000, 24*time.Hour)
	cfg.MaxShare = 1
	l := newLimiter(t, cfg, NewMemStore())
	start := t0.Truncate(24 * time.Hour)
	if err := l.RegisterAt(start, "a"); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	at := start.Add(time.Hour)
	var d Decision
	for round := 0; round < 4; round++ {
		d = l.AdmitAt(at, "x")
		if d.Allowed {
			admitted++
		}
		t.Logf("x at %v: %s, limit %d", at.Sub(start), d.Reason, d.Limit)
		// Past its one-shot life, with re-plans (other newcomers) after.
		for i := 0; i < 3; i++ {
			at = at.Add(oneShotPlans*cfg.MinCycle/2 + time.Minute)
			l.AdmitAt(at, fmt.Sprintf("other-%d-%d", round, i))
			l.TickAt(at)
		}
	}
	if admitted != 1 {
		t.Errorf("x admitted %d times in the window, want its cap 1", admitted)
	}
	if d.Reason != ReasonOverLimit || d.Limit != 1 {
		t.Errorf("x's last request: %+v, want over_limit at its cap 1 (counted again, not waiting)", d)
	}
}

// TestRetiredOneShotsLockNoNewcomerOut: in a day-long window, one
// promoted one-shot id a minute for six hours (each retired after 20
// minutes, keeping its place) fills the buckets' places; a genuine
// newcomer's proof takes a retired one's place, so it is admitted within
// minutes though few clients are counted.
func TestRetiredOneShotsLockNoNewcomerOut(t *testing.T) {
	cfg := Defaults(100_000, 24*time.Hour) // min_cycle 1m
	cfg.MaxClients = 32                    // 2 buckets, 96 places
	l := newLimiter(t, cfg, NewMemStore())
	start := t0.Truncate(24 * time.Hour)
	if err := l.RegisterAt(start, "a", "b"); err != nil {
		t.Fatal(err)
	}
	at := start.Add(time.Second)
	for i := 0; at.Before(start.Add(6 * time.Hour)); i++ {
		l.AdmitAt(at, fmt.Sprintf("flood-%d", i))
		l.TickAt(at)
		at = at.Add(61 * time.Second)
	}
	admittedWithin(t, l, "genuine", at, 10*time.Minute)
}

// admittedWithin fails t unless client, asking from at and then each time
// its retry-after says (ticking l), is admitted within limit.
func admittedWithin(t *testing.T, l *Limiter, client string, at time.Time, limit time.Duration) {
	t.Helper()
	first := at
	var d Decision
	for at.Sub(first) < limit {
		if d = l.AdmitAt(at, client); d.Allowed {
			t.Logf("%s admitted %v after its first request, %d clients counted", client, at.Sub(first), l.ActiveClients())
			return
		}
		at = at.Add(max(d.RetryAfter, time.Second))
		l.TickAt(at)
	}
	t.Fatalf("%s refused for %v with %d of %d counted: %s, retry-after %v", client, limit, l.ActiveClients(), l.cfg.MaxClients, d.Reason, d.RetryAfter)
}

// TestTargetedOneShotsLockNoNewcomerOut: with the default max_clients,
// an attacker sending one fresh id a minute, each homed in buckets 0 to 4
// (a newcomer's whole probe path), does not lock a newcomer homed in
// bucket 0 out of a day-long limit.
func TestTargetedOneShotsLockNoNewcomerOut(t *testing.T) {
	cfg := Defaults(100_000, 24*time.Hour)
	l := newLimiter(t, cfg, NewMemStore())
	home := func(id string) int { return l.view.home(clientHash(id)) }
	start := t0.Truncate(24 * time.Hour)
	if err := l.RegisterAt(start, "a", "b"); err != nil {
		t.Fatal(err)
	}
	at := start.Add(time.Second)
	n := 0
	for i := 0; n < 400; i++ {
		id := fmt.Sprintf("attacker-%d", i)
		if home(id) > 4 {
			continue
		}
		l.AdmitAt(at, id)
		l.TickAt(at)
		at = at.Add(61 * time.Second)
		n++
	}
	var genuine string
	for i := 0; ; i++ {
		if genuine = fmt.Sprintf("genuine-%d", i); home(genuine) == 0 {
			break
		}
	}
	t.Logf("after %v of one attacker id a minute", at.Sub(start))
	admittedWithin(t, l, genuine, at, 10*time.Minute)
}

// TestRetiredOneShotProvenNextWindowStartsAfresh: a one-shot id of
// yesterday (retired, not yet expired) that asks again today, on a worker
// that holds no state for it, is proven with today's counts: yesterday's
// grant is not charged to today's share (capped at 1 a day here).
func TestRetiredOneShotProvenNextWindowStartsAfresh(t *testing.T) {
	cfg := Defaults(1000, 24*time.Hour)
	cfg.MaxShare = 1
	store := NewMemStore()
	l := newLimiter(t, cfg, store)
	w2 := newLimiter(t, cfg, store) // another worker: holds no state for x
	day0 := t0.Truncate(24 * time.Hour)
	if err := l.RegisterAt(day0, "a"); err != nil {
		t.Fatal(err)
	}
	if d := l.AdmitAt(day0.Add(time.Hour), "x"); !d.Allowed {
		t.Fatalf("x on day 0: %+v", d)
	}
	day1 := day0.Add(24 * time.Hour)
	l.TickAt(day1)
	at := day1.Add(time.Hour)
	var d Decision
	for i := 0; i < 10; i++ {
		d = w2.AdmitAt(at, "x")
		t.Logf("day 1 +%v: %s retry-after %v limit %d", at.Sub(day1), d.Reason, d.RetryAfter, d.Limit)
		if d.Allowed {
			return
		}
		at = at.Add(max(d.RetryAfter, time.Second))
		l.TickAt(at)
		w2.TickAt(at)
		if at.Sub(day1) > 3*time.Hour {
			break
		}
	}
	t.Fatalf("x, capped at 1 a day, never admitted on day 1: %+v", d)
}
