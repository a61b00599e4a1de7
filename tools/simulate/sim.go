package main

import (
	"container/heap"
	"fmt"
	"github.com/borrowcycle/borrowcycle/engine/enginetest"
	"math"
	"math/rand/v2"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/borrowcycle/borrowcycle/internal/capcheck"
)

// epoch is where virtual time starts. Any fixed instant would do; a fixed
// one keeps runs byte-for-byte reproducible.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// member is one simulated client (a group of Count clients has Count
// members).
type member struct {
	name     string
	group    int
	join     int // first cycle it sends in
	leave    int // first cycle it no longer sends in
	register bool
	honest   bool
	phase    float64 // where in each request interval it sends, in (0, 1)
	weight   float64 // its weight in the equal split (1 unless configured)
	retry    Retry
	fresh    []int64 // new requests per cycle, index 0 = cycle 1
	// A client that honours Retry-After sends one request at a time, as
	// an HTTP client library that retries does: busy while a request of
	// its is due (a retry, or the next of its backlog), its new requests
	// wait in backlog, sent one after the other as each ends.
	busy    bool
	backlog int
}

// Result is everything one run observed, per cycle of the simulation grid
// (cycle k covers [epoch+(k−1)·cycle, epoch+k·cycle)).
type Result struct {
	Scenario *Scenario
	Policy   string
	Groups   []string // display name of each client spec
	Members  []member
	// Share[k][i] is member i's share at the start of cycle k+1, under the
	// plan of the window starting then; −1 when it is not registered. It
	// has Cycles+1 rows: the last is the share the run's demand leads to.
	Share [][]int64
	// Registered[k] is how many clients cycle k+1 started with.
	Registered []int
	// Demand counts attempts (retries included) per cycle and member,
	// Fresh only first attempts; Admitted and Rejected split Demand.
	Demand, Fresh, Admitted, Rejected [][]int64
	// Plans observed (one per window, plus a re-plan of the running window
	// for newcomers), and how many of them were re-plans; CyclePlans[k]
	// those observed during grid cycle k+1 (the plan of its window
	// included).
	Plans, Replans int
	CyclePlans     []int
	// Cap is every admission, attributed to the aligned wall-clock window
	// of its time and to the share period (engine cycle) that decided it:
	// it counts window violations (a window admitted more than the
	// capacity, however many engine cycles it held) and share violations
	// (a client admitted more than its share in one share period).
	// Told counts honest clients' retries made when a refusal's
	// Retry-After said, ToldOK those admitted.
	Told, ToldOK int64
	Cap          *capcheck.Checker
	Reasons      map[string]int64
	// AdmittedAt is the time of every admitted unit, in order, for the
	// sliding-window metric (see capcheck.SlidingMost).
	AdmittedAt []time.Time
}

// Run simulates sc under policy on a virtual clock and returns what
// happened. factor multiplies the demand of the client (or group) named
// inflate; factor 1 is the plain run.
func Run(sc *Scenario, policy engine.Policy, inflate string, factor float64) (*Result, error) {
	r, err := newRunner(sc, policy, inflate, factor)
	if err != nil {
		return nil, err
	}
	if err := r.run(); err != nil {
		return nil, err
	}
	return r.res, nil
}

// EngineConfig is the engine configuration a scenario asks for: the
// engine's defaults with the scenario's fields laid over them.
func EngineConfig(sc *Scenario, policy engine.Policy) engine.Config {
	cfg := engine.Defaults(sc.Capacity, time.Duration(sc.Cycle))
	if sc.Reservation != nil {
		cfg.Reservation = *sc.Reservation
	}
	if sc.MinCycle > 0 {
		cfg.MinCycle = time.Duration(sc.MinCycle)
	}
	if sc.IdleCycles > 0 {
		cfg.IdleCycles = sc.IdleCycles
	}
	if sc.MaxClients > 0 {
		cfg.MaxClients = sc.MaxClients
	}
	cfg.Passthrough = sc.Passthrough
	if sc.Burst != nil {
		cfg.Pace, cfg.Burst = true, *sc.Burst
	}
	cfg.Weights = memberWeights(sc)
	if seed, ok := policy.(engine.Seed); ok {
		// The seed policy reads its reservation from itself, not from the
		// config: keep the two in step.
		seed.Reservation = cfg.Reservation
		policy = seed
	}
	cfg.Policy = policy
	return cfg
}

// PolicyByName maps the -policy names to engine policies.
func PolicyByName(name string) (engine.Policy, error) {
	switch name {
	case "seed":
		return engine.Seed{}, nil
	case "static":
		return engine.Static{}, nil
	case "fair":
		return engine.Fair{}, nil
	}
	return nil, fmt.Errorf("unknown policy %q (want seed, static or fair)", name)
}

