package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/internal/capcheck"
)

// fakeGubernator answers callouts the way Gubernator's token bucket
// (v2.4.0 to v2.13.0) does for one window key: hits up to what remains are consumed, more are
// refused whole (OVER_LIMIT, nothing consumed), negative hits give back,
// hits 0 only read. And its quirk: once a positive hit finds the key at 0,
// every later answer on the key says OVER_LIMIT, consumed or not.
type fakeGubernator struct {
	remaining map[string]int64
	stuck     map[string]bool
	created   map[string]int64 // each key's reset_time, fixed when its count is created
	down      bool
	calls     int
}

func newFakeGubernator() *fakeGubernator {
	return &fakeGubernator{remaining: make(map[string]int64), stuck: make(map[string]bool), created: make(map[string]int64)}
}

// forget drops every count, as a restarted peer that owned every key.
func (g *fakeGubernator) forget() {
	g.remaining, g.stuck = make(map[string]int64), make(map[string]bool)
	for k := range g.created {
		delete(g.created, k)
	}
}

var errDown = errors.New("gubernator unreachable")

func (g *fakeGubernator) answer(call LeaseCall) ([]LeaseReply, error) {
	g.calls++
	if g.down {
		return nil, errDown
	}
	out := make([]LeaseReply, len(call.Hits))
	for i, h := range call.Hits {
		rem, ok := g.remaining[h.Key]
		if !ok {
			rem = h.Limit
			g.remaining[h.Key] = rem
			g.created[h.Key] = int64(g.calls)*1000 + int64(i) // a reset_time unique to this count
		}
		reset := g.created[h.Key]
		if rem == 0 && h.Hits > 0 {
			g.stuck[h.Key] = true
		}
		if h.Hits > rem {
			out[i] = LeaseReply{Over: true, Remaining: rem, Reset: reset}
			continue
		}
		rem -= h.Hits
		g.remaining[h.Key] = rem
		out[i] = LeaseReply{Over: g.stuck[h.Key], Remaining: rem, Reset: reset}
	}
	return out, nil
}

// fleetProcess is one Envoy: workers over one shared store.
type fleetProcess struct {
	workers  []*Limiter
	calls    int
	events   []FleetEvent
	admitted map[int64]int64 // by window
	rr       int
}

func newFleetProcess(t *testing.T, cfg Config, workers int) *fleetProcess {
	t.Helper()
	store := NewMemStore()
	p := &fleetProcess{admitted: make(map[int64]int64)}
	for i := 0; i < workers; i++ {
		l, err := New(cfg, store)
		if err != nil {
			t.Fatal(err)
		}
		p.workers = append(p.workers, l)
	}
	return p
}

// tick runs every worker's tick and fleet step; a callout is answered at
// once (the host's callback comes later, but a test tick is coarser).
func (p *fleetProcess) tick(now time.Time, g *fakeGubernator) {
	for _, w := range p.workers {
		w.TickAt(now)
		if call, ok := w.FleetCallAt(now); ok {
			p.calls++
			replies, err := g.answer(call)
			p.events = append(p.events, w.FleetDoneAt(now, call, replies, err))
		}
	}
}

// request sends one request of client on the next worker.
func (p *fleetProcess) request(now time.Time, client string, cc *capcheck.Checker) bool {
	w := p.workers[p.rr%len(p.workers)]
	p.rr++
	d := w.AdmitAt(now, client)
	if d.Allowed {
		k, _, _ := WindowAt(now, w.cfg.Cycle, w.cfg.WindowOffset)
		p.admitted[k]++
		cc.Admit(capcheck.Admission{Window: k, Cost: 1})
	}
	return d.Allowed
}

// newFleetPair is two processes of two workers each, with capacity
// fleetCap each and the fleet's too, beside one fake Gubernator, and the
// index of the window that starts at fleetEpoch.
func newFleetPair(t *testing.T, fleetCap, fallback int64) (Config, *fakeGubernator, []*fleetProcess, int64) {
	t.Helper()
	cfg := fleetConfig(fleetCap, fleetCap, fallback)
	k0, _, _ := WindowAt(fleetEpoch, cfg.Cycle, 0)
	return cfg, newFakeGubernator(), []*fleetProcess{newFleetProcess(t, cfg, 2), newFleetProcess(t, cfg, 2)}, k0
}

