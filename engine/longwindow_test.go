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
