package engine

// Bookings through the limiter: what a client's own request, a hostile
// cost, or ordinary traffic can do to them (rules.go, "Bookings").

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/internal/capcheck"
)

// paceReadable reports whether st would be read back whole at t: its tat
// not reset, and none of its bookings dropped.
func paceReadable(st *paceState, t int64, cfg *Config, pp paceParam) bool {
	c := paceState{tat: st.tat, booked: append([]booking(nil), st.booked...)}
	return st.tat <= t+int64(cfg.Cycle)+int64(cfg.MinCycle)+pp.tolerance && !dropImplausible(&c, t, cfg, pp)
}

// raceStore makes the next bucket write after a pace (or budget) write
// lose its CAS once, as when another worker wrote the bucket meanwhile
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

// Pacer booking: the first attempt of sync's bucket update books the
// client's slot (paced); the bucket CAS is lost; the second attempt calls
// take again and must not take the client's own booking, made by this
// very request, for an early ask (which cancels it).
func TestBookingSurvivesItsOwnRequestsRetry(t *testing.T) {
	t.Run("pacer", func(t *testing.T) { bookingRetry(t, false) })
	t.Run("pacer, no race (control)", func(t *testing.T) { bookingRetry(t, true) })
	t.Run("fair pool", func(t *testing.T) { budgetBookingRetry(t, false) })
	t.Run("fair pool, no race (control)", func(t *testing.T) { budgetBookingRetry(t, true) })
}

func bookingRetry(t *testing.T, noRace bool) {
	cfg := Defaults(6, 5*time.Second)
	cfg.Pace, cfg.Burst = true, 0.2
	store := &raceStore{Store: NewMemStore()}
	l := newLimiter(t, cfg, store)
	store.watch = l.view.paceKey
	if err := l.RegisterAt(t0, "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(5*time.Second + 20*time.Millisecond)
	l.TickAt(now)
	var d Decision
	for i := 0; i < 10; i++ { // until the pacer refuses someone
		c := string(rune('a' + i%3))
		if i == 2 && !noRace {
			store.on = true
		}
		if d = l.AdmitAt(now, c); !d.Allowed {
			break
		}
	}
	var st paceState
	raw, _, _ := store.Get(l.view.paceKey)
	if err := decodePace(raw, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("refused: %+v; bookings %+v", d, st.booked)
	if len(st.booked) == 0 {
		t.Fatalf("nothing booked: the test shows nothing")
	}
	for _, b := range st.booked {
		if b.n == 0 {
			t.Errorf("a client refused once, told %v, has its booking cancelled by its own request's CAS retry: %+v", d.RetryAfter, b)
		}
	}
}

// The same for the fair pool's bookings (bookUnits in attempt 1,
// settleBookings in attempt 2).
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

// A request costing more than the capacity is refused for its share, and
// must not book more pacer units than the pacer passes at once (which
// would block the pacer for everyone, or be read back as implausible and
// reset the pace record with every other client's booking).
func TestOversizedCostBooksNothing(t *testing.T) {
	cfg := Defaults(100, 10*time.Second)
	cfg.MinCycle = time.Second
	cfg.Pace, cfg.Burst = true, 0.2
	store := NewMemStore()
	obs := &keyResets{}
	l, err := New(cfg, store, WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 10; i++ {
		ids = append(ids, fmt.Sprintf("c%d", i))
	}
	if err := l.RegisterAt(t0, append(ids, "h")...); err != nil {
		t.Fatal(err)
	}
	l.TickAt(t0)
	at := t0.Add(5 * time.Second)
	// Honest clients use the pacer until it refuses.
	admitted := 0
	for _, c := range ids {
		for k := 0; k < 5; k++ {
			if l.AdmitAt(at, c).Allowed {
				admitted++
			}
		}
	}
	var st paceState
	raw, _, _ := store.Get(l.view.paceKey)
	if err := decodePace(raw, &st); err != nil {
		t.Fatal(err)
	}
	tatBefore := st.tat
	t.Logf("honest admitted %d at +5s; tat %v ahead, %d bookings", admitted, time.Duration(st.tat-at.UnixNano()), len(st.booked))
	// The hostile request.
	d := l.AdmitNAt(at, "h", cfg.Capacity+1)
	t.Logf("oversized: %+v", d)
	raw, _, _ = store.Get(l.view.paceKey)
	if err := decodePace(raw, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("pace record after: plausible=%v bookings=%+v", paceReadable(&st, at.UnixNano(), &cfg, paceParams(&cfg)), st.booked)
	// Any next paced take resets the record.
	after := 0
	for _, c := range ids {
		if l.AdmitAt(at.Add(time.Millisecond), c).Allowed {
			after++
		}
	}
	raw, _, _ = store.Get(l.view.paceKey)
	_ = decodePace(raw, &st)
	t.Logf("ValueReset on %v; tat before %d, now %d; admitted right after: %d", obs.keys, tatBefore, st.tat, after)
	if len(obs.keys) > 0 || after > 0 {
		t.Errorf("one oversized request reset the pacer (%d resets) and let %d more units through at once", len(obs.keys), after)
	}
}

// Four clients refused early in a window (share spent) are booked, one
// unit each, for the next window (view.sync: notBefore = the window's
// end), spread by paceTake: the pace record still reads back whole.
func TestNextWindowBookingsReadBack(t *testing.T) {
	cfg := Defaults(6, 5*time.Second) // min_cycle 500 ms
	cfg.Pace, cfg.Burst = true, 0.2
	pp := paceParams(&cfg)
	start := t0.UnixNano()
	end := start + int64(cfg.Cycle)
	now := start + int64(100*time.Millisecond)
	var st paceState
	for c := uint32(1); c <= 4; c++ {
		_, at, booked, _ := paceTake(&st, c, now, 1, end, false, pp)
		t.Logf("client %d: booked %v at end%+v", c, booked, time.Duration(at-end))
		if !paceReadable(&st, now+1, &cfg, pp) {
			t.Fatalf("after booking client %d the pace record is implausible at the next read: reset whole (bookings %+v)", c, st.booked)
		}
	}
}

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
