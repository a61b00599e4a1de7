package engine

import (
	"errors"
	"math"
	"time"
)

// view is one worker's part of a limit's shared state. It keeps the plan
// current (current, refresh, replan), grants a counted client's units
// only through leases (sync), and finds or registers a client the worker
// holds no state for (arrive). Between calls it holds the plan it last
// read, the clients it holds leases for, and its local caches (newcomers
// refused or told to wait, bucket marks). It reads the plan (small, fixed
// size) to notice changes, one bucket to find or register one client, and
// every bucket only to compute a plan. The Limiter reads the clock, calls
// the view, and turns what it did into decisions.
type view struct {
	cfg   *Config
	pol   compactPolicy
	store Store
	obs   Observer

	planKey   string
	budgetKey string
	paceKey   string // with pacing (record_pace.go)
	prefix    string
	nb        int // buckets of the table in use (the plan's): a power of two
	own       int // buckets of this config's table, about MaxClients/16
	keys      []string
	born      int64        // this worker's first clock reading (see plan.born)
	fleet     *fleetWorker // nil unless fleet mode (fleet.go)
	holding   holding      // the fleet's holding in fleet mode, else nil (see adjust)

	plan    plan   // the plan as last read (id 0: none yet)
	planCAS uint32 // CAS of the plan as read; 0 when unknown (then re-read before writing)
	planBad bool   // the value at planCAS is unreadable: only a roller may replace it

	// The counted clients this worker has seen, of the view's window and
	// the one before (client).
	clients clientTable
	dirty   []*clientState      // clients with a lease or unwritten demand: the tick's work
	waiting map[uint64]waitMark // newcomers told "pending" -> plan id then
	refused map[uint64]refusal  // newcomers told "table_full" in the view's window

	stuck stuckClock // see behind
	seen  budgetSeen // see adjust

	buf      []byte
	bkt      bucketVal
	lastRead bucketRead   // see find
	marks    []bucketMark // by bucket; see bucketMark (nil until a refusal)
	// marksFrom is the plan id from which the marks made since hold: the
	// view's, or an earlier one when the plans since changed no bucket's
	// newcomer places (marksCarry).
	marksFrom  uint64
	scratch    planScratch
	sliced     planSlices // a plan over a large table this worker reads a slice at a time
	began      scanStart  // where the scan of the last plan this worker made began (racing)
	deferred   deferredDemand
	pool       budgetPool     // see draw
	ahead      leasesAhead    // sync's leases for a bucket's other clients
	group      []*clientState // writeBucketDemand's scratch
	wrote      []*clientState // writeBucketDemand's scratch
	inPlaceMax int            // planInPlaceMax (a test sets another)
	sharePrint uint64         // sharePrint of cfg: the plans this worker computes carry it
}

// stuckClock: the clock has read before the view's window (of roll roll)
// since since, the window not moving (on: it has).
type stuckClock struct {
	on    bool
	roll  uint64
	since int64
}

type corruptKey struct {
	bucket int
	cas    uint32
}

// waitMark is what a worker remembers of a newcomer it told to wait: under
// which plan, and whether its entry already records it as proven (then its
// repeats need not touch shared state until a re-plan may be due).
type waitMark struct {
	plan   uint64
	proven bool
}

// maxWaitingPerBucket bounds the unproven newcomers of the running window
// a bucket holds (the rest of its places are for counted clients). A flood
// of never-seen ids then keeps buckets small, so that each of its requests
// copies and decodes little; a newcomer whose home bucket has this many
// waiting is refused as table_full until the next plan, like one whose
// bucket is full.
const maxWaitingPerBucket = bucketSlots / 4

// keepUnproven is how many unproven entries of earlier windows
// (reclaimable) a bucket keeps before a newcomer takes the place of one
// rather than a place never used. A client that asks less than once a
// window proves itself by asking again (view.arrive), which needs its
// entry: reclaiming one first left two in three clients that asked every
// 2.5 windows unproven for good, and a few of a crowded bucket, evicting
// each other's entries, for good whatever the bound on the bucket's size.
// As many as a window's newcomers (maxWaitingPerBucket): a flood of
// one-shot ids keeps a bucket's entries for newcomers at twice that.
const keepUnproven = maxWaitingPerBucket

// maxProbe bounds how many buckets a client may be placed in past its home
// bucket. With buckets of bucketSlots (48) and at least MaxClients/16
// buckets, there are ≥ 3·MaxClients places, so a home bucket overflows only
// for astronomically unlucky ids.
const maxProbe = 4

// localCacheMax bounds the local caches of refused and pending newcomers:
// when one is full it is cleared, so a flood costs memory O(1).
const localCacheMax = 1 << 14

func newView(cfg *Config, store Store, obs Observer) *view {
	nb := 1
	for nb*16 < cfg.MaxClients {
		nb <<= 1
	}
	r := &view{
		cfg:        cfg,
		pol:        cfg.policy(),
		store:      store,
		obs:        obs,
		planKey:    recordKey(cfg, "p"),
		budgetKey:  recordKey(cfg, "w"),
		paceKey:    recordKey(cfg, "pace"),
		prefix:     tablePrefix(cfg, nb),
		nb:         nb,
		own:        nb,
		keys:       make([]string, nb),
		clients:    newClientTable(),
		waiting:    make(map[uint64]waitMark),
		refused:    make(map[uint64]refusal),
		inPlaceMax: planInPlaceMax,
		sharePrint: sharePrint(cfg),
	}
	r.ahead.r = r
	return r
}

// useTable makes the table of nb buckets the one this worker reads and
// writes. Bucket indices of another table mean nothing in it: what the
// worker held by bucket is dropped (it finds its clients again).
func (r *view) useTable(nb int) {
	if nb == r.nb || nb <= 0 {
		return
	}
	r.nb, r.prefix, r.keys = nb, tablePrefix(r.cfg, nb), make([]string, nb)
	r.marks = nil
	r.dropDeferred()
	r.forgetRead()
	r.clients.clear()
	for _, cs := range r.dirty {
		cs.dirty = false
	}
	clear(r.dirty)
	r.dirty = r.dirty[:0]
}

// home is a client's first bucket.
func (r *view) home(h uint64) int { return int((h ^ h>>29 ^ h>>47) & uint64(r.nb-1)) }

// The plan: the view reads it, adopts it, and makes the next one. current
// and refresh keep the view at the clock's window; replan computes and
// publishes a plan.

// read reads the plan key into the view. It reports corrupt when the value
// cannot be trusted; the view is then left as it was, with planCAS set to
// the unreadable value's CAS so that a roller can replace it.
func (r *view) read() (corrupt bool, err error) {
	st, err := r.readPlan()
	if err != nil {
		return false, err
	}
	return r.see(st), nil
}

// see is read of a plan value already read from the store.
func (r *view) see(st stored) (corrupt bool) {
	if st.missing {
		r.plan, r.planCAS, r.planBad = plan{window: r.plan.window}, casCreate, false
		return false
	}
	if st.cas == r.planCAS {
		return r.planBad
	}
	var p plan
	if err := decodePlan(st.raw, &p); err != nil {
		r.obs.ValueReset(r.planKey, err)
		r.planCAS, r.planBad = st.cas, true
		return true
	}
	if p.id < r.plan.id {
		// A plan id never goes back; an older one can only be a bad
		// writer's. Keep what we know and let a roller replace it.
		r.obs.ValueReset(r.planKey, errCorrupt)
		r.planCAS, r.planBad = st.cas, true
		return true
	}
	r.adopt(p, st.cas)
	return false
}

// publish is updatePlan with the view kept: change is handed the plan as
// read (the view, adopted when it is readable; corrupt when it is not, and
// the view is then the last readable plan) and returns the plan to publish,
// or nil to publish nothing. A published plan becomes the view.
func (r *view) publish(change func(cur plan, corrupt bool) (*plan, error)) (published bool, err error) {
	next, err := r.updatePlan(func(st stored) (*plan, error) {
		corrupt := r.see(st)
		return change(r.plan, corrupt)
	})
	if err != nil || next == nil {
		return false, err
	}
	r.adopt(*next, 0)
	return true, nil
}

// countPending adds one to the plan's pending count, refusing when the
// table is full. Before the first plan there is nothing to count in: the
// first plan counts every entry.
func (r *view) countPending() error {
	_, err := r.publish(func(cur plan, corrupt bool) (*plan, error) {
		switch {
		case corrupt:
			return nil, errCorrupt // a roller must replace the plan first
		case cur.id == 0:
			return nil, nil
		case int(cur.n)+int(cur.pending) >= r.cfg.MaxClients && cur.provisional:
			return nil, errFullForNow
		case int(cur.n)+int(cur.pending) >= r.cfg.MaxClients:
			return nil, errFull
		}
		cur.pending++
		return &cur, nil
	})
	return err
}

// claim records in the plan that this worker's config is the newest to
// serve the limit, when it is newer than the one the plan names and opens
// windows another way: the windows the plan's config opens from now on are
// this config's (a reload is in force from its first request, not from the
// first window it happens to open). The running window keeps its bounds.
func (r *view) claim() error {
	if r.plan.id == 0 || r.plan.born >= r.born || r.ownsAlignment(&r.plan) {
		return nil
	}
	_, err := r.publish(func(cur plan, corrupt bool) (*plan, error) {
		if corrupt || cur.id == 0 || cur.born >= r.born || r.ownsAlignment(&cur) {
			return nil, nil
		}
		cur.born, cur.newCycle, cur.newOffset, cur.newBuckets = r.born, int64(r.cfg.Cycle), int64(r.cfg.WindowOffset), int64(r.own)
		return &cur, nil
	})
	return err
}

// adopt makes p the view. Local caches keyed by plan id expire with it.
func (r *view) adopt(p plan, cas uint32) {
	if p.id != r.plan.id {
		clear(r.waiting)
		if !marksCarry(&r.plan, &p) {
			r.marksFrom = p.id
		}
		if p.window != r.plan.window {
			clear(r.refused) // (a refusal proves a repeat within its window)
			// The clients of the window before stay, when p's window
			// follows it; the older ones go.
			r.clients.newWindow(p.window == r.plan.window+1)
		}
	}
	r.plan, r.planCAS, r.planBad = p, cas, false
	r.useTable(int(p.buckets))
}