func fleetConfig(fleetCap, capacity, fallback int64) Config {
	cfg := Defaults(capacity, 10*time.Second)
	cfg.Fleet = &Fleet{Capacity: fleetCap, Fallback: fallback, SyncInterval: 500 * time.Millisecond, Timeout: 200 * time.Millisecond}
	return cfg
}

// fleetRun drives processes over synthetic time in 10 ms steps from start to
// end: rate(i, k) is process i's requests per step in window k, spread over
// four clients each.
func fleetRun(procs []*fleetProcess, g *fakeGubernator, cc *capcheck.Checker, start, end time.Time,
	rate func(i int, k int64) int, before func(now time.Time, k int64)) {
	const step = 10 * time.Millisecond
	n := 0
	for now := start; now.Before(end); now = now.Add(step) {
		k, _, _ := WindowAt(now, 10*time.Second, 0)
		if before != nil {
			before(now, k)
		}
		if n%10 == 0 { // ticks every 100 ms, like a 10 s cycle's tick period
			for _, p := range procs {
				p.tick(now, g)
			}
		}
		for i, p := range procs {
			for r := 0; r < rate(i, k); r++ {
				p.request(now, fmt.Sprintf("p%d-c%d", i, r%4), cc)
			}
		}
		n++
	}
}

var fleetEpoch = time.Unix(1_800_000_000, 0) // on a 10 s window edge

func TestFleetBoundAndDemandSplit(t *testing.T) {
	const fleetCap = 200
	cfg, g, procs, k0 := newFleetPair(t, fleetCap, 20)
	cc := capcheck.New(fleetCap)
	// 80/20 for eight windows, then 20/80: together 5 requests per 10 ms,
	// 25 times the fleet capacity.
	rate := func(i int, k int64) int {
		heavy := 0
		if k-k0 >= 8 {
			heavy = 1
		}
		if i == heavy {
			return 4
		}
		return 1
	}
	fleetRun(procs, g, cc, fleetEpoch, fleetEpoch.Add(16*cfg.Cycle), rate, nil)

	if v := cc.Violations(); len(v) > 0 {
		t.Fatalf("fleet over capacity: %v", v)
	}
	// From the third window of each phase on, the heavy process holds the
	// larger part, and the fleet uses most of its capacity.
	for _, k := range []int64{3, 4, 5, 6, 7, 11, 12, 13, 14, 15} {
		heavy, light := procs[0].admitted[k0+k], procs[1].admitted[k0+k]
		if k >= 8 {
			heavy, light = light, heavy
		}
		t.Logf("window %2d: heavy %3d light %3d of %d", k, heavy, light, fleetCap)
		if heavy <= 2*light {
			t.Errorf("window %d: heavy process admitted %d, light %d: want more than twice", k, heavy, light)
		}
		if heavy+light < fleetCap*3/4 {
			t.Errorf("window %d: fleet admitted %d of %d: capacity left idle", k, heavy+light, fleetCap)
		}
	}
}

// A Gubernator that loses every count mid-window (a restarted owner) hands
// out the capacity again; processes that held units of the old counts
// tell by the keys' reset_time and lease nothing more for those windows,
// so no window admits more than the fleet capacity.
func TestFleetLostCountLeasesNothingMore(t *testing.T) {
	const fleetCap = 200
	cfg, g, procs, k0 := newFleetPair(t, fleetCap, 20)
	cc := capcheck.New(fleetCap)
	forgotAt := fleetEpoch.Add(2*cfg.Cycle + 3*time.Second)
	forgot := false
	fleetRun(procs, g, cc, fleetEpoch, fleetEpoch.Add(5*cfg.Cycle), func(int, int64) int { return 2 },
		func(now time.Time, _ int64) {
			if !forgot && !now.Before(forgotAt) {
				g.forget()
				forgot = true
			}
		})
	if v := cc.Violations(); len(v) > 0 {
		t.Errorf("over the fleet capacity after a lost count: %v", v)
	}
	lost := 0
	for _, p := range procs {
		for _, ev := range p.events {
			if ev.LostCount {
				lost++
			}
		}
	}
	if lost == 0 {
		t.Error("no process saw the lost count")
	}
	// Windows after the lost ones lease from fresh keys as usual.
	for k := k0 + 4; k < k0+5; k++ {
		if total := procs[0].admitted[k] + procs[1].admitted[k]; total < fleetCap*3/4 {
			t.Errorf("window %d after the loss: admitted %d of %d", k-k0, total, fleetCap)
		}
	}
}

