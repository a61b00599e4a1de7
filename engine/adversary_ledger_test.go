package engine_test

// The adversary suite's own bookkeeping: a ledger of admitted units by the
// aligned window of the TRUE time of each decision (never the time a
// worker was told), a store wrapper that lists the keys the engine wrote
// and can flip their bits or yield before every access, and a sequential
// simulator of workers whose clock reads differ from the true clock.
// Nothing here trusts the engine's own accounting.

import (
	"fmt"
	"math/rand"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// advEpoch is where simulated true time starts: a round instant, so that
// windows of every cycle used here start on it.
var advEpoch = time.Unix(1_700_000_000, 0)

// advLedger counts admitted units per aligned window (cycle, offset) of the
// true time of the decision: units admitted with Reason ok, and, apart,
// units admitted because the store failed (fail-open admissions the
// service sees too).
type advLedger struct {
	cycle, offset time.Duration
	ok            map[int64]int64
	failed        map[int64]int64
}

func newAdvLedger(cycle, offset time.Duration) *advLedger {
	return &advLedger{cycle: cycle, offset: offset, ok: map[int64]int64{}, failed: map[int64]int64{}}
}

func (g *advLedger) window(t time.Time) int64 {
	k, _, _ := engine.WindowAt(t, g.cycle, g.offset)
	return k
}

// note records one decision made at true time trueNow for cost units.
func (g *advLedger) note(trueNow time.Time, d engine.Decision, cost int64) {
	if !d.Allowed {
		return
	}
	cost = max(cost, 1)
	k := g.window(trueNow)
	if d.Reason == engine.ReasonStoreFailure {
		g.failed[k] += cost
		return
	}
	// ok, or anything else that admitted (never expected without
	// passthrough): counted against the window like ok.
	g.ok[k] += cost
}

// merge adds another ledger of the same alignment.
func (g *advLedger) merge(o *advLedger) {
	for k, v := range o.ok {
		g.ok[k] += v
	}
	for k, v := range o.failed {
		g.failed[k] += v
	}
}

// advWorst is the worst window of a ledger against a bound.
type advWorst struct {
	ratio  float64 // units / capacity in the worst window (ok admissions)
	window int64
	units  int64
	over   int // windows whose units exceed bound × capacity
	failed int64
	// ratioAll counts store_failure admissions too.
	ratioAll float64
}

// worst scans the windows that keep returns true for (nil: all) and
// compares each with bound(k) × capacity.
func (g *advLedger) worst(capacity int64, keep func(k int64) bool, bound func(k int64) float64) advWorst {
	var w advWorst
	ks := make([]int64, 0, len(g.ok)+len(g.failed))
	for k := range g.ok {
		ks = append(ks, k)
	}
	for k := range g.failed {
		if _, dup := g.ok[k]; !dup {
			ks = append(ks, k)
		}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	for _, k := range ks {
		if keep != nil && !keep(k) {
			continue
		}
		u := g.ok[k]
		w.failed += g.failed[k]
		r := float64(u) / float64(capacity)
		if r > w.ratio || w.units == 0 && u > 0 {
			w.ratio, w.window, w.units = r, k, u
		}
		w.ratioAll = max(w.ratioAll, float64(u+g.failed[k])/float64(capacity))
		if bound != nil && float64(u) > bound(k)*float64(capacity)+1e-9 {
			w.over++
		}
	}
	return w
}

// overWindows lists (for messages) the windows whose ok units exceed
// bound(k) × capacity, at most n of them.
func (g *advLedger) overWindows(capacity int64, keep func(k int64) bool, bound func(k int64) float64, n int) string {
	var ks []int64
	for k, u := range g.ok {
		if (keep == nil || keep(k)) && float64(u) > bound(k)*float64(capacity)+1e-9 {
			ks = append(ks, k)
		}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	var b strings.Builder
	for i, k := range ks {
		if i == n {
			fmt.Fprintf(&b, " … (%d in all)", len(ks))
			break
		}
		fmt.Fprintf(&b, " w%d=%d(%.2f×, bound %.1f×)", k, g.ok[k], float64(g.ok[k])/float64(capacity), bound(k))
	}
	return b.String()
}

func advConst(x float64) func(int64) float64 { return func(int64) float64 { return x } }

// advTally counts decisions by reason.
type advTally map[engine.Reason]int

func (c advTally) add(o advTally) {
	for r, n := range o {
		c[r] += n
	}
}

func (c advTally) String() string {
	var b strings.Builder
	for i, r := range engine.Reasons() {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", r, c[r])
	}
	return b.String()
}

// advReport logs the figures of one class with the stable prefix the
// report quotes, and returns the worst ratio.
func advReport(t testing.TB, class string, w advWorst, tally advTally) {
	t.Helper()
	t.Logf("adversary: %s worst window/capacity = %.2f (window %d: %d units; with store_failure admissions %.2f; store_failure units %d; reasons %s)",
		class, w.ratio, w.window, w.units, w.ratioAll, w.failed, tally)
}

// advJumps records the true times at which workers opened a window after
// a clock jump (engine.Observer.ClockJump).
type advJumps struct {
	engine.NopObserver
	sim *advSim
	at  []time.Time
}

func (j *advJumps) ClockJump(time.Duration) { j.at = append(j.at, j.sim.now) }

// advStore wraps a Store: it records every key the engine wrote, can yield
// the processor before every Get and Set (real interleaving between
// goroutine workers), and flips single bits of stored values.
type advStore struct {
	inner engine.Store
	yield bool
	mu    sync.Mutex
	keys  map[string]bool
}

func newAdvStore(yield bool) *advStore {
	return &advStore{inner: engine.NewMemStore(), yield: yield, keys: map[string]bool{}}
}

func (s *advStore) Get(key string) ([]byte, uint32, error) {
	if s.yield {
		runtime.Gosched()
	}
	return s.inner.Get(key)
}

func (s *advStore) Set(key string, value []byte, cas uint32) error {
	if s.yield {
		runtime.Gosched()
	}
	err := s.inner.Set(key, value, cas)
	if err == nil {
		s.mu.Lock()
		s.keys[key] = true
		s.mu.Unlock()
	}
	return err
}

// Keys lists the keys written so far, sorted.
func (s *advStore) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.keys))
	for k := range s.keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// bits is the number of bits of key's current value (0 if missing).
func (s *advStore) bits(key string) int {
	v, _, err := s.inner.Get(key)
	if err != nil {
		return 0
	}
	return 8 * len(v)
}

// flip inverts one bit of key's current value and writes it back with
// CAS 0 (an unconditional overwrite, as a stray write would be).
func (s *advStore) flip(key string, bit int) error {
	v, _, err := s.inner.Get(key)
	if err != nil {
		return err
	}
	if bit < 0 || bit >= 8*len(v) {
		return fmt.Errorf("bit %d out of %d", bit, 8*len(v))
	}
	w := append([]byte(nil), v...)
	w[bit/8] ^= 1 << (bit % 8)
	return s.inner.Set(key, w, 0)
}

// advWorker is one simulated Envoy worker: a Limiter, the offset of its
// clock from the true clock, and the true time of its next tick.
type advWorker struct {
	l        *engine.Limiter
	skew     time.Duration
	nextTick time.Time
}

// advSim drives workers sequentially over one store against a true clock.
// Each worker reads the true time plus its skew plus, optionally, a jitter
// drawn per read; it ticks every tickEvery of true time, at the time it
// reads then (Envoy's timer fires on monotonic time; the callback reads the
// wall clock).
type advSim struct {
	tb        testing.TB
	tickEvery time.Duration
	workers   []*advWorker
	ledgers   []*advLedger
	tally     advTally
	now       time.Time                 // true time
	jitter    func(w int) time.Duration // added to each read; nil: none
	onAdmit   func(w int, client string, d engine.Decision, cost int64)
	opts      []engine.Option // for every worker add makes
	okTimes   []time.Time     // true times of ok admissions, in order
}

// advPlanInPlace, when not negative, is the largest table the workers
// advSim makes plan over in place (TestAdversaryWithPlansInSlices).
var advPlanInPlace = -1

func newAdvSim(tb testing.TB, start time.Time, tickEvery time.Duration, ledgers ...*advLedger) *advSim {
	return &advSim{tb: tb, tickEvery: tickEvery, ledgers: ledgers, tally: advTally{}, now: start}
}

// add makes n workers for cfg over store, with skew(i) for the i-th of
// them (nil: no skew), and returns their indices.
func (s *advSim) add(cfg engine.Config, store engine.Store, n int, skew func(i int) time.Duration) []int {
	s.tb.Helper()
	var idx []int
	for i := 0; i < n; i++ {
		l, err := engine.New(cfg, store, s.opts...)
		if err != nil {
			// Errorf, not Fatalf: add may run on a helper goroutine.
			s.tb.Errorf("engine.New: %v", err)
			return nil
		}
		if advPlanInPlace >= 0 {
			engine.SetPlanInPlace(l, advPlanInPlace)
		}
		w := &advWorker{l: l}
		if skew != nil {
			w.skew = skew(i)
		}
		// Ticks spread over the tick period, as independent timers are.
		w.nextTick = s.now.Add(s.tickEvery * time.Duration(i%16+1) / 17)
		idx = append(idx, len(s.workers))
		s.workers = append(s.workers, w)
	}
	return idx
}

// read is what worker w's clock says now.
func (s *advSim) read(w int) time.Time {
	r := s.now.Add(s.workers[w].skew)
	if s.jitter != nil {
		r = r.Add(s.jitter(w))
	}
	return r
}

// tickDue ticks every worker whose timer fired by now.
func (s *advSim) tickDue() {
	for i, w := range s.workers {
		for !w.nextTick.After(s.now) {
			w.l.TickAt(s.read(i))
			w.nextTick = w.nextTick.Add(s.tickEvery)
		}
	}
}

// admit has worker w decide on cost units from client at the true time
// now, reading its own clock.
func (s *advSim) admit(w int, client string, cost int64) engine.Decision {
	d := s.workers[w].l.AdmitNAt(s.read(w), client, cost)
	s.tally[d.Reason]++
	for _, g := range s.ledgers {
		g.note(s.now, d, cost)
	}
	if d.Allowed && d.Reason == engine.ReasonOK {
		s.okTimes = append(s.okTimes, s.now)
	}
	if s.onAdmit != nil {
		s.onAdmit(w, client, d, cost)
	}
	return d
}

// run advances the true clock by step until it reaches until; at each step
// the due ticks run, then perStep requests chosen by pick.
func (s *advSim) run(until time.Time, step time.Duration, perStep int, pick func() (w int, client string, cost int64)) {
	for s.now.Before(until) {
		s.now = s.now.Add(step)
		s.tickDue()
		for j := 0; j < perStep; j++ {
			w, c, cost := pick()
			s.admit(w, c, cost)
		}
	}
}

// firstOKAfter is the true time of the first ok admission at or after t
// (ok false if none).
func (s *advSim) firstOKAfter(t time.Time) (time.Time, bool) {
	i := sort.Search(len(s.okTimes), func(i int) bool { return !s.okTimes[i].Before(t) })
	if i == len(s.okTimes) {
		return time.Time{}, false
	}
	return s.okTimes[i], true
}

// advClients names n clients.
func advClients(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

// advRandomPick picks a random worker among ws and a random client, cost 1.
func advRandomPick(rng *rand.Rand, ws []int, clients []string) func() (int, string, int64) {
	return func() (int, string, int64) {
		return ws[rng.Intn(len(ws))], clients[rng.Intn(len(clients))], 1
	}
}