// replan computes and publishes the next plan when transition (on a fresh
// read of the plan) still asks for one; another worker may have done it.
// Reading every bucket is the O(clients) part, at most once per MinCycle or
// window. Publishing is one CAS on the plan key: of all workers that
// compute a plan from the same one, exactly one wins, and the others adopt
// its result. Returns the step taken (stepStay when none was needed).
//
// who is who asks (see transition); cand is the newcomer whose own request
// asks for the plan (0: none): a re-plan, or the first plan, counts it
// even unproven (promoted), the only unproven newcomer it counts.
func (r *view) replan(real int64, who caller, cand uint64) (stepKind, error) {
	if t := real + r.plan.shift; r.plan.id != 0 {
		// This worker's demand counts in the plan of a new window, when it
		// is planned in place: a provisional plan is planned from the
		// table later, and writing every client asking since the last
		// tick would cost its request O(clients) (the demand heavy
		// clients had not written yet, at most 1/flushDivisor of theirs,
		// is left out then, as other workers' is).
		small := int(r.plan.n)+int(r.plan.pending) <= r.inPlaceMax || r.plan.carried
		if step, _ := transition(&r.plan, r.cfg, t, r.behind(t), who); step == stepRoll && small || step == stepJump || r.planBad {
			r.flush(t)
		}
	}
	var (
		taken           stepKind
		cur, next       plan
		found           scanned
		bcas            uint32
		bcorrupt, reset bool
		completes       bool // next replaces a provisional plan with the slices read
		began           scanStart
		vread           budget // the budget read, when of next's window
		closed          WindowFairness
	)
	published, err := r.publish(func(read plan, corrupt bool) (*plan, error) {
		// (Afresh at every attempt: one that lost its CAS may publish
		// another kind of plan.)
		taken, cur, found, completes, closed = stepStay, read, scanned{}, false, WindowFairness{}
		v, vcas, vcorrupt, err := r.readBudget()
		if err != nil {
			return nil, err
		}
		bcas, bcorrupt = vcas, vcorrupt
		began, vread = scanStart{}, budget{}
		if corrupt {
			// Plan afresh under an id above every id any entry or the budget
			// holds (see scan), at the clock's window, or at the budget's if
			// that is later: windows never go back, even past a lost plan.
			// (Its id and count are not 0, which would read as no plan at
			// all: a worker that never read a plan, after an upgrade that
			// changed the format, say, must replace it too, whoever asks.)
			cur = plan{id: max(r.plan.id, 1), roll: r.plan.roll, shift: r.plan.shift, n: 1}
			k := windowIndex(real+cur.shift, r.cfg)
			if !bcorrupt && v.end > windowEnd(k, r.cfg) {
				k = windowIndex(v.end-1, r.cfg)
			}
			cur.window = k - 2
			if r.plan.id != 0 {
				// Nor before the newest window this worker saw: with the
				// budget lost too, nothing else remembers it, and opening
				// it afresh would serve it twice. A clock behind it waits,
				// or jumps past it (transition).
				_, seen := planWindow(&r.plan, r.cfg)
				cur.window = max(cur.window, windowIndex(seen-1, r.cfg)-1)
			}
		}
		t := real + cur.shift
		step, k := transition(&cur, r.cfg, t, r.behind(t), who)
		if step != stepRoll && step != stepReplan && step != stepJump {
			return nil, nil
		}
		// The newest config's windows and table are in force: a config
		// older than the one that made the plan keeps to them (newest).
		acfg, nb, born := r.cfg, r.own, r.born
		if newer := r.newest(&cur); newer != nil {
			acfg, nb, born = newer, int(cur.newBuckets), cur.born
			if step != stepReplan {
				k = windowIndex(t, acfg) // (a re-plan keeps the running window, its index with its alignment)
			}
		}
		next = plan{id: cur.id + 1, roll: cur.roll, window: k, at: t, buckets: uint32(nb), replan: step == stepReplan,
			cycle: int64(acfg.Cycle), offset: int64(acfg.WindowOffset), shift: cur.shift,
			born: born, newCycle: int64(acfg.Cycle), newOffset: int64(acfg.WindowOffset), newBuckets: int64(nb), print: r.sharePrint}
		switch step {
		case stepReplan:
			// The running window keeps its bounds and its table.
			next.cycle, next.offset, next.buckets = cur.cycle, cur.offset, cur.buckets
		case stepJump:
			next.shift = jumpShift(&cur, acfg, t)
			next.at = real + next.shift
			next.window = windowIndex(next.at, acfg)
		}
		if err := r.moveTable(&cur, int(next.buckets), corrupt); err != nil {
			return nil, err
		}
		if step != stepReplan {
			next.roll = next.id
		}
		if step == stepReplan || cur.id == 0 {
			// (A later roll does not promote: the candidate arrived in the
			// window before, and asks again in this one if it is genuine.)
			next.promoted = cand
		}
		if !bcorrupt && v.roll > cur.id && !corrupt {
			// A budget can only name a plan that was published before it was
			// written: one naming a later plan than the one read was written
			// after a plan published between the two reads (read both
			// again), or else it is corrupt.
			if _, cas, err := r.store.Get(r.planKey); err == nil && cas != r.planCAS {
				return nil, errReread
			}
			r.obs.ValueReset(r.budgetKey, errCorrupt)
			bcorrupt = true
		}
		reset = step != stepReplan && !corrupt // a fresh window: an unreadable budget is reset empty
		if start, _ := planWindow(&next, r.cfg); !bcorrupt && v.end > start {
			vread = v
		}
		capacity, left := r.budgetLeft(&next, v, bcorrupt, reset)
		switch {
		case who == callerTick && cur.provisional && step == stepReplan:
			// The plan read and computed in slices replaces cur (slice).
			sl := &r.sliced
			if sl.roll != cur.roll || sl.buckets != cur.buckets || !sl.computing || sl.math.phase != phaseDone {
				return nil, nil
			}
			if sl.math.capacity != capacity {
				sl.computing = false // the capacity changed meanwhile: computed again
				return nil, nil
			}
			found, completes = sl.found, true
			copyShares(&next, &sl.math.next)
			began = scanStart{plan: next.id, sliced: true, at: sl.returned}
			// Clients proven since the read started are counted under cur
			// (registered) though the read may have passed their buckets
			// before: they stay pending, so the table's bound holds and the
			// next re-plan counts them (one the read did count is then
			// counted twice until it: the safe side).
			next.pending = uint32(max(0, int64(cur.n)+int64(cur.pending)-sl.startN))
			r.owePending(&next)
			if sl.judges {
				if !sl.judging.done() {
					return nil, nil
				}
				closed = sl.judging.out
			}
			taken = step
			return &next, nil
		case !corrupt && r.newest(&cur) == nil && next.buckets == cur.buckets && provisional(&next, &cur, capacity, r.inPlaceMax):
			taken = step
			return &next, nil
		}
		if corrupt {
			// The new id must be known before the scan: which clients are
			// new depends on it. A first pass finds the highest id in use.
			first, err := r.scan(&cur, &next, futureCounts)
			if err != nil {
				return nil, err
			}
			next.id = max(first.top, cur.id, v.roll) + planResetJump
			next.roll = next.id
		}
		rule := futureCorrupt
		if corrupt {
			rule = futureCounts
		}
		began = scanStart{plan: next.id, at: vread.granted + 2*vread.returned}
		if found, err = r.scan(&cur, &next, rule); err != nil {
			return nil, err
		}
		computePlan(&next, &r.scratch, r.pol, capacity, left)
		closed = judgeWindow(cur.capacity, &r.scratch.closed)
		taken = step
		return &next, nil
	})
	if err != nil || !published {
		return stepStay, err
	}
	r.began = began
	r.switchOwed()
	switch {
	case completes:
		r.sliced = planSlices{}
	case next.provisional && (!next.replan || !cur.provisional):
		// One worker reads the table for a provisional plan: the one that
		// published a roll, or a re-plan over a plan that was not
		// provisional (over one that was, the same window's reader reads
		// on).
		var closing *plan // the window the roll closed, judged by the slices
		if !next.replan {
			closing = &cur
		}
		r.startSlices(&next, next.at, closing, vread.returned)
	}
	r.resetCorrupt(found.corrupt, bcas, bcorrupt, reset)
	if taken == stepJump {
		r.obs.ClockJump(time.Duration(next.shift - cur.shift))
	}
	r.obs.Rollover(RolloverEvent{
		Plan:        next.id,
		Window:      next.window,
		Early:       next.replan && !completes,
		Replan:      next.replan && !completes,
		Provisional: next.provisional,
		Completes:   completes,
		Clients:     int(next.n),
		Registered:  found.registered,
		Forgotten:   max(0, int(cur.n)+found.registered-int(next.n)),
		Closed:      closed,
	})
	return taken, nil
}

// newest is the alignment (cycle and offset) of the newest config that
// served the limit, when that is a newer config than this worker's, with
// a different alignment or table (its table: cur.newBuckets); nil when this
// worker's own config is the newest, or agrees with it.
func (r *view) newest(cur *plan) *Config {
	if cur.id == 0 || cur.born <= r.born || cur.newCycle <= 0 || cur.newBuckets <= 0 || r.ownsAlignment(cur) {
		return nil
	}
	c := *r.cfg
	c.Cycle, c.WindowOffset = time.Duration(cur.newCycle), time.Duration(cur.newOffset)
	return &c
}

func (r *view) ownsAlignment(p *plan) bool {
	return p.newCycle == int64(r.cfg.Cycle) && p.newOffset == int64(r.cfg.WindowOffset) && int(p.newBuckets) == r.own
}