func TestFleetOneSyncerPerProcess(t *testing.T) {
	cfg := fleetConfig(100, 100, 10)
	g := newFakeGubernator()
	p := newFleetProcess(t, cfg, 4)
	cc := capcheck.New(100)
	fleetRun([]*fleetProcess{p}, g, cc, fleetEpoch, fleetEpoch.Add(3*cfg.Cycle),
		func(int, int64) int { return 1 }, nil)
	// At most one callout per sync interval, whichever worker sends it.
	// One callout per sync interval, whichever worker sends it.
	if n := int(3 * cfg.Cycle / cfg.Fleet.SyncInterval); p.calls != n {
		t.Errorf("%d callouts in %d sync intervals", p.calls, n)
	}
}

// The syncer keeps a schedule of one callout per interval, whatever the
// ticks' jitter: ticks that come a hair early must not stretch every other
// gap by a tick.
func TestSyncDueKeepsTheCadence(t *testing.T) {
	ms := int64(time.Millisecond)
	const interval = 200
	for _, tc := range []struct {
		name   string
		period int64 // ms
		jitter func(i int) int64
	}{
		{"ticks every interval, alternately 1 ms early and late", 200, func(i int) int64 { return int64(1 - 2*(i%2)) }},
		{"ticks every half interval, 3 ms early", 100, func(int) int64 { return -3 }},
		{"ticks every 70 ms, on time", 70, func(int) int64 { return 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			last, calls := int64(0), 0
			var gaps []int64
			span := int64(20_000) // ms
			for i := 0; int64(i)*tc.period <= span; i++ {
				now := 1_800_000_000_000*ms + (int64(i)*tc.period+tc.jitter(i))*ms
				due, sent := syncDue(last, now, interval*ms)
				if due {
					if calls > 0 {
						gaps = append(gaps, (now-last)/ms)
					}
					calls++
					last = sent
				}
			}
			want := int(span/interval) + 1
			if calls < want-1 || calls > want {
				t.Errorf("%d callouts in %d ms at one per %d ms: want %d (gaps %v)", calls, span, interval, want, gaps[:min(len(gaps), 10)])
			}
		})
	}
}

func TestFleetFallbackEpisode(t *testing.T) {
	const fleetCap, fallback = 100, 15
	cfg, g, procs, k0 := newFleetPair(t, fleetCap, fallback)
	cc := capcheck.New(fleetCap + 2*fallback)
	// Gubernator is down in windows 3 to 6 (from mid-window 3 to the start
	// of 7), up otherwise.
	downFrom := fleetEpoch.Add(3*cfg.Cycle + cfg.Cycle/2)
	upAt := fleetEpoch.Add(7 * cfg.Cycle)
	before := func(now time.Time, _ int64) { g.down = !now.Before(downFrom) && now.Before(upAt) }
	fleetRun(procs, g, cc, fleetEpoch, fleetEpoch.Add(12*cfg.Cycle),
		func(int, int64) int { return 1 }, before)

	if v := cc.Violations(); len(v) > 0 {
		t.Fatalf("fleet over capacity plus fallbacks: %v", v)
	}
	for _, p := range procs {
		// Windows 4 to 6 are wholly down: fallback only (nothing leased).
		for k := int64(4); k <= 6; k++ {
			if got := p.admitted[k0+k]; got != fallback {
				t.Errorf("window %d (Gubernator down): admitted %d, want the fallback %d", k, got, fallback)
			}
		}
		var fell, rejoined int
		for _, ev := range p.events {
			if ev.FellBack {
				fell++
			}
			if ev.Rejoined {
				rejoined++
			}
		}
		if fell != 1 || rejoined != 1 {
			t.Errorf("episodes: fell back %d times, rejoined %d times; want one episode", fell, rejoined)
		}
	}
	// Window 7 still has the fallback in force (its leases were not taken
	// ahead); from window 9 on the fleet is bounded by its capacity again.
	for k := int64(9); k < 12; k++ {
		total := procs[0].admitted[k0+k] + procs[1].admitted[k0+k]
		if total > fleetCap {
			t.Errorf("window %d after rejoining: fleet admitted %d > %d", k, total, fleetCap)
		}
		if total < fleetCap*3/4 {
			t.Errorf("window %d after rejoining: fleet admitted %d of %d", k, total, fleetCap)
		}
	}
}