// weightOr1 is the member's weight; a member built without one weighs 1.
func (m member) weightOr1() float64 {
	if m.weight <= 0 {
		return 1
	}
	return m.weight
}

// memberWeights is the engine's weights map: every member of a client
// spec with a weight, by the member name expand gives it.
func memberWeights(sc *Scenario) map[string]float64 {
	var ws map[string]float64
	for _, spec := range sc.Clients {
		if spec.Weight <= 0 || spec.Weight == 1 {
			continue
		}
		if ws == nil {
			ws = map[string]float64{}
		}
		for mi := 0; mi < spec.Count; mi++ {
			name := spec.Name
			if spec.Count > 1 {
				name = fmt.Sprintf("%s-%d", spec.Name, mi+1)
			}
			ws[name] = spec.Weight
		}
	}
	return ws
}

// expand turns client specs into members with their per-cycle demand.
func expand(sc *Scenario, inflate string, factor float64) ([]member, []string) {
	var members []member
	groups := make([]string, len(sc.Clients))
	for gi := range sc.Clients {
		spec := &sc.Clients[gi]
		groups[gi] = spec.Name
		if spec.Count > 1 {
			groups[gi] = fmt.Sprintf("%s (x%d)", spec.Name, spec.Count)
		}
		joins := joinCycles(sc, spec, gi)
		for mi := 0; mi < spec.Count; mi++ {
			m := member{
				name:     spec.Name,
				group:    gi,
				join:     joins[mi],
				leave:    spec.Leave,
				register: spec.JoinMode == joinRegister,
				honest:   !spec.Adversary,
				phase:    (float64(mi) + 0.5) / float64(spec.Count),
				weight:   1,
				retry:    spec.Retry,
			}
			if spec.Count > 1 {
				m.name = fmt.Sprintf("%s-%d", spec.Name, mi+1)
			}
			if spec.Weight > 0 {
				m.weight = spec.Weight
			}
			if spec.JoinRate > 0 && spec.Lifetime > 0 {
				m.leave = m.join + spec.Lifetime
			}
			if m.leave == 0 || m.leave > sc.Cycles+1 {
				m.leave = sc.Cycles + 1
			}
			m.fresh = memberDemand(sc, spec, &m, memberRNG(sc.Seed, gi, mi))
			if inflate == spec.Name || inflate == m.name {
				scale(m.fresh, factor)
			}
			members = append(members, m)
		}
	}
	return members, groups
}

// joinCycles gives each member of a group its first cycle: all at Join, or
// spread as Poisson arrivals of JoinRate per cycle (churn).
func joinCycles(sc *Scenario, spec *ClientSpec, gi int) []int {
	out := make([]int, spec.Count)
	if spec.JoinRate <= 0 {
		for i := range out {
			out[i] = spec.Join
		}
		return out
	}
	rng := memberRNG(sc.Seed, gi, -1)
	next, cycle := 0, spec.Join
	for next < len(out) {
		for n := poisson(rng, spec.JoinRate); n > 0 && next < len(out); n-- {
			out[next] = cycle
			next++
		}
		cycle++
	}
	return out
}

// memberDemand is a member's new requests per cycle: its list or arrival
// process, zero outside [join, leave).
func memberDemand(sc *Scenario, spec *ClientSpec, m *member, rng *rand.Rand) []int64 {
	var d []int64
	if spec.Arrival != nil {
		d = spec.Arrival.counts(sc.Cycles, rng)
	} else {
		d = make([]int64, sc.Cycles)
		copy(d, spec.Demand)
	}
	for i := range d {
		if c := i + 1; c < m.join || c >= m.leave {
			d[i] = 0
		}
	}
	return d
}

func memberRNG(seed uint64, group, idx int) *rand.Rand {
	return clientRNG(seed, (group+1)<<20|(idx+1))
}

func scale(d []int64, factor float64) {
	for i := range d {
		d[i] = int64(math.Round(float64(d[i]) * factor))
	}
}

// runner drives the Limiters through one scenario.
type runner struct {
	sc      *Scenario
	cycle   time.Duration
	lims    []*engine.Limiter
	clock   *enginetest.ManualClock
	members []member
	byHash  map[uint64]int
	res     *Result

	q      eventQueue
	seq    uint64
	rr     int
	period int // the grid cycle being simulated, 1-based

	cur engine.Snapshot // latest cycle any worker has shown us
}