// moveTable makes the table of nb buckets the one in use for the next
// plan. When it is not cur's (a config with another max_clients made the
// plan), the clients cur's table holds are copied into it first, up to
// this config's max_clients, so that nobody becomes a newcomer because the
// table changed. Entries written to
// the old table after the copy are lost with it: counters of a window the
// new plan does not count in, or a registration that is made again.
func (r *view) moveTable(cur *plan, nb int, corrupt bool) error {
	from := int(cur.buckets)
	if from == 0 || from == nb || corrupt {
		r.useTable(nb)
		return nil
	}
	r.useTable(from)
	var keep []entry
	for b := 0; b < r.nb; b++ {
		raw, _, err := r.store.Get(r.key(b))
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			r.obs.StoreFailure("get bucket", err)
			return err
		}
		if decodeBucket(raw, &r.bkt) != nil {
			continue // unreadable: its clients come back as newcomers
		}
		for i := range r.bkt.entries {
			if x := &r.bkt.entries[i]; !free(x, cur, r.cfg) && len(keep) < r.cfg.MaxClients {
				keep = append(keep, *x) // (the new table holds at most its max_clients)
			}
		}
	}
	r.useTable(nb)
	for _, e := range keep {
		if err := r.put(e); err != nil && !errors.Is(err, errFull) {
			return err
		}
	}
	return nil
}

// behind is how long this worker's clock (t, shifted) has read before the
// view's window while the window did not move; 0 when it does not read
// before it. A late read that catches up, or a new window, starts it anew.
func (r *view) behind(t int64) int64 {
	start, _ := planWindow(&r.plan, r.cfg)
	switch {
	case r.plan.id == 0 || t >= start:
		r.stuck.on = false
		return 0
	case !r.stuck.on || r.stuck.roll != r.plan.roll || t < r.stuck.since:
		// (A reading further back, a clock that stepped back again, starts
		// the wait anew: the time behind is measured on one clock.)
		r.stuck = stuckClock{on: true, roll: r.plan.roll, since: t}
		return 0
	}
	return t - r.stuck.since
}

// scanned is what scan found besides the clients it recorded.
type scanned struct {
	top        uint64       // the highest plan id any entry names (for a plan reset)
	registered int          // clients next counts and cur did not
	corrupt    []corruptKey // unreadable buckets, for resetCorrupt
}

// futureRule is what a scan makes of an entry that names a plan id at or
// above the one it plans (next's): a plan nobody has published yet.
type futureRule uint8

const (
	// futureCounts: a plan reset's, whose next id is made up (its first
	// pass finds the highest id in use).
	futureCounts futureRule = iota
	// futureCorrupt: under a plan read with its CAS, such an entry is
	// impossible (had another worker published such a plan, next's CAS
	// would fail): its bucket is treated as unreadable.
	futureCorrupt
	// futureStops: a slice read after the plan, without its CAS, may see an
	// entry of a plan published since: the scan stops before that bucket
	// (errFuture), for the plan to be read again.
	futureStops
)

// errFuture: a slice found an entry of a plan after the one it read.
var errFuture = errors.New("an entry of a later plan")

// scan reads every bucket and records the clients counted in next (in
// r.scratch, for computePlan).
func (r *view) scan(cur, next *plan, future futureRule) (scanned, error) {
	r.scratch.reset()
	r.sliced = planSlices{} // (the slices read so far are in the scratch reset)
	var out scanned
	// A roll into a new window closes cur's: its clients are judged too
	// (not after an unreadable plan, when cur is made up).
	closing := future == futureCorrupt && cur.id != 0 && next.window > cur.window && !next.replan
	_, _, err := r.scanBuckets(cur, next, future, closing, 0, math.MaxInt, &out)
	return out, err
}

// scanBuckets reads buckets from the from-th on into r.scratch and out
// (see scan), until it has read every bucket or done at least most work
// (a bucket read, and each entry in it, counts one), and returns the
// bucket it stopped before and the work done.
// With closing, the clients counted in cur are judged for its window.
func (r *view) scanBuckets(cur, next *plan, future futureRule, closing bool, from int, most int, out *scanned) (int, int, error) {
	read := 0
	for b := from; b < r.nb; b++ {
		if read >= most {
			return b, read, nil
		}
		read++
		raw, cas, err := r.store.Get(r.key(b))
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			r.obs.StoreFailure("get bucket", err)
			return b, read, err
		}
		if err := decodeBucket(raw, &r.bkt); err != nil {
			out.corrupt = append(out.corrupt, corruptKey{b, cas})
			continue
		}
		read += len(r.bkt.entries)
		mark, cmark, markNew := len(r.scratch.hashes), len(r.scratch.closed.demands), out.registered
		for i := range r.bkt.entries {
			e := &r.bkt.entries[i]
			if future != futureCounts && (e.plan >= next.id || e.created >= next.id) {
				r.scratch.truncate(mark, cmark)
				out.registered = markNew
				if future == futureStops {
					return b, read, errFuture
				}
				out.corrupt = append(out.corrupt, corruptKey{b, cas})
				break
			}
			out.top = max(out.top, e.plan, e.created)
			if closing && counted(e, cur, r.cfg) {
				r.scratch.closed.add(e, cur, r.cfg)
			}
			if counted(e, next, r.cfg) {
				r.scratch.add(e, next, r.cfg)
				if !registered(e, cur) || cur.id == 0 {
					out.registered++
				}
			}
		}
	}
	return r.nb, read, nil
}

// Plans over a large table: a request does not read the table. It
// publishes a provisional plan (see provisional), and the worker that
// published it reads the table a slice at a time on its ticks, then
// publishes the plan that replaces it: a re-plan of the window, over every
// client, as a tick would have made it in place.

// planSlices is a plan over a large table that this worker reads a slice
// at a time.
type planSlices struct {
	roll      uint64 // the roll of the window it plans (0: none under way)
	buckets   uint32 // the table it reads
	next      plan   // what decides who it counts: the plan it will publish
	startN    int64  // the clients the provisional plan counted and had pending when the read started
	deadline  int64  // (shifted) when the plan should be published: slices grow to meet it
	last      int64  // (real) the last slice: one every PlanTick/2 at most
	skipped   bool   // the last call did no slice, PlanTick/2 not having passed
	gap       int64  // the time between the last two slices: the ticks' period, as they come
	returned  int64  // the window budget's returned when the read started (racing)
	bucket    int    // the next bucket to read
	read      int64  // the work the reading did so far (scanBuckets' unit)
	found     scanned
	computing bool     // the table is read: math computes the plan, a step a slice
	stepped   int64    // the arithmetic's steps given to math and judging so far
	math      planMath // (its capacity: the budget's when it started)
	judges    bool     // the slices judge the window the roll closed: closed's
	closed    plan
	judging   judging // once the plan is computed, with judges
}

// sliceWork is the least work a slice does: buckets and entries read, or
// planMath's steps over mathPerEntry (its time in Wasm: design.md, the
// measured plan cost).
const sliceWork = 128

// mathPerEntry is how many of a plan's arithmetic steps (planMath and
// judging) count as much work as reading one entry.
const mathPerEntry = 8

// mathPerClient is a little more than the arithmetic steps a plan takes
// per client counted, its judgment's included: about 17 under the seed
// policy at 100,000 clients. Too few, and the slices leave arithmetic to
// the one at the deadline, which does all that is left at once.
const mathPerClient = 20

// PlanTick is how often a host should tick a limiter that reads a plan a
// slice at a time (Limiter.PlanAt). The slices before the deadline share
// the work, so the shorter the period, the less each does (down to
// sliceWork): 2 ms keeps a slice near sliceWork at 100,000 clients in
// 10 s windows, where 5 ms gave each more than twice that.
const PlanTick = 2 * time.Millisecond

// A plan read in slices should be published within half a window (its
// deadline), and within three quarters of what is left of its window when
// its read starts later (a roll by the window's first request, late): a
// roll over a plan whose read never completed is planned in place (see
// provisional). Its slices grow to meet the deadline whatever the ticks,
// and one that comes after it reads and computes all that is left.
// Another worker takes over a plan still provisional three quarters of a
// window after it was published (planTakeover).
const (
	planDeadline = 2 // cycle/planDeadline after the read starts
	planTakeover = 4 // cycle × 3/planTakeover after the provisional plan
)

// startSlices starts reading the table for the plan that replaces the
// provisional plan p, at t (shifted). closing is the plan of the window
// p's roll closed, when this worker knows it: the slices judge that window
// (nil: it goes unjudged, as when another worker's roll is taken over).
func (r *view) startSlices(p *plan, t int64, closing *plan, returned int64) {
	r.scratch.reset()
	_, end := planWindow(p, r.cfg)
	r.sliced = planSlices{roll: p.roll, buckets: p.buckets, startN: int64(p.n) + int64(p.pending), deadline: min(t+p.cycle/planDeadline, t+max(0, end-t)*3/4), returned: returned,
		next: plan{id: p.id + 1, roll: p.roll, window: p.window, at: t,
			replan: true, cycle: p.cycle, offset: p.offset, buckets: p.buckets}}
	if closing != nil && closing.id != 0 && closing.window < p.window {
		r.sliced.closed, r.sliced.judges = *closing, true
	}
}

