package engine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// Clients refused one after another by a spent pacer, each told its turn
// from a moment of its own, all get in when each comes at its turn (whole
// seconds after the refusal, as Retry-After counts, rounded up from what
// it is told), or all up to turnSlack later: no two are told a unit only
// one of them can have.
func TestTurnsLetEveryToldClientIn(t *testing.T) {
	sec := int64(time.Second)
	for _, c := range []struct {
		capacity int64
		cycle    time.Duration
		burst    float64
	}{{6, 5 * time.Second, 0.2}, {100, 10 * time.Second, 0.1}, {10, time.Second, 0.5}, {3, 10 * time.Second, 0}} {
		cfg := Defaults(c.capacity, c.cycle)
		cfg.Pace, cfg.Burst = true, c.burst
		pp := paceParams(&cfg)
		rng := rand.New(rand.NewPCG(uint64(c.capacity), 7))
		for run := 0; run < 200; run++ {
			now := t0.UnixNano() + rng.Int64N(sec)
			tat := now + pp.tolerance + 1 + rng.Int64N(pp.interval) // nothing fits now
			var turns []turn
			for i := range maxTurns {
				x := now
				if rng.IntN(2) == 0 {
					x += rng.Int64N(int64(cfg.Cycle))
				}
				var told int64
				told, turns = addTurn(turns, uint32(i+1), tat, now, x, turnHorizon(&cfg), pp)
				at := int64(-1)
				for _, u := range turns {
					if u.client == uint32(i+1) {
						at = u.at
					}
				}
				if told == 0 && at < 0 {
					continue // beyond the horizon: no turn
				}
				if at < x || (at-now)%sec != 0 || told < x || told > at || told <= at-sec {
					t.Fatalf("%+v: turn %v after now, told %v, for a client that could come %v after now: want whole seconds, no sooner, and told within the second before", c, time.Duration(at-now), time.Duration(told-now), time.Duration(x-now))
				}
			}
			tt, late := tat, rng.Int64N(min(turnSlack, pp.grace+pp.tolerance)+1)
			for _, u := range turns {
				m, next := paceFit(tt, u.at+late, 1, pp)
				if m != 1 {
					t.Fatalf("%+v: client %d, come %v after its turn %v after now, finds no unit (turns %v)", c, u.client, time.Duration(late), time.Duration(u.at-now), turns)
				}
				tt = next
			}
		}
	}
}

// A turn is the earliest that fits: a client that could come before a
// turn given earlier, with a unit for both, is not put behind it; one
// refused with another by a pacer of a unit every 833 ms comes a second
// after it.
func TestTurnAtIsTheEarliestThatFits(t *testing.T) {
	cfg := Defaults(6, 5*time.Second)
	cfg.Pace, cfg.Burst = true, 0.2
	pp := paceParams(&cfg)
	sec := int64(time.Second)
	now := t0.UnixNano()
	idle := now - 10*sec
	if _, got := turnAt(idle, now, now, nil, pp); got != now {
		t.Errorf("an idle pacer: turn %v after now, want now", time.Duration(got-now))
	}
	if _, got := turnAt(idle, now, now, []turn{{client: 1, at: now + 3*sec}}, pp); got != now {
		t.Errorf("an idle pacer with a turn in 3 s: turn %v after now, want now", time.Duration(got-now))
	}
	spent := now + pp.tolerance + pp.interval/2 // the next unit fits in about 400 ms
	told, first := turnAt(spent, now, now, nil, pp)
	if first != now+sec || told != spent-pp.tolerance {
		t.Errorf("a spent pacer: turn %v after now, told %v, want 1s, told when its unit fits", time.Duration(first-now), time.Duration(told-now))
	}
	if _, second := turnAt(spent, now, now, []turn{{client: 1, at: first}}, pp); second != now+2*sec {
		t.Errorf("refused with another: turn %v after now, want 2s", time.Duration(second-now))
	}
	if _, got := turnAt(spent, now, now, []turn{{client: 1, at: now + 3*sec}}, pp); got != now+sec {
		t.Errorf("a spent pacer with a turn in 3 s: turn %v after now, want 1s (a unit for each)", time.Duration(got-now))
	}
}

// Turns are settled on every update of the pace record: a client's own
// goes (it took a unit, or gets a new turn), and so do those whose client
// did not come within bookingHold, and those a clock far ahead gave.
func TestSettleTurns(t *testing.T) {
	sec := int64(time.Second)
	now := t0.UnixNano()
	turns := []turn{{client: 1, at: now - 3*sec}, {client: 2, at: now - sec}, {client: 3, at: now + sec}, {client: 4, at: now + 2*sec}, {client: 5, at: now + 60*sec}}
	got := settleTurns(turns, 3, now, 10*sec)
	if len(got) != 2 || got[0].client != 2 || got[1].client != 4 {
		t.Errorf("settled %v, want the turns of clients 2 and 4", got)
	}
}

// The pace record keeps its turns sorted, few, and sealed.
func TestPaceRecordRefusesImpossibleTurns(t *testing.T) {
	ok := pace{tat: 5, turns: []turn{{client: 1, at: 7}, {client: 2, at: 9}}}
	if v, err := decodePace(appendPace(nil, ok)); err != nil || len(v.turns) != 2 || v.tat != 5 || v.turns[1] != ok.turns[1] {
		t.Fatalf("round trip: %+v, %v", v, err)
	}
	unsorted := pace{tat: 5, turns: []turn{{client: 1, at: 9}, {client: 2, at: 7}}}
	if _, err := decodePace(appendPace(nil, unsorted)); err == nil {
		t.Error("accepted turns out of order")
	}
	many := pace{tat: 5, turns: make([]turn, maxTurns+1)}
	if _, err := decodePace(appendPace(nil, many)); err == nil {
		t.Errorf("accepted %d turns", maxTurns+1)
	}
}

