package engine

// Bookings of the window budget through the limiter: what a client's own
// request, a bulk cost, or ordinary traffic do with them (rules.go,
// "Bookings of the window budget").

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/internal/capcheck"
)

// raceStore makes the next bucket write after a budget write lose its CAS
// once, as when another worker wrote the bucket meanwhile
// (update reads again and calls the callback again).
type raceStore struct {
	Store
	armed, on bool
	watch     string
}

func (s *raceStore) Set(key string, v []byte, cas uint32) error {
	if s.on && key == s.watch {
		s.armed = true
	} else if s.armed && strings.Contains(key, "/c/") {
		s.armed, s.on = false, false
		return ErrCASMismatch
	}
	return s.Store.Set(key, v, cas)
}

// The first attempt of sync's bucket update books the client's unit
// (bookUnits); the bucket CAS is lost; the second attempt calls take again
// and must not take the client's own booking, made by this very request,
// for an early ask (which cancels it).
func TestBookingSurvivesItsOwnRequestsRetry(t *testing.T) {
	t.Run("fair pool", func(t *testing.T) { budgetBookingRetry(t, false) })
	t.Run("fair pool, no race (control)", func(t *testing.T) { budgetBookingRetry(t, true) })
}

func budgetBookingRetry(t *testing.T, noRace bool) {
	cfg := Defaults(10, 5*time.Second)
	cfg.Policy = Fair{}
	store := &raceStore{Store: NewMemStore()}
	l := newLimiter(t, cfg, store)
	store.watch = l.view.budgetKey
	if err := l.RegisterAt(t0, "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(5*time.Second + 20*time.Millisecond)
	l.TickAt(now)
	var d Decision
	for i := 0; i < 30; i++ {
		if d = l.AdmitAt(now, "a"); !d.Allowed {
			break
		}
	}
	// "a" was refused by the gate (and booked, or not: control). Now b,
	// with the race armed for its refusal.
	for i := 0; i < 30; i++ {
		store.on = !noRace
		if d = l.AdmitAt(now, "b"); !d.Allowed {
			break
		}
	}
	store.on = false
	raw, _, _ := store.Get(l.view.budgetKey)
	v, err := decodeBudget(raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("b refused: %+v; bookings %+v", d, v.booked)
	if len(v.booked) == 0 {
		t.Fatalf("nothing booked: the test shows nothing")
	}
	for _, b := range v.booked {
		if b.n == 0 {
			t.Errorf("booking cancelled by the request's own CAS retry: %+v", b)
		}
	}
}

type keyResets struct {
	NopObserver
	keys []string
}

func (r *keyResets) ValueReset(k string, _ error) { r.keys = append(r.keys, k) }

// Limiter level: 8 clients of a paced limit of 6 per 5 s each ask once a
// second: no value is reset (no clock moved, nothing was corrupted).
func TestBookingsResetNothingUnderOrdinaryTraffic(t *testing.T) {
	cfg := Defaults(6, 5*time.Second)
	cfg.Pace, cfg.Burst = true, 0.2
	store := NewMemStore()
	obs := &keyResets{}
	l, err := New(cfg, store, WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 8; i++ {
		ids = append(ids, fmt.Sprintf("c%d", i))
	}
	if err := l.RegisterAt(t0, ids...); err != nil {
		t.Fatal(err)
	}
	var admitted []time.Time
	for s := 0; s < 30; s++ {
		now := t0.Add(time.Duration(s)*time.Second + 100*time.Millisecond)
		l.TickAt(now)
		for i, c := range ids {
			if l.AdmitAt(now.Add(time.Duration(i)*time.Millisecond), c).Allowed {
				admitted = append(admitted, now.Add(time.Duration(i)*time.Millisecond))
			}
		}
	}
	t.Logf("most in a sliding cycle %d, PacedMost %d", capcheck.SlidingMost(admitted, cfg.Cycle), PacedMost(&cfg))
	if len(obs.keys) > 0 {
		t.Errorf("%d value resets with no corruption and no clock step: %v", len(obs.keys), obs.keys[:min(3, len(obs.keys))])
	}
}

// Fair, no pacing. A client refused by the borrow gate for a request of
// cost 50 must not be booked 50 units to claim past the gate later: that
// would take the late pool in bulk from the clients the gate ranks first
// (only requests of one unit are booked).
func TestBulkRequestIsNotBookedPastTheGate(t *testing.T) {
	t.Run("booking kept", func(t *testing.T) { bulkClaim(t, false) })
	t.Run("booking dropped (control)", func(t *testing.T) { bulkClaim(t, true) })
}

func bulkClaim(t *testing.T, drop bool) {
	store := NewMemStore()
	cfg := Defaults(100, 10*time.Second)
	cfg.Policy = Fair{}
	l := newLimiter(t, cfg, store)
	others := []string{"b", "c", "d"}
	if err := l.RegisterAt(t0, append(others, "a")...); err != nil {
		t.Fatal(err)
	}
	w := t0.Add(10 * time.Second)
	l.TickAt(w)
	now := w.Add(500 * time.Millisecond)
	// a takes what its gate allows, one unit at a time, until refused.
	var d Decision
	got := 0
	for i := 0; i < 100; i++ {
		if d = l.AdmitAt(now, "a"); !d.Allowed {
			break
		}
		got++
	}
	now = now.Add(d.RetryAfter)
	if d = l.AdmitAt(now, "a"); d.Allowed { // claims its one booked unit
		got++
	}
	t.Logf("a had %d units by +%v", got, now.Sub(w))
	d = l.AdmitNAt(now, "a", 50) // no room: booked 50 for the next unit's time
	now = now.Add(d.RetryAfter)
	if drop { // control: the same retry with the booking gone
		raw, cas, _ := store.Get(l.view.budgetKey)
		v, _ := decodeBudget(raw)
		v.booked = nil
		_ = store.Set(l.view.budgetKey, appendBudget(nil, v), cas)
	}
	d = l.AdmitNAt(now, "a", 50)
	t.Logf("a's cost-50 retry at +%v: allowed=%v", now.Sub(w), d.Allowed)
	left := 0
	for _, c := range others {
		n, _ := send(l, now.Add(10*time.Millisecond), c, 30)
		left += n
	}
	t.Logf("b, c, d then get %d of 90 asked", left)
	if d.Allowed {
		t.Errorf("a got 50 units at +%v of a 10 s window (its gate had room for 1)", now.Sub(w))
	}
}

// The window's last unit is booked for one client only: two clients the
// gate refuses together, with one unit left, are not both told of it. The
// one booked takes it at its moment; the other is told the window's end.
func TestLastUnitIsBookedOnce(t *testing.T) {
	cfg := Defaults(10, 5*time.Second)
	cfg.Policy = Fair{}
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(30 * time.Millisecond)
	for _, c := range []string{"a", "b", "c"} {
		for i := 0; i < 3; i++ {
			if d := l.AdmitAt(now, c); !d.Allowed {
				t.Fatalf("set-up: %s's request %d refused: %+v", c, i, d)
			}
		}
	}
	da, db := l.AdmitAt(now, "a"), l.AdmitAt(now, "b")
	if da.Allowed || db.Allowed {
		t.Fatalf("set-up: a %+v, b %+v; want both held back by the gate", da, db)
	}
	admitted := 0
	for _, c := range []struct {
		id string
		d  Decision
	}{{"a", da}, {"b", db}} {
		if c.d.RetryAfter >= c.d.Reset {
			continue // told the window's end
		}
		if d := l.AdmitAt(now.Add(c.d.RetryAfter), c.id); !d.Allowed {
			t.Errorf("%s retried at its Retry-After %v, before the window's end, and was refused: %+v", c.id, c.d.RetryAfter, d)
		} else {
			admitted++
		}
	}
	if admitted != 1 {
		t.Errorf("%d of a and b were told of the one unit left and got it, want 1 (a: %+v, b: %+v)", admitted, da, db)
	}
}

// owedAfter over a client's takes in a window, with a guarantee of 6: its
// first take adds what it leaves of what it is expected to take of its
// guarantee (what it asked for in the window before, or twice what it has
// had), the next ones pay that off, and takes past it change nothing; its
// cap bounds what it is expected to take. seenAfter counts what it was
// expected to take, at its first take only.
func TestOwedAfter(t *testing.T) {
	gate := func(had, expects int64) borrowGate {
		return borrowGate{on: true, had: had, guar: 6, reach: 6, expects: expects}
	}
	capped := gate(0, 3)
	capped.reach = 2
	for _, c := range []struct {
		name              string
		owed              int64
		gate              borrowGate
		moved, want, seen int64
	}{
		{"first take, part of what it asked for before", 2, gate(0, 3), 1, 4, 3},
		{"first take of all it asked for before: expected to double it", 2, gate(0, 3), 3, 5, 3},
		{"first take past its guarantee", 2, gate(0, 3), 7, 2, 3},
		{"first take refused: not a client that took", 2, gate(0, 3), 0, 2, 0},
		{"a client that asked for nothing before is expected to double what it had", 2, gate(0, 0), 1, 3, 0},
		{"... up to its guarantee", 0, gate(0, 0), 4, 2, 0},
		{"... and its cap", 0, capped, 1, 1, 3},
		{"a light client's one unit holds back one more", 2, gate(0, 1), 1, 3, 1},
		{"a later take pays off", 4, gate(4, 6), 1, 3, 0},
		{"a take at twice what it had expects more", 4, gate(2, 3), 1, 5, 0},
		{"a later take past it", 4, gate(4, 6), 5, 2, 0},
		{"a take past its guarantee already", 4, gate(6, 6), 2, 4, 0},
		{"never below zero (a first take counted on another worker too)", 1, gate(4, 6), 2, 0, 0},
		{"no gate", 4, borrowGate{}, 2, 4, 0},
	} {
		owed, seen := owedAfter(c.owed, c.gate, c.moved), seenAfter(0, c.gate, c.moved)
		if owed != c.want || seen != c.seen {
			t.Errorf("%s: owedAfter(%d, had %d expects %d, %d) = %d, seenAfter(0, …) = %d; want %d, %d", c.name, c.owed, c.gate.had, c.gate.expects, c.moved, owed, seen, c.want, c.seen)
		}
	}
}

// A unit booked for a borrower is still the guarantee of a client that
// has had nothing in the window: under fair, six clients of guarantee 1
// in a capacity of 6, five take theirs early, one of them is refused more
// and booked the last unit, and the sixth, asking late in the window, is
// admitted all the same: its guarantee holds at any time in the window.
func TestGuaranteeComesBeforeABooking(t *testing.T) {
	cfg := Defaults(6, time.Second)
	cfg.Policy = Fair{}
	l := newLimiter(t, cfg, NewMemStore())
	ids := []string{"c0", "c1", "c2", "c3", "c4", "c5"}
	if err := l.RegisterAt(t0, ids...); err != nil {
		t.Fatal(err)
	}
	for w := 1; w <= 4; w++ {
		start := t0.Add(time.Duration(w) * cfg.Cycle)
		for i, id := range []string{"c0", "c1", "c2", "c4", "c5"} {
			if d := l.AdmitAt(start.Add(time.Duration(50+10*i)*time.Millisecond), id); !d.Allowed {
				t.Fatalf("window %d: %s refused its guarantee: %+v", w, id, d)
			}
		}
		if d := l.AdmitAt(start.Add(300*time.Millisecond), "c1"); d.Allowed {
			t.Fatalf("window %d: c1 admitted past its guarantee while c3 has not asked: %+v", w, d)
		}
		if d := l.AdmitAt(start.Add(950*time.Millisecond), "c3"); !d.Allowed {
			t.Errorf("window %d: c3, asking for its guarantee late in the window, refused: %+v", w, d)
		}
	}
}

// Under fair (10 per 5 s), three clients that each asked for 4 in the
// window before come one after the other in a window: each takes its
// guarantee of 3 and is refused its fourth before the next one's first
// take. The pool's one unit past the guarantees is booked once: a client
// told a time within the window finds its unit there, and the others are
// told the window's end. Counting only the guarantees of the clients that
// had taken booked it for the first two, and the second's retry failed.
func TestAGuaranteeNotYetTakenIsNotBooked(t *testing.T) {
	cfg := Defaults(10, 5*time.Second)
	cfg.Policy = Fair{}
	ids := []string{"a", "b", "c"}
	_, admit := alternating(t, cfg, NewMemStore(), ids...)
	for w := 1; w <= 3; w++ {
		at := t0.Add(time.Duration(w)*cfg.Cycle + 10*time.Millisecond)
		told := map[string]time.Time{}
		for _, id := range ids {
			for i := 0; i < 4; i++ {
				at = at.Add(2 * time.Millisecond)
				d := admit(at, id)
				switch {
				case i < 3 && !d.Allowed:
					t.Fatalf("window %d: %s refused its guarantee: %+v", w, id, d)
				case i == 3 && d.Allowed && w > 1:
					t.Fatalf("window %d: %s admitted past its guarantee at the window's start: %+v", w, id, d)
				case i == 3 && !d.Allowed && d.RetryAfter < d.Reset:
					told[id] = at.Add(d.RetryAfter)
				}
			}
		}
		if w == 1 {
			continue // the window whose demand the next ones are planned from
		}
		if len(told) == 0 {
			t.Errorf("window %d: nobody was told of the pool's unit", w)
		}
		for _, id := range ids {
			if when, ok := told[id]; ok {
				if d := admit(when, id); !d.Allowed {
					t.Errorf("window %d: %s, told its unit at %v, was refused then: %+v", w, id, when.Sub(t0), d)
				}
			}
		}
	}
}