// slice does the next slice of the plan this worker reads over a large
// table under a provisional plan, and publishes the plan that replaces it
// once the table is read and the plan computed. It reports whether this
// worker still reads one. A worker that did not publish the provisional
// plan starts reading it only once it is late (planTakeover), in case the
// one that did stopped.
func (r *view) slice(real int64) bool {
	p, s := &r.plan, &r.sliced
	if !p.provisional {
		*s = planSlices{}
		return false
	}
	t := real + p.shift
	if s.roll != p.roll || s.buckets != p.buckets {
		*s = planSlices{} // (slices of a window gone)
		// Late: three quarters of a window after the provisional plan; for
		// a roll's (carried), after the window's start, which re-plans for
		// newcomers do not move.
		late := p.at + 3*p.cycle/planTakeover
		if p.carried {
			start, _ := planWindow(p, r.cfg)
			late = min(late, start+3*p.cycle/planTakeover)
		}
		if t < late {
			return false
		}
		r.startSlices(p, t, nil, 0) // (every give-back of the window counts as racing)
	}
	since := real - s.last
	if since >= 0 && since < int64(PlanTick)/2 && !s.skipped {
		// (A host's tick after its PlanAt, say: one slice will do. Every
		// other call slices all the same: a clock that stepped back reads
		// as the latest reading until it catches up, and would otherwise
		// stall the slices as long.)
		s.skipped = true
		return true
	}
	s.skipped = false
	if s.last != 0 {
		s.gap = since
	}
	s.last = real
	// (A provisional re-plan since the start, for newcomers: the plan this
	// one publishes follows it. What the slices read is still the
	// window's.)
	s.next.id = p.id + 1
	work := r.sliceWork(t, int64(p.n))
	if s.bucket < r.nb {
		// (On a store failure, read again from where it failed, at the
		// next slice.)
		cur := p
		if s.judges {
			cur = &s.closed
		}
		var (
			err  error
			read int
		)
		s.bucket, read, err = r.scanBuckets(cur, &s.next, futureStops, s.judges, s.bucket, work, &s.found)
		s.read += int64(read)
		if errors.Is(err, errFuture) {
			// An entry of a plan after the one read: read the plan again,
			// and the bucket with it at the next slice; if the plan has not
			// moved, the entry is impossible and its bucket unreadable.
			id := p.id
			if r.refresh(real) == nil && r.plan.id == id && r.plan.provisional {
				s.bucket, _, _ = r.scanBuckets(cur, &s.next, futureCorrupt, s.judges, s.bucket, 1, &s.found)
			}
		}
		if s.bucket < r.nb || t < s.deadline {
			return true // (the arithmetic starts at the next slice)
		}
	}
	if !s.computing {
		v, _, corrupt, err := r.readBudget()
		if err != nil {
			return true
		}
		capacity, left := r.budgetLeft(&s.next, v, corrupt, false)
		s.math.start(&s.next, &r.scratch, r.pol, capacity, left)
		s.math.ahead = true
		s.computing = true
	}
	// (Arithmetic on what the scan recorded: a step is cheaper than
	// reading an entry.)
	steps := work
	if steps < math.MaxInt/mathPerEntry {
		steps *= mathPerEntry
		s.stepped += int64(steps)
	}
	if !s.math.step(steps) {
		return true
	}
	if s.judges {
		if s.judging.c == nil {
			s.judging.start(s.closed.capacity, &r.scratch.closed)
		}
		if !s.judging.step(steps) {
			return true
		}
	}
	if _, err := r.replan(real, callerTick, 0); err != nil {
		return true // (the slices stay read: publishing is tried again at the next tick)
	}
	return s.roll != 0 // (a completed plan ends the slices: replan)
}

// sliceWork is how much work the slice at t does (scanBuckets' unit),
// for a table of about n clients: what is left, over the slices left
// until the deadline at one every PlanTick (or as often as the ticks came
// last, if less often), and at least sliceWork. At or past the deadline,
// all that is left.
func (r *view) sliceWork(t, n int64) int {
	s := &r.sliced
	slices := (s.deadline - t) / max(int64(PlanTick), s.gap)
	if slices < 1 {
		return math.MaxInt
	}
	// Left to do: the buckets not read and their entries (as many per
	// bucket as those read so far held, or as the plan counts, if more: a
	// flood's unproven newcomers hold places it does not count), then the
	// arithmetic.
	unread := int64(r.nb - s.bucket)
	perBucket := 1 + n/int64(r.nb)
	if s.bucket > 0 {
		perBucket = max(perBucket, s.read/int64(s.bucket))
	}
	left := unread*perBucket + max(0, n*mathPerClient-s.stepped)/mathPerEntry
	return int(max(sliceWork, left/slices))
}

// resetCorrupt rewrites the unreadable values the plan's scan found. Only
// the roller may: it read them before the new plan existed, so they cannot
// hide a grant under it, and the CAS of the unreadable value makes the
// write lose to any write since.
func (r *view) resetCorrupt(buckets []corruptKey, budgetCAS uint32, budgetCorrupt, freshRoll bool) {
	for _, c := range buckets {
		r.resetBucket(c.bucket, c.cas)
	}
	if budgetCorrupt {
		r.resetBudget(budgetCAS, freshRoll)
	}
}

// refresh reads the plan; an unreadable one is replaced at once by a plan
// for the clock's window (see view.replan). real is the clock's reading
// (unshifted).
//
// The plan it reads may be a window the clock has already left (nobody has
// rolled yet): it then plans the clock's window before anyone decides under
// the plan read, as current does.
func (r *view) refresh(real int64) error {
	corrupt, err := r.read()
	if err != nil {
		return err
	}
	if corrupt {
		if _, err := r.replan(real, callerCounted, 0); err != nil {
			return err
		}
	}
	return r.current(real)
}

// current makes sure the view is the plan for the clock reading real,
// planning a new window when the running one is over. It reads the store
// only when the cached plan says a step is due.
func (r *view) current(real int64) error {
	if r.plan.born < r.born {
		if err := r.claim(); err != nil {
			return err
		}
	}
	t := real + r.plan.shift
	step, _ := transition(&r.plan, r.cfg, t, r.behind(t), callerCounted)
	if step == stepStay {
		return nil
	}
	_, err := r.replan(real, callerCounted, 0)
	return err
}

// unshifted is the clock reading behind the shifted time t.
func (r *view) unshifted(t int64) int64 { return t - r.plan.shift }

// Leases: the view grants units only here (sync, with the budget's adjust
// and pacing's paced). They keep the two invariants of the engine:
//
//   - per client: an entry's granted never exceeds its share under the
//     entry's plan, because a lease takes at most share − granted under the
//     CAS that makes it visible, and a rebase sets share = granted +
//     allowance;
//   - per window: the budget's granted never exceeds the capacity in force
//     for the window, because every lease first takes its units from the
//     budget, under the budget's CAS, and gives back what it does not use.
//
// A worker admits only from units it leased, each unit once, so what a
// window admits is at most what its budget granted.

// held says what held a lease back, for the client's Retry-After: the
// borrow gate or pacing cut the take (clipped), pacing's next unit fits at
// paceAt (Unix ns, 0: pacing did not hold it), and the window budget cut
// it (cut) and may grant again at moreAt (Unix ns, 0: not before the
// window's end).
type held struct {
	clipped bool
	booked  bool // moreAt is a booking of the window budget (bookUnits)
	paceAt  int64
	turnAt  int64 // the client's turn at the pacer, to tell it (turnAt); 0: none
	cut     bool
	moreAt  int64
	counted bool // the take moved what its client is owed (adjust)
}

// clientState is what this worker holds for one counted client.
type clientState struct {
	hash      uint64
	bucket    int
	created   uint64 // the entry's created: tells a re-registered client's entry apart
	plan      uint64 // plan the share is under (the share period)
	window    int64  // window the lease and counts belong to
	share     int64
	granted   int64  // the entry's granted at the last sync
	lease     int64  // units this worker may still admit without the store
	unflushed int64  // units asked for here, not yet written to the entry
	flushed   int64  // units this worker wrote in window
	fresh     bool   // registered in this window (counts as a newcomer)
	exhausted bool   // nothing left (share or window budget) at the last sync
	accrues   int64  // when exhausted by the borrow gate: when the pool next grows (Unix ns), else 0
	booked    bool   // accrues is a booking of the window budget's (bookUnits)
	turnAt    int64  // paced: when it was told to come back, its turn at the pacer (turnAt), else 0
	unusable  uint64 // plan id under which the entry was found unreadable
	used      bool   // the lease was used since the last tick
	dirty     bool   // in the tick list
	roomy     bool   // far below its share at the last sync (roomy)
	unproven  bool   // its entry was a newcomer's seen once (tries 1) at the last sync
	// deferred is the window in which its demand waits in the closing
	// writes (see deferredDemand); next is the client after it in its
	// bucket's list there (listLink).
	deferred int64
	next     int32
	// Where the view's clientTable keeps it. (No field may be a pointer:
	// see clientTable.)
	slot int32
	gen  uint32
}

// reset starts the client's state afresh for window k: leases and counts of
// another window are over.
func (cs *clientState) reset(k int64) {
	cs.window, cs.lease, cs.unflushed, cs.flushed = k, 0, 0, 0
	cs.deferred, cs.next = 0, 0
	cs.used, cs.exhausted, cs.unusable, cs.accrues, cs.booked, cs.turnAt = false, false, 0, 0, false, 0
}

type syncResult uint8

const (
	syncOK      syncResult = iota
	syncStale              // the entry or the budget is under a newer plan than the view
	syncGone               // the client has no counted entry any more
	syncPending            // the entry is not counted in the view yet
	syncCorrupt            // the bucket holds an unreadable value
	syncFailed             // the store failed
	syncBusy               // CAS retries ran out
)