// turnless is a store that forgets every turn the pace record is given.
type turnless struct{ Store }

func (s turnless) Set(key string, value []byte, cas uint32) error {
	if strings.HasSuffix(key, "/pace") {
		if v, err := decodePace(value); err == nil {
			v.turns = nil
			value = appendPace(nil, v)
		}
	}
	return s.Store.Set(key, value, cas)
}

// Turns change what a refused client is told, never what is admitted: the
// same traffic (two workers, clocks a little apart, costs of 1 and 2,
// clients that ignore Retry-After and ask many times a window, which
// workers refuse locally until they could succeed) is decided alike with
// turns and without them, under each policy, paced with and without
// burst.
func TestTurnsChangeNoAdmission(t *testing.T) {
	for _, pol := range []Policy{Seed{}, Fair{}, Static{}} {
		for _, burst := range []float64{0, 0.2, 0.5} {
			cfg := Defaults(40, 5*time.Second)
			cfg.Policy, cfg.Pace, cfg.Burst = pol, true, burst
			run := func(store Store) (decided []bool, turns int) {
				ws := []*Limiter{newLimiter(t, cfg, store), newLimiter(t, cfg, store)}
				rng := rand.New(rand.NewPCG(uint64(burst*10), 3))
				at := t0.Add(cfg.Cycle)
				for i := 0; i < 4000; i++ {
					at = at.Add(time.Duration(rng.Int64N(int64(10 * time.Millisecond))))
					w := rng.IntN(2)
					skew := time.Duration(w) * 3 * time.Millisecond
					d := ws[w].AdmitNAt(at.Add(skew), fmt.Sprintf("c%d", rng.IntN(4)), 1+rng.Int64N(2))
					decided = append(decided, d.Allowed)
					if d.Turn {
						turns++
					}
					if i%25 == 0 {
						ws[rng.IntN(2)].TickAt(at)
					}
				}
				return decided, turns
			}
			with, turns := run(NewMemStore())
			without, _ := run(turnless{NewMemStore()})
			if turns == 0 {
				t.Fatalf("%T, burst %v: no refusal was told a turn: the test shows nothing", pol, burst)
			}
			for i := range with {
				if with[i] != without[i] {
					t.Fatalf("%T, burst %v: request %d %s with turns, %s without", pol, burst, i, verdict(with[i]), verdict(without[i]))
				}
			}
		}
	}
}

func verdict(ok bool) string {
	if ok {
		return "admitted"
	}
	return "refused"
}

// A worker whose clock reads far behind the pace record (the record's
// next unit more than a cycle ahead of it) leaves the record as it is on
// a refusal, and gives no turn: only a worker that takes units resets a
// pace set by a clock far ahead.
func TestRefusalLeavesAPaceFarAhead(t *testing.T) {
	cfg := Defaults(6, 5*time.Second)
	cfg.Pace, cfg.Burst = true, 0.2
	store := NewMemStore()
	l := newLimiter(t, cfg, store)
	now := t0.UnixNano()
	ahead := appendPace(nil, pace{tat: now + 2*int64(cfg.Cycle)})
	if err := store.Set(l.view.paceKey, ahead, 0); err != nil {
		t.Fatal(err)
	}
	if _, h := l.view.paced(0, 0, now, 1, now+int64(time.Second)); h.turnAt != 0 {
		t.Errorf("told a turn %v after now under a pace far ahead", time.Duration(h.turnAt-now))
	}
	if raw, _, err := store.Get(l.view.paceKey); err != nil || string(raw) != string(ahead) {
		t.Errorf("a refusal rewrote the pace record: %v", err)
	}
	if m, _ := l.view.paced(1, 1, now, 1, 0); m != 1 {
		t.Errorf("a take under a pace far ahead passed %d, want it reset and the unit through", m)
	}
}

// Turns do not slow clients that obey Retry-After, even when there are
// more of them than units (clients without a share get no turn: theirs
// would be lost at their turn, and those told after them would wait): the
// same clients finish no later with turns than without, but for the tail
// of the last windows, where shares lag the clients that are done (up to
// two cycles).
func TestTurnsDoNotSlowObeyingClients(t *testing.T) {
	for _, c := range []struct {
		capacity int64
		cycle    time.Duration
		burst    float64
		clients  int
	}{{6, 5 * time.Second, 0.2, 3}, {6, 5 * time.Second, 0.2, 5}, {3, 10 * time.Second, 0, 5}, {4, 2 * time.Second, 0, 5}, {10, 10 * time.Second, 0, 12}} {
		cfg := Defaults(c.capacity, c.cycle)
		cfg.Pace, cfg.Burst = true, c.burst
		took := func(store Store) time.Duration {
			ws := []*Limiter{newLimiter(t, cfg, store), newLimiter(t, cfg, store)}
			start := t0.Add(c.cycle + 20*time.Millisecond)
			out := retryingClients(ws, start, time.Millisecond, c.clients, 10)
			return out[len(out)-1].at.Sub(start)
		}
		with, without := took(NewMemStore()), took(turnless{NewMemStore()})
		t.Logf("%d per %v, burst %v, %d clients: done after %v with turns, %v without", c.capacity, c.cycle, c.burst, c.clients, with, without)
		if with > without+2*c.cycle {
			t.Errorf("%d per %v, burst %v, %d clients: turns slowed them from %v to %v", c.capacity, c.cycle, c.burst, c.clients, without, with)
		}
	}
}
