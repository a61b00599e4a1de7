package engine

// clientTable is where a worker's view keeps its clientStates: in chunks of
// plain values, found by hash through a map of slot numbers. Neither holds
// a pointer, so the garbage collector never scans them. At 100,000 clients
// a map of pointers to separate states gave every collection 100,000
// objects to mark, and in Wasm a collection runs inside whichever callback
// allocates: a request took 1.16 times as long in the compiled module
// (design.md, "Newcomers at O(1), and what is O(clients)").
//
// Pointers into the chunks stay valid: a chunk never moves, and a slot is
// reused only once nothing can reach its state (sweep).
type clientTable struct {
	slots  map[uint64]int32 // hash -> slot
	chunks [][]clientState  // slot s is chunks[s/chunkSlots][s%chunkSlots]
	free   []int32          // slots to reuse
	used   int32            // slots handed out so far, free ones included
	next   int32            // the next slot sweep looks at
	// gen is the generation of the view's window; older says whether the
	// states of the generation before (the window before) may still be
	// found. A new window starts a generation instead of walking every
	// client.
	gen   uint32
	older bool
}

// chunkSlots is how many states a chunk holds: about 40 KB.
const chunkSlots = 256

// sweepPerPut is how many slots each new state looks at for reuse: more
// than one, so that the slots of dropped states are found faster than new
// ones are taken.
const sweepPerPut = 2

// Generations below firstGen mark a state no lookup finds: gone (dropped,
// or replaced) or freed (in the free list).
const (
	genGone  = 0
	genFreed = 1
	firstGen = 3 // (gen-1 of the first generation is not genFreed)
)

func newClientTable() clientTable {
	return clientTable{slots: make(map[uint64]int32), gen: firstGen}
}

func (t *clientTable) at(s int32) *clientState { return &t.chunks[s/chunkSlots][s%chunkSlots] }

// find returns the state of hash h, nil if none, and whether it is of the
// generation before (the caller decides whether it serves, and moves it to
// the current one with renew).
func (t *clientTable) find(h uint64) (cs *clientState, older bool) {
	s, ok := t.slots[h]
	if !ok {
		return nil, false
	}
	cs = t.at(s)
	switch {
	case cs.gen == t.gen:
		return cs, false
	case cs.gen == t.gen-1 && t.older:
		return cs, true
	}
	t.forget(h)
	return nil, false
}

func (t *clientTable) renew(cs *clientState) { cs.gen = t.gen }

// forget drops the state of hash h from lookups; its slot is reused once
// sweep finds it unreachable.
func (t *clientTable) forget(h uint64) {
	if s, ok := t.slots[h]; ok {
		t.at(s).gen = genGone
		delete(t.slots, h)
	}
}

// put returns a zeroed state for hash h, of the current generation, in
// place of any it had. listed is the window of the closing writes' lists
// still to be walked (see sweep).
func (t *clientTable) put(h uint64, listed int64) *clientState {
	t.forget(h)
	t.sweep(listed)
	var s int32
	if n := len(t.free); n > 0 {
		s, t.free = t.free[n-1], t.free[:n-1]
	} else {
		if int(t.used/chunkSlots) == len(t.chunks) {
			t.chunks = append(t.chunks, make([]clientState, chunkSlots))
		}
		s = t.used
		t.used++
	}
	cs := t.at(s)
	*cs = clientState{hash: h, slot: s, gen: t.gen}
	t.slots[h] = s
	return cs
}

// sweep frees up to sweepPerPut slots whose states no lookup finds any
// more and nothing else reaches: not in the tick's list (dirty), nor in a
// closing writes' list still to be walked (deferred == listed).
func (t *clientTable) sweep(listed int64) {
	for range min(sweepPerPut, t.used) {
		s := t.next
		if t.next++; t.next >= t.used {
			t.next = 0
		}
		cs := t.at(s)
		if cs.gen == genFreed || cs.dirty || cs.deferred == listed && listed != 0 {
			continue
		}
		if cs.gen == t.gen || cs.gen == t.gen-1 && t.older {
			continue
		}
		if at, ok := t.slots[cs.hash]; ok && at == s {
			delete(t.slots, cs.hash)
		}
		cs.gen = genFreed
		t.free = append(t.free, s)
	}
}

// newWindow starts a generation: the states of the one before stay
// findable when the window follows theirs (consecutive).
func (t *clientTable) newWindow(consecutive bool) {
	t.gen++
	t.older = consecutive
}

// clear makes every state unfindable (a new table).
func (t *clientTable) clear() {
	t.gen += 2
	t.older = false
	clear(t.slots)
}