// sync is the one read-modify-write of a client's entry: it rebases the
// entry to the view's plan if needed, writes this worker's unwritten
// demand, optionally returns its unused lease, and optionally leases at
// least need more units (taking them from the window budget first). t is
// the shifted time of the call, for the borrow gate and pacing.
func (r *view) sync(cs *clientState, need int64, returnLease bool, t int64) syncResult {
	p := &r.plan
	var inHand int64  // budget units taken and not yet in the entry
	var counted int64 // of them, units whose take moved what the client is owed
	pooled := false   // a roomy client's lease: inHand draws from and goes to the pool
	var h held
	defer func() {
		switch {
		case inHand > 0 && pooled:
			r.stash(inHand)
		case inHand > 0:
			// (Taken, not written: what the client is owed goes back up
			// for the takes that moved it.)
			r.give(min(inHand, counted), true)
			r.give(inHand-min(inHand, counted), false)
		}
	}()
	if r.client(cs.hash) != cs || cs.bucket >= r.nb {
		// Dropped since the caller found it (a new table, a window two
		// behind): its bucket may mean nothing in the table in use.
		return syncGone
	}
	var e entry
	var take, ret int64
	budgetShort := false // the share has room but the window does not
	res := syncOK
	others := r.ahead.start(cs, need, t)
	found, err := r.updateEntry(cs.bucket, cs.hash, func(in *entry) (bool, error) {
		r.ahead.undo() // (leases of an attempt that lost its CAS)
		e = *in
		if res = r.writeDemand(&e, cs); res != syncOK {
			return false, nil
		}
		ret, take, budgetShort = 0, 0, false
		if returnLease {
			ret = min(cs.lease, e.granted)
			e.granted -= ret
		}
		if need > 0 {
			want, paceAt := leaseWant(r.pol, r.cfg, p, &e, need, cs.flushed+cs.unflushed, t)
			h.paceAt = max(h.paceAt, paceAt)
			if pooled = roomy(r.pol, r.cfg, &e); pooled && want > inHand {
				inHand += r.draw(want - inHand)
			}
			if want > inHand {
				var extra int64
				if pooled {
					extra = r.poolAsk()
				}
				gate := gateFor(r.pol, p, r.cfg, e.hash, e.granted+inHand, e.prev, t)
				// (again: an attempt before this one booked for the
				// request, and its booking is no early ask.)
				got, took, err := r.take(want-inHand+extra, need-inHand, t, gate, e.hash, h.booked)
				h.clipped = h.clipped || took.clipped
				h.booked, h.turnAt = took.booked, took.turnAt
				h.paceAt = max(h.paceAt, took.paceAt)
				h.cut, h.moreAt = took.cut, took.moreAt
				switch {
				case errors.Is(err, errStale):
					res = syncStale
					return false, nil
				case err != nil:
					return false, err
				}
				inHand += got
				if took.counted {
					counted += got
				}
			}
			if inHand >= need {
				take = min(want, inHand)
			} else {
				budgetShort = want > 0
			}
			e.granted += take
			if pooled && inHand > take {
				// (The rest is the pool's now: leases ahead draw from it.)
				r.stash(inHand - take)
				inHand = take
			}
		}
		*in = e
		return true, nil
	}, others)
	if err == nil && found && res == syncOK {
		r.ahead.apply()
	} else {
		r.ahead.undo()
	}
	switch {
	case err == nil && !found:
		return syncGone
	case err == nil && res != syncOK:
		return res
	case err == nil:
	case errors.Is(err, errCorrupt):
		return syncCorrupt
	case errors.Is(err, ErrRetriesExhausted):
		return syncBusy
	default:
		return syncFailed
	}
	inHand -= take
	if ret > 0 {
		r.give(ret, true)
	}
	if r.cfg.Pace && need > 1 && take < need && h.paceAt > 0 && !h.clipped {
		// Its paced share refused it, before the pacer: its next moment is
		// when both have room for all its units.
		h.paceAt = max(h.paceAt, r.pacerAt(t, need))
	}
	cs.flushed += cs.unflushed
	cs.unflushed = 0
	cs.lease += take - ret
	r.learn(cs, &e)
	// A request costing more than is left is refused without making the
	// client exhausted: a cheaper one may still fit.
	cs.exhausted = e.granted >= e.share || budgetShort || h.paceAt > 0
	cs.accrues = nextAccrual(h.paceAt, h.moreAt, budgetShort && h.cut)
	cs.booked, cs.turnAt = h.booked, h.turnAt
	if need == 1 && take < need && h.turnAt == 0 && e.share > 0 {
		// Refused under pacing, by something other than the pacer: its
		// paced amount, its share or the window's budget. It gets its turn
		// at the pacer from when it could succeed alone. (Its own requests
		// still go to the store from then: a turn changes what it is told,
		// not what it is admitted.) A client without a share gets none: at
		// its turn its share would refuse it, and the unit would be lost
		// to those told after it.
		after := cs.accrues
		if after == 0 {
			_, after = planWindow(p, r.cfg)
		}
		_, th := r.paced(0, 0, t, uint32(cs.hash), after)
		cs.turnAt = th.turnAt
	}
	return syncOK
}

// learn keeps in cs what the worker needs of entry e, as it just wrote it.
func (r *view) learn(cs *clientState, e *entry) {
	cs.plan, cs.share, cs.granted = e.plan, e.share, e.granted
	cs.roomy = roomy(r.pol, r.cfg, e)
	cs.unproven = e.tries == 1
	cs.fresh = isNew(e, &r.plan)
}

// Leases ahead: a request's sync reads and writes its client's whole
// bucket, which holds a dozen other clients at 100,000. Those that asked
// on this worker in the window before, far below their share (roomy),
// are likely to ask here again: each gets a lease from the pool in the
// same write, so that its first request of the window costs no store
// operation. Such a lease keeps both invariants as any does: the entry's
// granted stays within its share (leaseWant), under the write's CAS, and
// the pool's units come from the window budget. A client that does not
// ask here again keeps the lease unused until the window ends, as a
// roomy client keeps a chunk across ticks; since no worker leases it
// ahead more than it asked there in the window before, what all workers
// hold ahead for it is at most that window's demand: half its share at
// most, being roomy.
type leasesAhead struct {
	r      *view
	t      int64 // the sync's (shifted) time
	bucket int
	picked *clientState
	leased []aheadLease
}

type aheadLease struct {
	cs   *clientState
	e    entry // as written
	take int64
}

// start returns the leases ahead for the sync of cs needing need units
// at t, or nil when that sync makes none (not a request's, or a policy
// whose leases are never chunks).
func (a *leasesAhead) start(cs *clientState, need, t int64) entryOthers {
	r := a.r
	if _, lends := r.pol.(lender); need <= 0 || lends || r.cfg.Pace || r.cfg.Fleet != nil {
		return nil
	}
	a.t, a.bucket = t, cs.bucket
	return a
}

// pick takes the bucket's clients that asked on this worker in the window
// before (change leases no more than that) and were roomy then, while the
// pool has a chunk.
func (a *leasesAhead) pick(h uint64) bool {
	r := a.r
	cs, _ := r.clients.find(h)
	a.picked = cs
	return cs != nil && cs.window == r.plan.window-1 && cs.flushed+cs.unflushed > 0 && cs.bucket == a.bucket && cs.plan != 0 && cs.roomy && !cs.unproven &&
		r.pool.roll == r.plan.roll && r.pool.units >= leaseChunk
}

// change leases the picked client in its entry e, if it is still roomy
// under the view's plan, a chunk at most, and no more than it asked here
// in the window before.
func (a *leasesAhead) change(e *entry) bool {
	r, cs := a.r, a.picked
	asked := cs.flushed + cs.unflushed // (before writeDemand starts cs afresh)
	if e.tries == 1 || r.writeDemand(e, cs) != syncOK || !roomy(r.pol, r.cfg, e) {
		return false
	}
	want, _ := leaseWant(r.pol, r.cfg, &r.plan, e, 1, 0, a.t)
	take := r.draw(min(want, asked))
	if take <= 0 {
		return false
	}
	// (With granted > 0 the entry is long, so changeOthers writes it:
	// the lease is recorded only for an entry that is written.)
	e.granted += take
	a.leased = append(a.leased, aheadLease{cs: cs, e: *e, take: take})
	return true
}

// apply gives the clients their leases, once the write is made.
func (a *leasesAhead) apply() {
	r := a.r
	for i := range a.leased {
		l := &a.leased[i]
		if cs, _ := r.clients.find(l.e.hash); cs == l.cs {
			r.clients.renew(cs)
			cs.lease += l.take
			r.learn(cs, &l.e)
		}
	}
	clear(a.leased)
	a.leased = a.leased[:0]
}

// undo puts the leases of a write not made back in the pool.
func (a *leasesAhead) undo() {
	for _, l := range a.leased {
		a.r.stash(l.take)
	}
	clear(a.leased)
	a.leased = a.leased[:0]
}

// writeDemand is the part of every write of a client's entry that comes
// first: it checks entry e of cs under the view's plan (rebasing an entry of
// an older plan), starts cs afresh when e counts another window, and adds
// the demand cs has not written yet. Any result but syncOK leaves e as it
// was. The caller writes e back, then moves cs.unflushed to cs.flushed.
func (r *view) writeDemand(e *entry, cs *clientState) syncResult {
	p := &r.plan
	switch {
	case e.plan > p.id:
		return syncStale
	case !registered(e, p):
		return syncPending
	case expired(e, p, r.cfg) || retired(e, p, r.cfg) && cs.unflushed == 0 && cs.lease <= 0:
		// (A one-shot id this worker has seen ask again is proven
		// below, by the demand it writes, rather than retired; one it
		// holds a lease for hands the lease back first.)
		return syncGone
	case e.plan < p.id:
		rebase(e, p, r.pol, r.cfg)
	}
	if cs.window != e.window || cs.created != e.created {
		// Counts and leases of another window, or of an earlier entry
		// of this client (its bucket was reset), are over here.
		cs.reset(e.window)
		cs.created = e.created
	}
	e.demand += cs.unflushed
	if e.demand > 0 {
		e.active = max(e.active, e.window)
	}
	if e.tries == 1 && askedAgain(e, r.cfg) {
		e.tries = 2
	}
	return syncOK
}

// take draws up to n units from the window budget (adjust), then through pacing (paced), and
// gives back what pacing held. It returns errStale when the budget belongs
// to a newer plan's window than the view, and ErrRetriesExhausted under
// contention. An unreadable budget grants nothing: it may hide grants, and
// only the next roller may reset it. gate is the borrow gate of the lease
// being sized; what held the take back is reported for the client's
// Retry-After.
func (r *view) take(n, need, t int64, gate borrowGate, client uint64, again bool) (int64, held, error) {
	start, end := planWindow(&r.plan, r.cfg)
	var ask *bookAsk
	if gate.on && !r.cfg.Pace {
		ask = &bookAsk{client: uint32(client), need: need, t: t, start: start, end: end, again: again}
	}
	got, clipped, bookedAt, err := r.adjust(n, gate, ask)
	if err != nil {
		return 0, held{}, err
	}
	m, h := r.paced(got, need, t, uint32(client), 0)
	if m < got {
		r.give(got-m, false)
	}
	h.counted = ask != nil && got >= ask.need // (as adjust counts it; paced, nothing is)
	h.clipped = h.clipped || clipped
	switch {
	case bookedAt > 0:
		h.cut, h.moreAt, h.booked = true, bookedAt, true
	case got < n:
		gate.had += got
		h.cut, h.moreAt = true, budgetMoreAt(r.seen, gate, clipped, r.cfg, t, start, end)
	}
	return m, h, nil
}

// unbook cancels the booking of a client that asked at t, before the time
// it was told (see settleBookings): it does not wait for its unit, so the
// unit is not set aside for it.
func (r *view) unbook(cs *clientState, t int64) {
	cs.booked = false
	_, _, _, _ = r.adjust(0, borrowGate{}, &bookAsk{client: uint32(cs.hash), t: t})
}

// waitsForPool reports whether a client exhausted by the borrow gate must
// still wait at t: before its next accrual, asking the store again cannot
// help.
func (cs *clientState) waitsForPool(t int64) bool { return cs.accrues == 0 || t < cs.accrues }