func newRunner(sc *Scenario, policy engine.Policy, inflate string, factor float64) (*runner, error) {
	cfg := EngineConfig(sc, policy)
	store := engine.NewMemStore()
	clock := enginetest.NewManualClock(epoch)
	r := &runner{
		sc:     sc,
		cycle:  time.Duration(sc.Cycle),
		clock:  clock,
		byHash: map[uint64]int{},
	}
	for w := 0; w < sc.Workers; w++ {
		l, err := engine.New(cfg, store, engine.WithClock(clock))
		if err != nil {
			return nil, fmt.Errorf("engine config: %w", err)
		}
		r.lims = append(r.lims, l)
	}
	members, groups := expand(sc, inflate, factor)
	r.members = members
	for i, m := range members {
		r.byHash[engine.HashID(m.name)] = i
	}
	n, cycles := len(members), sc.Cycles
	r.res = &Result{
		Scenario:   sc,
		Policy:     cfg.Policy.Name(),
		Groups:     groups,
		Members:    members,
		Share:      grid(cycles+1, n),
		Registered: make([]int, cycles+1),
		CyclePlans: make([]int, cycles+1),
		Demand:     grid(cycles, n),
		Fresh:      grid(cycles, n),
		Admitted:   grid(cycles, n),
		Rejected:   grid(cycles, n),
		Cap:        capcheck.New(sc.Capacity),
		Reasons:    map[string]int64{},
	}
	return r, nil
}

func grid(rows, cols int) [][]int64 {
	g := make([][]int64, rows)
	for i := range g {
		g[i] = make([]int64, cols)
	}
	return g
}

func (r *runner) start(k int) time.Time { return epoch.Add(time.Duration(k-1) * r.cycle) }

// run simulates every grid cycle, then the boundary after the last one so
// the table can show the shares the last cycle's demand leads to.
func (r *runner) run() error {
	for k := 1; k <= r.sc.Cycles; k++ {
		r.period = k
		if err := r.boundary(k); err != nil {
			return err
		}
		r.schedule(k)
		end := r.start(k + 1)
		for r.q.Len() > 0 && r.q[0].at.Before(end) {
			ev := heap.Pop(&r.q).(event)
			r.advanceTo(ev.at, true)
			r.handle(ev)
		}
	}
	// Retries still queued would fall after the last cycle: dropped.
	r.period = r.sc.Cycles + 1
	return r.boundary(r.sc.Cycles + 1)
}

// boundary starts grid cycle k: clients joining now by registration are
// registered first, so that the plan of the window starting now counts them
// (a tick first would plan without them and leave them pending), then every
// worker ticks, which plans the window exactly at its start.
func (r *runner) boundary(k int) error {
	t := r.start(k)
	r.advanceTo(t, false)
	var joiners []string
	for _, m := range r.members {
		if m.join == k && k <= r.sc.Cycles && (m.register || (k == 1 && *r.sc.Preregister)) {
			joiners = append(joiners, m.name)
		}
	}
	if len(joiners) > 0 {
		r.clock.Set(t)
		if err := r.lims[0].RegisterAt(t, joiners...); err != nil {
			return fmt.Errorf("cycle %d: register: %w", k, err)
		}
	}
	r.tickAll(t)
	r.recordShares(k - 1)
	return nil
}

// advanceTo ticks every worker at each window end before t (or at t, when
// inclusive), so that every window is planned when it starts rather than
// at its first request.
func (r *runner) advanceTo(t time.Time, inclusive bool) {
	for r.cur.Plan > 0 && (r.cur.Deadline.Before(t) || (inclusive && r.cur.Deadline.Equal(t))) {
		before := r.cur.Plan
		r.tickAll(r.cur.Deadline)
		if r.cur.Plan == before {
			return // nothing to plan (no clients left)
		}
	}
}

func (r *runner) tickAll(t time.Time) {
	r.clock.Set(t)
	for w, l := range r.lims {
		l.TickAt(t)
		r.observe(w)
	}
}

// observe adopts worker w's plan when it is newer than what we have seen,
// counting the plans in between.
func (r *runner) observe(w int) {
	s := r.lims[w].Snapshot()
	if s.Plan <= r.cur.Plan {
		return
	}
	if r.cur.Plan > 0 {
		r.res.Plans += int(s.Plan - r.cur.Plan)
		r.res.CyclePlans[r.period-1] += int(s.Plan - r.cur.Plan)
		if s.Early { // the plan is a re-plan of its window
			r.res.Replans++
		}
	}
	r.cur = s
}

func (r *runner) recordShares(row int) {
	shares := r.res.Share[row]
	for i := range shares {
		shares[i] = -1
	}
	for h, share := range r.cur.Clients {
		if i, ok := r.byHash[h]; ok {
			shares[i] = share
		}
	}
	r.res.Registered[row] = len(r.cur.Clients)
}