func TestFleetGivesBackWhatAnIdleProcessHolds(t *testing.T) {
	const fleetCap = 100
	cfg, g, procs, k0 := newFleetPair(t, fleetCap, 10)
	cc := capcheck.New(fleetCap)
	// Both busy for three windows, then the second goes idle mid-window 3.
	stop := fleetEpoch.Add(3*cfg.Cycle + cfg.Cycle/5)
	idleAfter := false
	rate := func(i int, _ int64) int {
		if i == 1 && idleAfter {
			return 0
		}
		return 1
	}
	fleetRun(procs, g, cc, fleetEpoch, fleetEpoch.Add(7*cfg.Cycle), rate,
		func(now time.Time, _ int64) { idleAfter = !now.Before(stop) })
	if v := cc.Violations(); len(v) > 0 {
		t.Fatalf("over capacity: %v", v)
	}
	// The idle process holds at most its standing lease; the busy one gets
	// the rest, in the window it went idle and after.
	floor := int64(max(1, fleetCap/64))
	for k := int64(3); k < 7; k++ {
		if got := procs[0].admitted[k0+k]; got < fleetCap-2*floor-procs[1].admitted[k0+k] {
			t.Errorf("window %d: busy process admitted %d (idle one %d): capacity stranded", k, got, procs[1].admitted[k0+k])
		}
	}
}