// tick is TickAt's work at the clock reading real: it reads the plan,
// writes demand back and returns unused leases it does not keep
// (tickClients), and plans when a plan is due.
func (r *view) tick(real int64) {
	if err := r.refresh(real); err != nil {
		return
	}
	t := real + r.plan.shift
	r.tickClients(t)
	r.returnPool()
	r.writeDeferred(t)
	if r.slice(real) || r.plan.provisional {
		return
	}
	if step, _ := transition(&r.plan, r.cfg, t, r.behind(t), callerCounted); step != stepStay {
		_, _ = r.replan(real, callerCounted, 0)
	}
}

// tickClients flushes demand and returns leases unused since the last
// tick, but those it keeps (clientState.keeps).
func (r *view) tickClients(t int64) {
	keep := r.dirty[:0]
	for _, cs := range r.dirty {
		// An unused chunk of a roomy client stays: returning it and leasing
		// again would cost two writes, and its share is far from out.
		idle := cs.lease > 0 && !cs.used && !cs.keeps()
		// Demand that waits for the closing writes is written there.
		unwritten := cs.unflushed > 0 && !r.waits(cs)
		if cs.window == r.plan.window && cs.plan != 0 && (unwritten || idle) {
			r.sync(cs, 0, idle, t)
		}
		cs.used = false
		// A kept chunk with nothing to write needs no tick: the client's
		// next request puts it back in the list (markDirty). So the list, and
		// a tick's work, is the clients that asked since the last tick,
		// not every client holding a chunk.
		if cs.window == r.plan.window && (unwritten || cs.lease > 0 && !cs.keeps()) {
			keep = append(keep, cs)
		} else {
			cs.dirty = false
		}
	}
	clear(r.dirty[len(keep):])
	r.dirty = keep
}

// keeps reports whether the worker keeps the client's unused lease across
// ticks: at most a chunk, of a roomy client (as of the last sync).
func (cs *clientState) keeps() bool { return cs.roomy && cs.lease <= leaseChunk }

// flush writes back this worker's demand before it plans a new window, so
// that the plan counts it.
func (r *view) flush(t int64) {
	r.writeAllDeferred()
	for _, cs := range r.dirty {
		if cs.unflushed > 0 && cs.window == r.plan.window && cs.plan != 0 {
			r.sync(cs, 0, false, t)
		}
	}
}

func (r *view) markDirty(cs *clientState) {
	if !cs.dirty {
		cs.dirty = true
		r.dirty = append(r.dirty, cs)
	}
}

// flushDue reports whether the client's unwritten demand is to be written
// now rather than on tick: at once while it is light, so that plans read
// it exactly, and once it reaches 1/flushDivisor of what was written when
// heavy. (Written on tick instead, the demand of many light clients would
// be written all at once: one write per client asking since the last
// tick, in one callback.)
func (cs *clientState) flushDue() bool {
	return cs.unflushed > 0 && cs.unflushed >= max(1, cs.flushed/flushDivisor)
}

// Demand written late: a client far below its share (roomy) that is
// admitted from its lease writes no demand on its request. Only the plans
// read demand, and the plan of the next window reads it at the window's
// end, so the worker writes it then, once per bucket rather than once per
// request: over the window's last eighth, on fast ticks
// (Limiter.PlanAt), a bounded number of buckets at a time (the closing
// writes). Once its bucket is written, or all are, a client's demand is
// written at once again (flushDue), so a client asking late is not left
// out. Only the plans' inputs wait: leases, and so both invariants, are as
// before. Demand still unwritten when the window is over (the ticks came
// too late) is lost, as a heavy client's last 1/flushDivisor is: the
// client lends a little more in the next plan, and keeps its reservation.
type deferredDemand struct {
	window   int64   // the window the lists hold demand of
	heads    []int32 // by bucket: the first of its clients with demand waiting (listLink), or bucketWritten
	buckets  []int32 // the buckets with demand waiting, in the order they came
	done     int     // buckets[:done] are written
	writing  bool    // the window's last eighth has begun and buckets are left
	finished bool    // the closing writes wrote every bucket listed
}

// bucketWritten marks, in deferredDemand.heads, a bucket the closing writes
// have written.
const bucketWritten = -1

// listLink is how the closing writes' lists name a client: its slot + 1,
// so that 0 ends a list.
func listLink(cs *clientState) int32 { return cs.slot + 1 }

// linked is the client a list link names (0: none).
func (r *view) linked(link int32) *clientState {
	if link <= 0 {
		return nil
	}
	return r.clients.at(link - 1)
}

// closingDivisor: demand waits until the last 1/closingDivisor of a window.
// A request whose bucket the closing writes have written writes at once:
// at 100,000 clients asking three times a window, that was 0.15 syncs a
// request with the last quarter, and 0.06 with the last eighth.
const closingDivisor = 8

// closing reports whether shifted time t is in the last eighth of the
// view's window.
func (r *view) closing(t int64) bool {
	start, end := planWindow(&r.plan, r.cfg)
	return t >= end-(end-start)/closingDivisor
}

// deferDemand reports whether the demand cs has not written may wait for
// the closing writes, and puts cs in its bucket's list if so.
func (r *view) deferDemand(cs *clientState, t int64) bool {
	if !cs.roomy || cs.window != r.plan.window {
		return false
	}
	d := &r.deferred
	if d.window != r.plan.window || len(d.heads) != r.nb {
		r.dropDeferred()
		d.window = r.plan.window
	}
	if d.heads == nil {
		d.heads = make([]int32, r.nb)
	}
	// A one-shot id proves itself by the demand it writes (askedAgain),
	// which re-plans within the window read: it is written at once. So is
	// a client whose bucket is written, whatever the clock says next: its
	// list is not read again in the window.
	if cs.unproven || d.heads[cs.bucket] == bucketWritten || r.closing(t) && d.finished {
		return false
	}
	if cs.deferred == d.window {
		return true
	}
	if d.heads[cs.bucket] == 0 {
		d.buckets = append(d.buckets, int32(cs.bucket))
	}
	cs.deferred, cs.next, d.heads[cs.bucket] = d.window, d.heads[cs.bucket], listLink(cs)
	return true
}

// dropDeferred forgets the lists (a new window or table): what they still
// hold is lost.
func (r *view) dropDeferred() {
	d := &r.deferred
	for _, b := range d.buckets {
		if int(b) < len(d.heads) {
			d.heads[b] = 0
		}
	}
	if len(d.heads) != r.nb {
		d.heads = nil
	}
	*d = deferredDemand{heads: d.heads, buckets: d.buckets[:0]}
}

// waits reports whether cs's demand is in the closing writes' lists.
func (r *view) waits(cs *clientState) bool {
	return cs.deferred == r.plan.window && r.deferred.window == r.plan.window
}

// writeDeferred writes the waiting demand of closingWork buckets, once the
// view's window is in its last eighth at t, and reports whether buckets
// are left for later calls.
func (r *view) writeDeferred(t int64) bool {
	d := &r.deferred
	if d.window != r.plan.window {
		if len(d.buckets) > 0 {
			r.dropDeferred()
		}
		return false
	}
	if !r.closing(t) || d.done == len(d.buckets) {
		d.writing = false
		d.finished = d.finished || r.closing(t)
		return false
	}
	for most := r.closingWork(t); d.done < len(d.buckets) && most > 0; most-- {
		r.writeNextDeferred()
	}
	d.writing = d.done < len(d.buckets)
	d.finished = !d.writing
	return d.writing
}

// writeNextDeferred writes the next listed bucket.
func (r *view) writeNextDeferred() {
	d := &r.deferred
	b := int(d.buckets[d.done])
	d.done++
	head := r.linked(d.heads[b])
	d.heads[b] = bucketWritten
	r.writeBucketDemand(b, head)
}

// writeAllDeferred writes every listed bucket now, whatever the time (a
// plan is about to be made from them), and starts the lists afresh.
func (r *view) writeAllDeferred() {
	d := &r.deferred
	if d.window == r.plan.window {
		for d.done < len(d.buckets) {
			r.writeNextDeferred()
		}
	}
	r.dropDeferred()
	d.window = r.plan.window
}

// closingWork is how many buckets a closing write takes at t: what is left,
// spread over the PlanTicks until three quarters of the time left to the
// window's end, and at least minClosingWork.
func (r *view) closingWork(t int64) int {
	d := &r.deferred
	_, end := planWindow(&r.plan, r.cfg)
	calls := max(1, (end-t)*3/4/int64(PlanTick))
	left := int64(len(d.buckets) - d.done)
	return int(min(max(minClosingWork, (left+calls-1)/calls), maxClosingWork))
}

// A closing write takes at least minClosingWork buckets, and at most
// maxClosingWork: a first closing tick that comes late, near the window's
// end, writes what it can and leaves the rest unwritten rather than stall.
const (
	minClosingWork = 16
	maxClosingWork = 256
)

// writeBucketDemand writes the waiting demand of the clients listed from
// head, all in bucket b, with one read-modify-write of the bucket.
func (r *view) writeBucketDemand(b int, head *clientState) {
	// Out of the list first: a write may start a client afresh (reset).
	group := r.group[:0]
	for cs := head; cs != nil; {
		next := r.linked(cs.next)
		cs.deferred, cs.next = 0, 0
		if cs.unflushed > 0 && r.client(cs.hash) == cs && cs.bucket == b {
			group = append(group, cs)
		}
		cs = next
	}
	wrote := r.wrote[:0]
	if len(group) > 0 && b < r.nb {
		err := r.updateBucket(b, nil, func(bkt *bucketVal, missing bool) (bool, error) {
			wrote = wrote[:0]
			for _, cs := range group {
				for i := range bkt.entries {
					if missing || bkt.entries[i].hash != cs.hash {
						continue
					}
					e := bkt.entries[i]
					if r.writeDemand(&e, cs) == syncOK {
						bkt.entries[i] = e
						wrote = append(wrote, cs)
					}
					break
				}
			}
			return len(wrote) > 0, nil
		})
		if err != nil {
			wrote = wrote[:0]
		}
	}
	for _, cs := range wrote {
		cs.flushed += cs.unflushed
		cs.unflushed = 0
	}
	// The rest (not written: the store failed, or the entry is under a
	// newer plan or gone) is out of the lists: its next request or tick
	// writes it as it would any client's.
	for _, cs := range group {
		if cs.unflushed > 0 {
			r.markDirty(cs)
		}
	}
	clear(wrote)
	clear(group)
	r.wrote, r.group = wrote[:0], group[:0]
}