// schedule queues cycle k's new requests. A member's n requests sit at
// equal intervals of cycle/n, so clients interleave deterministically and
// none lands on a boundary; equal times keep member order. Single clients
// start half an interval in; the members of a group are staggered across
// the interval, so that (say) a thousand ids sending one request each
// arrive one after another rather than all at once.
func (r *runner) schedule(k int) {
	t := r.start(k)
	for i, m := range r.members {
		n := m.fresh[k-1]
		for j := int64(0); j < n; j++ {
			off := time.Duration((float64(j) + m.phase) * float64(r.cycle) / float64(n))
			r.push(event{at: t.Add(off), member: i, kind: evRequest})
		}
	}
	if tick := time.Duration(r.sc.Tick); tick > 0 {
		for off := tick; off < r.cycle; off += tick {
			r.push(event{at: t.Add(off), kind: evTick})
		}
	}
}

func (r *runner) push(ev event) {
	ev.seq = r.seq
	r.seq++
	heap.Push(&r.q, ev)
}

func (r *runner) handle(ev event) {
	if ev.kind == evTick {
		r.tickAll(ev.at)
		return
	}
	k := r.period - 1
	m := &r.members[ev.member]
	if m.retry.HonorRetryAfter {
		if ev.tries == 0 && !ev.queued && m.busy {
			m.backlog++ // sent once the request before it ends
			return
		}
		m.busy = false
		defer r.next(ev)
	}
	w := r.worker(ev.member)
	r.clock.Set(ev.at)
	d := r.lims[w].AdmitAt(ev.at, r.members[ev.member].name)
	if d.Plan > r.cur.Plan {
		r.observe(w)
	}
	r.res.Demand[k][ev.member]++
	if ev.tries == 0 {
		r.res.Fresh[k][ev.member]++
	}
	r.res.Reasons[d.Reason.String()]++
	if ev.told && m.honest {
		r.res.Told++
		if d.Allowed {
			r.res.ToldOK++
		}
	}
	if d.Allowed {
		r.res.Admitted[k][ev.member]++
		r.count(ev.at, d, ev.member)
		return
	}
	r.res.Rejected[k][ev.member]++
	r.retry(ev, d)
}

// count books an admitted request twice: against the aligned wall window
// of its time, which is what the capacity promises, however many plans
// (share periods) re-plans fit into it; and against the plan that
// announced the client's share. Requests admitted without a share
// (passthrough, store failures) count in their window only.
func (r *runner) count(at time.Time, d engine.Decision, member int) {
	window, _, _ := engine.WindowAt(at, r.cycle, 0) // scenarios set no window offset
	r.res.AdmittedAt = append(r.res.AdmittedAt, at)
	a := capcheck.Admission{Window: window, Period: d.Plan}
	if d.Reason == engine.ReasonOK {
		a.Client, a.Share = r.members[member].name, d.Limit
	}
	r.res.Cap.Admit(a)
}

func (r *runner) retry(ev event, d engine.Decision) {
	m := &r.members[ev.member]
	if ev.tries >= m.retry.Max {
		return
	}
	delay, told := time.Duration(m.retry.Delay), false
	if ra := headerSeconds(d.RetryAfter); m.retry.HonorRetryAfter && ra >= delay {
		delay, told = ra, true
	}
	m.busy = m.retry.HonorRetryAfter
	r.push(event{at: ev.at.Add(delay), member: ev.member, kind: evRequest, tries: ev.tries + 1, told: told})
}

// next sends the next request of a one-at-a-time client's backlog once
// its request ev ended (admitted, or refused for good), a millisecond
// later.
func (r *runner) next(ev event) {
	m := &r.members[ev.member]
	if m.busy || m.backlog == 0 {
		return
	}
	m.backlog--
	m.busy = true
	r.push(event{at: ev.at.Add(time.Millisecond), member: ev.member, kind: evRequest, queued: true})
}

// headerSeconds is a retry time as the Retry-After header carries it:
// whole seconds, rounded up, at least one (the plugin's formatting).
func headerSeconds(d time.Duration) time.Duration {
	return max(time.Second, (d+time.Second-1)/time.Second*time.Second)
}

// worker picks the Limiter (Envoy worker) that sees a request.
func (r *runner) worker(member int) int {
	if r.sc.Spread == spreadByClient {
		return member % len(r.lims)
	}
	w := r.rr % len(r.lims)
	r.rr++
	return w
}

const (
	evRequest = iota
	evTick
)

type event struct {
	at     time.Time
	seq    uint64
	kind   int
	member int
	tries  int
	told   bool // a retry made when the last refusal's Retry-After said
	queued bool // a new request that waited in its client's backlog
}

// eventQueue is a min-heap by time, then by insertion order, which makes
// the order of simultaneous events deterministic.
type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	ev := old[len(old)-1]
	*q = old[:len(old)-1]
	return ev
}