func TestSizeLeases(t *testing.T) {
	f := &Fleet{Capacity: 1000, Fallback: 10, SyncInterval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond}
	const cycle = int64(10 * time.Second)
	ms := int64(time.Millisecond)
	slot := func(k, leased, used, asked, total int64) fleetSlot {
		return fleetSlot{window: k, leased: leased, used: used, asked: asked, posted: asked, total: total, rem: -1}
	}
	withRem := func(sl fleetSlot, rem int64) fleetSlot { sl.rem = rem; return sl }
	state := func(fallbackUntil int64, slots ...fleetSlot) fleetState {
		s := newFleetState()
		s.fallbackUntil = fallbackUntil
		copy(s.slots[:], slots)
		return s
	}
	// Horizon: 2 sync intervals + timeout = 250 ms; floor: 1000/64 = 15.
	tests := []struct {
		name          string
		s             fleetState
		elapsed, left int64
		want          leasePlan
	}{
		{"no demand yet: the standing lease", state(noWindow), 0, cycle, leasePlan{lease: 15}},
		{"sized on the previous window's rate (200/s: 2 x 50)", state(noWindow, slot(4, 1000, 1000, 2000, 0)), 0, cycle, leasePlan{lease: 100}},
		{"past the first quarter: the previous window no longer counts", state(noWindow, slot(4, 1000, 1000, 2000, 0), slot(5, 0, 0, 0, 0)), 3000 * ms, 7000 * ms, leasePlan{lease: 15}},
		{"enough in hand", state(noWindow, slot(5, 170, 70, 1000, 0)), 5000 * ms, 5000 * ms, leasePlan{}},
		{"early: no more than the demand's share of the fleet", state(noWindow, slot(5, 200, 200, 1000, 4000)), 4000 * ms, 6000 * ms, leasePlan{lease: 50}},
		{"early: the share blends the previous window's demand, fading over the first quarter",
			state(noWindow, slot(4, 1000, 1000, 100, 1000), slot(5, 380, 380, 300, 400)), 1250 * ms, 8750 * ms, leasePlan{lease: 9}},
		{"early: holding more than its share gives the excess back", state(noWindow, slot(5, 300, 100, 1000, 4000)), 4000 * ms, 6000 * ms, leasePlan{giveBack: 50}},
		{"late: no race for the others' shares before the key's remaining is known", state(noWindow, slot(5, 200, 200, 1000, 4000)), 6000 * ms, 4000 * ms, leasePlan{lease: 50}},
		{"late: the rest of its share goes to need (1000 in 6 s: 2 x 42)", state(noWindow, withRem(slot(5, 200, 200, 1000, 1200), 700)), 6000 * ms, 4000 * ms, leasePlan{lease: 84}},
		{"late: beyond its share, only what the others cannot use", state(noWindow, withRem(slot(5, 200, 200, 100, 1000), 700)), 6000 * ms, 4000 * ms, leasePlan{lease: 15}},
		{"late: nothing beyond its share while the others need theirs", state(noWindow, withRem(slot(5, 200, 200, 100, 4000), 700)), 6000 * ms, 4000 * ms, leasePlan{}},
		{"bounded by half the key's remaining", state(noWindow, withRem(slot(5, 200, 200, 1000, 4000), 30)), 6000 * ms, 4000 * ms, leasePlan{lease: 15}},
		{"a key with nothing left is probed, not hit", state(noWindow, withRem(slot(5, 200, 200, 1000, 4000), 0)), 6000 * ms, 4000 * ms, leasePlan{probe: true}},
		{"bounded by the process capacity", state(noWindow, slot(5, 990, 990, 6000, 0)), 6000 * ms, 4000 * ms, leasePlan{lease: 10}},
		{"idle: gives back above 1.5 x the target", state(noWindow, slot(5, 300, 100, 100, 0)), 5000 * ms, 5000 * ms, leasePlan{giveBack: 185}},
		{"near the end: leases ahead", state(noWindow, slot(5, 560, 500, 1950, 0)), 9750 * ms, 250 * ms, leasePlan{ahead: 100}},
		{"near the end: gives back what the rest does not need", state(noWindow, slot(5, 600, 500, 1980, 0)), 9900 * ms, 100 * ms, leasePlan{giveBack: 60, ahead: 100}},
		{"the share is what each side's demand grew by since the window's first answer (1000 of 4000: 250), not the totals (1000 of 4400)",
			state(noWindow, fleetSlot{window: 5, leased: 200, used: 200, asked: 1000, posted: 1000, total: 4400, rem: -1, base: 400}), 4000 * ms, 6000 * ms, leasePlan{lease: 50}},
		{"before the window's first answer, the previous window's split alone (100 of 1000)", state(noWindow, slot(4, 1000, 1000, 100, 1000),
			fleetSlot{window: 5, leased: 0, used: 0, asked: 1000, posted: 1000, total: 1000, rem: -1, base: -1}), 1000 * ms, 9000 * ms, leasePlan{lease: 100}},
		{"ahead: no more than this window's demand share", state(noWindow, slot(5, 560, 500, 1950, 39000)), 9750 * ms, 250 * ms, leasePlan{ahead: 50}},
		{"under a fallback, leasing goes on: what Gubernator grants, it counts", state(6, slot(5, 500, 500, 1950, 0)), 9750 * ms, 250 * ms, leasePlan{lease: 100, ahead: 100}},
		{"the first lease of a key asks at most half the fleet capacity", state(noWindow, slot(5, 0, 0, 0, 0), slot(4, 0, 0, 20000, 0)), 0, cycle, leasePlan{lease: 500}},
		{"the first lease ahead too", state(noWindow, slot(5, 0, 0, 90000, 0)), 9800 * ms, 200 * ms, leasePlan{lease: 500, ahead: 500}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			got := sizeLeases(&s, f, 1000, 5, tc.elapsed, tc.left, cycle)
			if got != tc.want {
				t.Errorf("sizeLeases = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestApplyReplies(t *testing.T) {
	call := LeaseCall{ID: 1, Hits: []LeaseHit{{Window: 5, Hits: 40}, {Window: 6, Hits: 20}}}
	t.Run("granted and over limit", func(t *testing.T) {
		s := newFleetState()
		ev := applyReplies(&s, call, []LeaseReply{{Remaining: 10}, {Over: true, Remaining: 7}}, nil, 5)
		if ev.Leased != 40 || ev.Failed || s.slot(5).leased != 40 || s.slot(6).leased != 0 || s.slot(6).rem != 7 {
			t.Errorf("event %+v, slots %+v", ev, s.slots)
		}
	})
	t.Run("one episode for repeated failures", func(t *testing.T) {
		s := newFleetState()
		first := applyReplies(&s, call, nil, errDown, 5)
		second := applyReplies(&s, call, nil, errDown, 6)
		f := &Fleet{Fallback: 9}
		if !first.FellBack || second.FellBack || !second.Failed || !s.down || s.allowance(9, f) != 9 {
			t.Errorf("first %+v second %+v: want one episode, the fallback in force in every window", first, second)
		}
		back := applyReplies(&s, LeaseCall{ID: 2, Hits: []LeaseHit{{Window: 7, Hits: 4}, {Window: 8, Hits: 20}}}, []LeaseReply{{}, {}}, nil, 7)
		if !back.Rejoined || back.Leased != 24 {
			t.Errorf("rejoin %+v: want the leases counted", back)
		}
		// The window of the answer keeps the fallback as its floor (what was
		// admitted under it is admitted); the next holds what it leased.
		if got := []int64{s.allowance(7, f), s.allowance(8, f), s.allowance(9, f)}; got[0] != 9 || got[1] != 20 || got[2] != 0 {
			t.Errorf("allowance after the rejoin in window 7: %v, want [9 20 0]", got)
		}
	})
	t.Run("give-back was counted before the call", func(t *testing.T) {
		s := newFleetState()
		s.claim(5).leased = 30
		ev := applyReplies(&s, LeaseCall{Hits: []LeaseHit{{Window: 5, Hits: -10}}}, []LeaseReply{{}}, nil, 5)
		if ev.GivenBack != 10 || s.slot(5).leased != 30 {
			t.Errorf("event %+v, slot %+v", ev, *s.slot(5))
		}
	})
}

func TestFleetDoneAtRefusesMismatchedReplies(t *testing.T) {
	cfg := fleetConfig(100, 100, 10)
	l, err := New(cfg, NewMemStore())
	if err != nil {
		t.Fatal(err)
	}
	call, ok := l.FleetCallAt(fleetEpoch)
	if !ok {
		t.Fatal("no first callout")
	}
	ev := l.FleetDoneAt(fleetEpoch, call, nil, nil)
	if !ev.Failed || !ev.FellBack {
		t.Errorf("no replies to %d hits: %+v, want a failure", len(call.Hits), ev)
	}
	if late := l.FleetDoneAt(fleetEpoch, call, []LeaseReply{{}}, nil); late != (FleetEvent{}) {
		t.Errorf("a second reply to one call was applied: %+v", late)
	}
}

func TestValidateFleet(t *testing.T) {
	base := fleetConfig(100, 50, 10)
	tests := []struct {
		field string
		edit  func(f *Fleet)
	}{
		{"fleet.capacity", func(f *Fleet) { f.Capacity = 49 }},
		{"fleet.fallback_capacity", func(f *Fleet) { f.Fallback = 51 }},
		{"fleet.fallback_capacity", func(f *Fleet) { f.Fallback = -1 }},
		{"fleet.sync_interval", func(f *Fleet) { f.SyncInterval = 10 * time.Millisecond }},
		{"fleet.sync_interval", func(f *Fleet) { f.SyncInterval = 3 * time.Second }},
		{"fleet.timeout", func(f *Fleet) { f.Timeout = 0 }},
		{"fleet.timeout", func(f *Fleet) { f.Timeout = time.Second }},
	}
	if err := base.Validate(); err != nil {
		t.Fatalf("valid fleet config refused: %v", err)
	}
	for _, tc := range tests {
		cfg := base
		f := *base.Fleet
		tc.edit(&f)
		cfg.Fleet = &f
		var fe *FieldError
		if err := cfg.Validate(); !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: got %v, want an error on %s", f, err, tc.field)
		}
	}
}

func FuzzDecodeFleet(f *testing.F) {
	s := newFleetState()
	s.claim(7).leased = 12
	f.Add(appendFleet(nil, &s))
	f.Add([]byte{fleetVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeFleet(b)
		if err != nil {
			return
		}
		again, err := decodeFleet(appendFleet(nil, &v))
		if err != nil || again != v {
			t.Fatalf("round trip: %+v -> %+v, %v", v, again, err)
		}
	})
}

// holdingFifty is a fleet-mode limiter of 100 whose process holds 50
// units of window k, the window of now.
func holdingFifty(t *testing.T) (l *Limiter, store *MemStore, now time.Time, k int64) {
	t.Helper()
	cfg := fleetConfig(100, 100, 0)
	store = NewMemStore()
	l, err := New(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	now = fleetEpoch.Add(time.Second)
	k, _, _ = WindowAt(now, cfg.Cycle, 0)
	if err := l.view.fleet.updateFleet(store, func(s *fleetState) bool { s.claim(k).leased = 50; return true }); err != nil {
		t.Fatal(err)
	}
	return l, store, now, k
}

// TestReclaimNeverFreesGrantedUnits gives back more than is free: the
// reclaim takes only the free units out of the budget before lowering the
// hold, so the budget never grants beyond what the process holds.
func TestReclaimNeverFreesGrantedUnits(t *testing.T) {
	l, store, now, k := holdingFifty(t)
	admitted := 0
	for i := 0; i < 30; i++ {
		if l.AdmitAt(now, "a").Allowed {
			admitted++
		}
	}
	granted := l.view.grantedIn(k)
	if admitted != 30 || granted < 30 || granted >= 50 {
		t.Fatalf("set-up: admitted %d, budget granted %d; want 30 admitted and some of the 50 held still free", admitted, granted)
	}
	got := l.view.fleet.reclaim(l.view, k, 45, now.UnixNano())
	s, _, _ := l.view.fleet.read(store)
	if got != 50-granted || s.slot(k).leased != granted {
		t.Fatalf("admitted %d, budget granted %d: reclaimed %d, hold now %d; want %d and %d",
			admitted, granted, got, s.slot(k).leased, 50-granted, granted)
	}
	if n, _, _, _ := l.view.adjust(1, borrowGate{}, nil); n != 0 {
		t.Errorf("the budget granted %d more after the give-back", n)
	}
}

// A give-back leaves a unit booked for a refused client (fair policy) and
// due: it comes for it, and the budget still has it.
func TestReclaimLeavesDueBookings(t *testing.T) {
	l, store, now, k := holdingFifty(t)
	if !l.AdmitAt(now, "a").Allowed {
		t.Fatal("set-up: a refused")
	}
	v := storedBudget(t, l, store)
	v.booked = []booking{{client: 7, n: 1, at: now.UnixNano() - int64(time.Millisecond)}}
	if err := store.Set(l.view.budgetKey, appendBudget(nil, v), 0); err != nil {
		t.Fatal(err)
	}
	granted := l.view.grantedIn(k)
	got := l.view.fleet.reclaim(l.view, k, 50, now.UnixNano())
	if want := 50 - granted - 1; got != want {
		t.Fatalf("budget granted %d, one unit booked and due: reclaimed %d, want %d", granted, got, want)
	}
	if n, _, _, _ := l.view.adjust(1, borrowGate{}, &bookAsk{client: 7, need: 1, t: now.UnixNano()}); n != 1 {
		t.Errorf("the booked client took %d after the give-back, want its unit", n)
	}
}

// TestUnreadableFleetRecordHoldsNothing: a garbled record grants nothing
// until the next fleet step starts it afresh.
func TestUnreadableFleetRecordHoldsNothing(t *testing.T) {
	cfg := fleetConfig(100, 100, 10)
	store := NewMemStore()
	l, err := New(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Set(cfg.KeyPrefix+"/f", []byte("garbage"), 0); err != nil {
		t.Fatal(err)
	}
	if d := l.AdmitAt(fleetEpoch, "a"); d.Allowed {
		t.Errorf("admitted on an unreadable fleet record: %+v", d)
	}
	if _, ok := l.FleetCallAt(fleetEpoch); !ok {
		t.Error("no callout after the record was started afresh")
	}
	if _, _, err := l.view.fleet.read(store); err != nil {
		t.Errorf("record still unreadable: %v", err)
	}
}

func TestConsumedReadsThroughTheStickyStatus(t *testing.T) {
	tests := []struct {
		hits  int64
		reply LeaseReply
		want  bool
	}{
		{10, LeaseReply{Remaining: 0}, true},
		{10, LeaseReply{Over: true, Remaining: 9}, false}, // refused: 9 < 10 left
		{10, LeaseReply{Over: true, Remaining: 10}, true}, // sticky status: 20 → 10
		{10, LeaseReply{Over: true, Remaining: 0}, false}, // either; taken as refused
	}
	for _, tc := range tests {
		if got := consumed(tc.hits, tc.reply); got != tc.want {
			t.Errorf("consumed(%d, %+v) = %t, want %t", tc.hits, tc.reply, got, tc.want)
		}
	}
}