// Clients the worker holds no state for: arrive finds or registers them.
// A newcomer is unproven until it asks again (see registered); bucket
// marks refuse a flood of never-seen ids without reading.

// arrival is what became of the request of a client the worker held no
// state for (arrive).
type arrival struct {
	kind    arrivalKind
	bucket  int    // arrivedCounted: where its entry is
	created uint64 // arrivedCounted: the entry's created
	mark    bool   // arrivedWaiting: remember it as told to wait under the view's plan
	proven  bool   // with mark: its entry records it as proven
}

type arrivalKind uint8

const (
	arrivedCounted arrivalKind = iota // counted in the view's plan
	arrivedWaiting                    // waits for a plan that counts it
	arrivedRefused                    // the table has no room for it
)

// arrive handles a client this worker holds no state for: a client other
// workers registered (found in its bucket), a newcomer waiting for a plan,
// or a newcomer to register. A newcomer enters the table unproven and is
// counted by a re-plan its own request makes, if one is allowed now;
// otherwise it waits, and asking again proves it, so that the next re-plan
// counts it (see registered). A newcomer this worker refused in the window
// (table_full) that asks again has proven itself too: it takes table room,
// but none of the places a flood of one-shot ids fills, so a genuine client
// is counted by the next re-plan whatever the flood. Its repeats while the
// table is full, and repeats of a newcomer told to wait once proven, touch
// no shared state.
func (r *view) arrive(t int64, h uint64, cost int64) (arrival, error) {
	waiting := arrival{kind: arrivedWaiting}
	refused := arrival{kind: arrivedRefused}
	refusedBefore := false
	if w, ok := r.refused[h]; ok && w.window == r.plan.window {
		// Refused again without a read only under the plan that refused
		// it: a later one (another worker's re-plan) may count it.
		if w.plan == r.plan.id && int(r.plan.n)+int(r.plan.pending) >= r.cfg.MaxClients {
			return refused, nil
		}
		refusedBefore = true
	}
	if !refusedBefore && r.closedTo(t, h) {
		return refused, nil
	}
	if m, ok := r.waiting[h]; ok && m.plan == r.plan.id && m.proven && (r.plan.pending == 0 || !replanAllowed(&r.plan, r.cfg, t)) {
		// Proven and told to wait under this plan, and no re-plan can be
		// due yet (or none is wanted as far as this worker knows: its next
		// tick catches up).
		return waiting, nil
	}
	if r.plan.id == 0 {
		// No plan seen yet: read it, or every client looks new.
		if err := r.refresh(r.unshifted(t)); err != nil {
			return arrival{}, err
		}
	}
	b, e, found, err := r.find(h)
	if err == nil && found && !registered(&e, &r.plan) {
		// Waiting, as far as this worker's view goes: the view may be
		// behind the plan that counted it. (Found again: that plan's
		// table may be another.)
		if err := r.refresh(r.unshifted(t)); err != nil {
			return arrival{}, err
		}
		b, e, found, err = r.find(h)
	}
	if errors.Is(err, errCorrupt) {
		// Its bucket is reset by the next plan; until then repeats wait
		// here without reading it again.
		return arrival{kind: arrivedWaiting, mark: true, proven: true}, nil
	}
	if err != nil {
		return arrival{}, err
	}
	if found && counted(&e, &r.plan, r.cfg) {
		return arrival{kind: arrivedCounted, bucket: b, created: e.created}, nil
	}
	who, cand := callerCounted, uint64(0)
	switch {
	case found && waitingUnproven(&e) && r.plan.id == 0:
		// No plan yet: the first plan counts the newcomer that makes it.
		// (Proving would write a plan id no plan was published under,
		// which the first plan may not have seen.)
		who, cand = callerWaiting, h
	case found && waitingUnproven(&e):
		// It asked again: proven. The next re-plan counts it.
		err = r.prove(e, t, int64(e.prev))
	case !found && refusedBefore && r.plan.id != 0:
		// Refused before in this window, and it asked again: proven.
		k := r.plan.window
		err = r.prove(entry{hash: h, since: t, window: k, active: k, tries: 1, prev: float64(cost)}, t, 0)
	case found && !registered(&e, &r.plan):
		// Proven already, waiting for the next re-plan.
	case found && retired(&e, &r.plan, r.cfg) && !expired(&e, &r.plan, r.cfg):
		// A one-shot id no longer counted, asking again: proven, with what
		// it was granted in the window.
		err = r.prove(e, t, 0)
	default: // new, or returning after expiry
		if step, _ := transition(&r.plan, r.cfg, t, r.behind(t), callerNew); step == stepTableFull {
			if r.plan.provisional {
				return waiting, nil // (see errFullForNow)
			}
			r.markRead(h)
			return refused, nil
		}
		err = r.insert(h, t, cost)
		who, cand = callerWaiting, h
	}
	switch {
	case errors.Is(err, errFull):
		return refused, nil
	case errors.Is(err, errFullForNow):
		return waiting, nil
	case errors.Is(err, errCorrupt):
		// The plan made now resets the bucket: the next request may
		// register again.
		_, err = r.replan(r.unshifted(t), callerWaiting, 0)
		return waiting, err
	case err != nil:
		return arrival{}, err
	}
	// In the table, unproven (this request may promote it) or proven
	// (counted in the plan's pending): a plan is made now when allowed.
	// (Before the first plan, any client in the table asks for it.)
	waiting = arrival{kind: arrivedWaiting, mark: true, proven: who == callerCounted}
	if r.plan.id == 0 {
		who = callerWaiting
	}
	if step, _ := transition(&r.plan, r.cfg, t, r.behind(t), who); step == stepPending || step == stepStay {
		// No re-plan is due as far as the view goes (a tick catches up
		// when the view is behind).
		return waiting, nil
	}
	if step, err := r.replan(r.unshifted(t), who, cand); err != nil || step == stepStay {
		return waiting, err
	}
	b, e, found, err = r.find(h)
	if err != nil || !found || !counted(&e, &r.plan, r.cfg) {
		return waiting, nil
	}
	return arrival{kind: arrivedCounted, bucket: b, created: e.created}, nil
}

func (r *view) wait(h uint64, proven bool) {
	if len(r.waiting) >= localCacheMax {
		clear(r.waiting)
	}
	r.waiting[h] = waitMark{plan: r.plan.id, proven: proven}
}

// client is the state this worker holds for the client of hash h, nil if
// none: one of the view's window or the window before (an older one is
// dropped when found).
func (r *view) client(h uint64) *clientState {
	cs, older := r.clients.find(h)
	if !older {
		return cs
	}
	if cs.window < r.plan.window-1 || cs.window > r.plan.window {
		r.clients.forget(h)
		return nil
	}
	r.clients.renew(cs)
	return cs
}

// drop forgets the state held for the client of hash h.
func (r *view) drop(h uint64) { r.clients.forget(h) }

func (r *view) track(h uint64, b int, created uint64) *clientState {
	listed := int64(0) // (the closing writes' lists still to be walked)
	if r.deferred.window == r.plan.window {
		listed = r.deferred.window
	}
	cs := r.clients.put(h, listed)
	cs.bucket, cs.window, cs.created = b, r.plan.window, created
	return cs
}

// refusal is when a newcomer was refused table_full: its window, and the
// plan it was refused under.
type refusal struct {
	window int64
	plan   uint64
}

// refuse remembers newcomer h as refused table_full in the view's window:
// asking again in it proves the newcomer (see arrive).
func (r *view) refuse(h uint64) {
	at := refusal{r.plan.window, r.plan.id}
	if w, ok := r.refused[h]; ok && w.window == at.window {
		r.refused[h] = at // (a repeat clears no cache)
		return
	}
	if len(r.refused) >= localCacheMax {
		clear(r.refused)
	}
	r.refused[h] = at
}

// closedTo reports whether newcomer h can only be refused as table_full,
// from the mark of its home bucket alone: the mark holds under the view's
// plan (markOf), the bucket did not hold h, no client waits for a re-plan (a
// proof would have taken a place in some bucket, and moved pending), and
// either the table is full or the bucket's places for newcomers are taken.
// The slow path gives the same answer from a read of the bucket, except to
// a client proven by another worker since this worker's view was read,
// which waits at most for this worker's next tick.
func (r *view) closedTo(t int64, h uint64) bool {
	if r.plan.pending != 0 {
		return false
	}
	m := r.markOf(h)
	if m == nil || m.mayHold(h) {
		return false
	}
	step, _ := transition(&r.plan, r.cfg, t, r.behind(t), callerNew)
	return step == stepTableFull && !r.plan.provisional || (m.waitingFull && step != stepRoll)
}

// find looks a client up: its bucket and entry, if it has one.
func (r *view) find(h uint64) (b int, e entry, found bool, err error) {
	b = r.home(h)
	for probe := 0; probe <= maxProbe; probe++ {
		raw, cas, err := r.store.Get(r.key(b))
		missing := errors.Is(err, ErrNotFound)
		if err != nil && !missing {
			r.obs.StoreFailure("get bucket", err)
			return 0, entry{}, false, err
		}
		r.lastRead = bucketRead{bucket: b, raw: raw, cas: cas, missing: missing, valid: true}
		if missing {
			return 0, entry{}, false, nil
		}
		e, found, overflow, err := lookupBucket(raw, h)
		if err != nil {
			r.obs.ValueReset(r.key(b), err)
			return 0, entry{}, false, err
		}
		if found {
			return b, e, true, nil
		}
		if !overflow {
			return 0, entry{}, false, nil
		}
		b = (b + 1) & (r.nb - 1)
	}
	return 0, entry{}, false, nil
}

// bucketRead is the last bucket find read, kept for one use by the place
// that follows it (as update's first read): a newcomer's lookup and
// registration then cost one read of its bucket, not two. A stale one costs
// only a failed CAS and a re-read.
type bucketRead struct {
	bucket  int
	raw     []byte
	cas     uint32
	missing bool
	valid   bool
}

