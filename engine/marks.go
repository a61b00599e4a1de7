package engine

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