// forgetRead drops find's read, so that no later request acts on it.
func (r *view) forgetRead() { r.lastRead = bucketRead{} }

// insert puts a client in the table, waiting for a plan, at O(1) cost. A
// newcomer enters unproven (tries 1, the units it asked for in prev): it
// writes its bucket only, so a flood of one-shot ids never touches the
// plan key, and it holds no table room (see prove). A declared client
// (cost 0) enters as if proven: it is counted in the plan's pending (so
// that the table bound holds and a re-plan is wanted), then written.
func (r *view) insert(h uint64, t, cost int64) error {
	tries := int64(0)
	if cost > 0 {
		tries = 1
	}
	if r.plan.id != 0 && tries == 0 {
		if err := r.countPending(); err != nil {
			return err
		}
	}
	k := windowIndex(t, r.cfg)
	if r.plan.id != 0 {
		k = r.plan.window // a late clock read still arrives in the plan's window
	}
	fresh := entry{hash: h, created: r.plan.id, since: t, window: k, active: k, tries: tries, prev: float64(cost)}
	return r.put(fresh)
}

// prove records a waiting newcomer's second attempt: it takes table room
// (refused when the table is full) and is counted by the next plan, like
// a declared client. An entry whose window is over starts afresh in the
// plan's window. first is the units of the request it was first seen with
// in its entry's window (0 when unknown): they are demand in that window,
// as they would have been had a plan counted it then, since a newcomer
// told to wait is not a client that asked for less. (The proving request
// itself is counted by admitKnown when a plan counts the client at once.)
func (r *view) prove(e entry, t, first int64) error {
	if err := r.countPending(); err != nil {
		return err
	}
	if e.window < r.plan.window {
		// (A retired one-shot id's entry of an earlier window holds what it
		// was granted there: none of it is this window's.)
		e.since, e.window, e.active, e.demand, e.granted = t, r.plan.window, r.plan.window, 0, 0
	} else if waitingUnproven(&e) {
		e.demand += first
	}
	e.created, e.tries = r.plan.id, min(e.tries+1, maxTries)
	return r.put(e)
}

// put writes e at its home bucket or one of the next ones. errFull: every
// place on its probe path is taken (by counted clients, or by unproven
// newcomers of the running window). An unproven newcomer probes on only
// where counted clients already spilled: a flood of one-shot ids fills
// home buckets, costs O(1) store work per id, and never makes a counted
// client's lookups longer.
func (r *view) put(e entry) error {
	b := r.home(e.hash)
	for probe := 0; probe <= maxProbe; probe++ {
		placed, overflow, err := r.place(b, e)
		if err != nil || placed {
			return err
		}
		if !overflow {
			return errFull
		}
		b = (b + 1) & (r.nb - 1)
	}
	return errFull
}

// place writes e into bucket b if there is room (a free place, or the
// client's own expired entry, or anyone's expired entry). It reports
// overflow when b is full, after marking it so lookups probe on.
func (r *view) place(b int, e entry) (placed, overflow bool, err error) {
	var read *bucketRead
	if last := r.lastRead; last.valid && last.bucket == b {
		read = &last // find's read of this bucket serves the first attempt
		r.forgetRead()
	}
	err = r.updateBucket(b, read, func(bkt *bucketVal, _ bool) (bool, error) {
		placed, overflow = false, false
		at, stale, stales, own := -1, -1, 0, false
		for i := range bkt.entries {
			x := &bkt.entries[i]
			if x.hash == e.hash {
				if !free(x, &r.plan, r.cfg) && (e.tries < 2 || !waitingUnproven(x) && !retired(x, &r.plan, r.cfg)) {
					placed = true // there already, counted or waiting
					return false, nil
				}
				at, own = i, true // its own entry: a returning client, or a newcomer (or retired one-shot id) proven
				break
			}
			switch {
			case reclaimable(x, &r.plan):
				if stales++; stale < 0 {
					stale = i
				}
			case at < 0 && (free(x, &r.plan, r.cfg) || e.tries != 1 && retired(x, &r.plan, r.cfg)):
				// (A declared or proven client may take a retired one-shot
				// id's place, so that a flood of them locks no one out.)
				at = i
			}
		}
		if at < 0 && stale >= 0 && (stales >= keepUnproven || len(bkt.entries) == bucketSlots) {
			at = stale
		}
		switch {
		case !own && waitingUnproven(&e) && waitingIn(bkt, &r.plan, r.cfg) >= maxWaitingPerBucket:
			// A flood of one-shot ids fills no bucket past this: its refusals
			// cost a read of a small bucket and no write, and once the bucket
			// is marked, nothing (bucketMark).
			r.mark(b, bkt)
			return false, nil
		case at >= 0:
			bkt.entries[at] = e
			placed = true
		case len(bkt.entries) < bucketSlots:
			bkt.entries = append(bkt.entries, e)
			placed = true
		case bkt.overflow:
			overflow = true
			return false, nil
		case waitingUnproven(&e):
			return false, nil // unproven newcomers never spill into other buckets
		default:
			bkt.overflow, overflow = true, true // mark only: probe on
		}
		return true, nil
	})
	if err != nil {
		return false, false, err
	}
	return placed, overflow, nil
}

// free reports whether x's place may be reused: an idle client's, an
// unproven newcomer's whose window is over, or a retired one-shot id's
// whose window is over (it has nothing granted in the running one to
// keep).
func free(x *entry, p *plan, cfg *Config) bool {
	return (registered(x, p) && (expired(x, p, cfg) || retired(x, p, cfg) && x.window < p.window)) || reclaimable(x, p)
}

// bucketMark is what a worker remembers of a client bucket in which it
// refused a newcomer: under which plan, a Bloom filter of the hashes the
// bucket held, and whether its places for newcomers were all taken. While
// that plan runs with no client waiting, the bucket cannot take a newcomer
// (see closedTo), so a flood of never-seen ids homed there is refused from
// the mark: one bucket read per bucket and plan instead of one per request.
//
// The filter may answer "maybe" for a hash the bucket did not hold, never
// "no" for one it did: a false "maybe" only sends the request down the path
// that reads the bucket. Hashes are chosen by clients, so crafted ones can
// at worst make every lookup a "maybe", which costs what it cost without
// marks.
type bucketMark struct {
	plan        uint64    // view.marksFrom when marked; 0: no mark
	bloom       [4]uint64 // 256 bits, three per hash
	waitingFull bool      // maxWaitingPerBucket unproven newcomers of the plan's window
}

// bloomBits are the three filter bits of h, from a multiplicative mix so
// that hashes differing only in some bits still spread.
func bloomBits(h uint64) (a, b, c uint8) {
	m := h * 0x9E3779B97F4A7C15
	return uint8(m >> 56), uint8(m >> 48), uint8(m >> 40)
}

func (m *bucketMark) add(h uint64) {
	a, b, c := bloomBits(h)
	for _, bit := range [3]uint8{a, b, c} {
		m.bloom[bit>>6] |= 1 << (bit & 63)
	}
}

// mayHold reports whether the bucket may have held h when it was marked.
func (m *bucketMark) mayHold(h uint64) bool {
	a, b, c := bloomBits(h)
	for _, bit := range [3]uint8{a, b, c} {
		if m.bloom[bit>>6]&(1<<(bit&63)) == 0 {
			return false
		}
	}
	return true
}

// mark records bucket b as read under the view (bkt decoded; nil for a
// bucket that does not exist). A bucket with its overflow flag set is not
// marked: clients homed in it may live in the buckets after it, which the
// mark does not describe.
func (r *view) mark(b int, bkt *bucketVal) {
	if r.plan.id == 0 || (bkt != nil && bkt.overflow) {
		return
	}
	if r.marks == nil {
		r.marks = make([]bucketMark, r.nb) // on the first refusal only
	}
	m := bucketMark{plan: r.marksFrom}
	if bkt != nil {
		for i := range bkt.entries {
			m.add(bkt.entries[i].hash)
		}
		m.waitingFull = waitingIn(bkt, &r.plan, r.cfg) >= maxWaitingPerBucket
	}
	r.marks[b] = m
}

// markRead marks h's home bucket from find's read of it, when find read it
// (and no bucket after it).
func (r *view) markRead(h uint64) {
	last, b := r.lastRead, r.home(h)
	switch {
	case !last.valid || last.bucket != b:
	case last.missing:
		r.mark(b, nil)
	case decodeBucket(last.raw, &r.bkt) == nil:
		r.mark(b, &r.bkt)
	}
}

// markOf is the mark of h's home bucket under the view, nil if none.
func (r *view) markOf(h uint64) *bucketMark {
	if r.marks == nil || r.plan.id == 0 {
		return nil
	}
	if m := &r.marks[r.home(h)]; m.plan == r.marksFrom {
		return m
	}
	return nil
}

// marksCarry reports whether marks made under plan cur still hold under
// next: next re-plans cur's window right after it (id + 1) and counts the
// clients cur counted plus only the newcomer it promoted. Within a window
// no counted client drops out, so any client proven under cur would have
// raised next's count too; without proofs, no bucket's places for
// newcomers freed up, and no client was placed (a promoted newcomer keeps
// its place, and stays one of its bucket's newcomers). A flood then keeps
// its marks across the re-plan it causes every min_cycle.
func marksCarry(cur, next *plan) bool {
	promoted := uint32(0)
	if next.promoted != 0 {
		promoted = 1
	}
	return cur.id != 0 && next.id == cur.id+1 && next.window == cur.window && next.n == cur.n+promoted
}

// waitingIn counts the unproven newcomers of the plan's window in bkt: the
// places a flood can take (at most maxWaitingPerBucket).
func waitingIn(bkt *bucketVal, p *plan, cfg *Config) int {
	n := 0
	for i := range bkt.entries {
		if x := &bkt.entries[i]; waitingUnproven(x) && !free(x, p, cfg) {
			n++
		}
	}
	return n
}

// flushDivisor: a worker writes its counted demand back once it has counted
// 1/flushDivisor of what it already wrote (at least 1 unit), so demand is
// exact for light clients and within about 1/16 for heavy ones, with a
// logarithmic number of writes.
const flushDivisor = 16
