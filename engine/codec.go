package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Shared values are compact, versioned, fixed-layout little-endian records:
// decoding is a bounds check and a few loads, with no JSON and no
// reflection. A value that decodes but cannot be right (a negative count, a
// plan id near wrap-around, a NaN parameter) is rejected like a truncated
// one: nothing read from the store is trusted before it passed its decoder.

const (
	planVersion   = 3
	budgetVersion = 2
	bucketVersion = 3

	planLen     = 1 + 8*7 + 4*3 + 1 + 8*5 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + 8*3 + sealLen
	budgetLen   = 1 + 8*5 + sealLen
	bucketHead  = 1 + 1 + 1
	entryLen    = 8 * 11
	bucketSlots = 48 // entries per bucket key
)

var errCorrupt = errors.New("corrupt value")

// Every record ends with a checksum of the bytes before it (seal). Range
// checks catch values no writer produces; the checksum catches the ones
// that look possible: one flipped bit in a budget's granted would otherwise
// decode as a smaller count and re-open units the window already granted.
const sealLen = 8

// seal appends dst's checksum to it.
func seal(dst []byte) []byte { return binary.LittleEndian.AppendUint64(dst, checksum(dst)) }

// unseal checks raw's trailing checksum and returns the record before it.
func unseal(raw []byte) ([]byte, error) {
	n := len(raw) - sealLen
	if n < 1 || binary.LittleEndian.Uint64(raw[n:]) != checksum(raw[:n]) {
		return nil, fmt.Errorf("%w: checksum of a %d-byte value", errCorrupt, len(raw))
	}
	return raw[:n], nil
}

// checksum mixes b a word at a time. Each step is a bijection of the state
// for a fixed word, and of the word for a fixed state, so any change
// confined to one word (a flipped bit, in particular) changes the result.
// It costs about a nanosecond per word: a bucket of 48 entries is checked
// in well under a microsecond.
func checksum(b []byte) uint64 {
	h := uint64(len(b)) ^ 0x9e3779b97f4a7c15
	for ; len(b) >= 8; b = b[8:] {
		h = (h ^ binary.LittleEndian.Uint64(b)) * 0xbf58476d1ce4e5b9
		h ^= h >> 31
	}
	for _, c := range b {
		h = (h ^ uint64(c)) * 0x94d049bb133111eb
		h ^= h >> 29
	}
	return h
}

// maxPlanID bounds plan ids far below wrap-around, even after plan resets
// (each adds planResetJump).
const maxPlanID = 1 << 62

// maxBuckets bounds the bucket count a plan may name.
const maxBuckets = 1 << 20

// plan is the small record every worker reads to know the running window
// and how to derive any client's share in it. Its size does not depend on
// the number of clients.
type plan struct {
	id       uint64 // strictly increasing, never reused: the share period
	roll     uint64 // id of the plan that opened this window
	window   int64  // aligned window index, in units of cycle
	cycle    int64  // window length and offset of the config that planned it:
	offset   int64  // the window ends when that config says, whoever reads it
	at       int64  // when it was published (Unix ns)
	capacity int64  // capacity the shares were computed for
	n        uint32 // clients counted in the plan
	pending  uint32 // proven or declared clients waiting for the next plan (unproven ones are not counted)
	promoted uint64 // hash of the unproven newcomer this plan counts (0: none), see registered
	buckets  uint32 // registry size the plan was computed over
	replan   bool   // published mid-window, for newcomers
	params   policyParams
	// Largest remainder as a threshold: a client's cap rounds up when
	// (fractional part, arrival, hash) is at or before (thrFrac, thrSince,
	// thrHash) in the rounding order (see roundsUp).
	thrFrac  float64
	thrSince int64
	thrHash  uint64
	// scale turns what each client still wants of its full-window share
	// into what it may take of the window's remaining budget (≤ 1).
	scale float64
	// shift is added to every worker's clock reading (Unix ns, a whole
	// number of cycles, never negative, only ever growing): after a clock
	// jump the store's windows run ahead of the clock, and a shift moves
	// the clock onto a window that was never opened (see transition).
	shift int64
	// born is when the newest config that served this limit first read
	// the clock (Unix ns), and newCycle, newOffset and newBuckets are that
	// config's windows and client table: during a reconfiguration every
	// config opens new windows the newest one's way (see registry.replan).
	born       int64
	newCycle   int64
	newOffset  int64
	newBuckets int64
}

func appendPlan(dst []byte, p *plan) []byte {
	le := binary.LittleEndian
	dst = append(dst[:0], planVersion)
	dst = le.AppendUint64(dst, p.id)
	dst = le.AppendUint64(dst, p.roll)
	dst = le.AppendUint64(dst, uint64(p.window))
	dst = le.AppendUint64(dst, uint64(p.at))
	dst = le.AppendUint64(dst, uint64(p.capacity))
	dst = le.AppendUint64(dst, math.Float64bits(p.thrFrac))
	dst = le.AppendUint64(dst, p.thrHash)
	dst = le.AppendUint32(dst, p.n)
	dst = le.AppendUint32(dst, p.pending)
	dst = le.AppendUint32(dst, p.buckets)
	var flags byte
	if p.replan {
		flags = 1
	}
	dst = append(dst, flags)
	for _, f := range p.params {
		dst = le.AppendUint64(dst, math.Float64bits(f))
	}
	dst = le.AppendUint64(dst, math.Float64bits(p.scale))
	dst = le.AppendUint64(dst, uint64(p.thrSince))
	dst = le.AppendUint64(dst, uint64(p.cycle))
	dst = le.AppendUint64(dst, uint64(p.offset))
	dst = le.AppendUint64(dst, p.promoted)
	dst = le.AppendUint64(dst, uint64(p.shift))
	dst = le.AppendUint64(dst, uint64(p.born))
	dst = le.AppendUint64(dst, uint64(p.newCycle))
	dst = le.AppendUint64(dst, uint64(p.newOffset))
	dst = le.AppendUint64(dst, uint64(p.newBuckets))
	return seal(dst)
}

func decodePlan(b []byte, p *plan) error {
	if len(b) != planLen || b[0] != planVersion {
		return fmt.Errorf("%w: plan of %d bytes", errCorrupt, len(b))
	}
	b, err := unseal(b)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	var q plan
	q.id = le.Uint64(b[1:])
	q.roll = le.Uint64(b[9:])
	q.window = int64(le.Uint64(b[17:]))
	q.at = int64(le.Uint64(b[25:]))
	q.capacity = int64(le.Uint64(b[33:]))
	q.thrFrac = math.Float64frombits(le.Uint64(b[41:]))
	q.thrHash = le.Uint64(b[49:])
	q.n = le.Uint32(b[57:])
	q.pending = le.Uint32(b[61:])
	q.buckets = le.Uint32(b[65:])
	q.replan = b[69]&1 != 0
	off := 70
	for i := range q.params {
		q.params[i] = math.Float64frombits(le.Uint64(b[off:]))
		off += 8
	}
	q.scale = math.Float64frombits(le.Uint64(b[off:]))
	q.thrSince = int64(le.Uint64(b[off+8:]))
	q.cycle = int64(le.Uint64(b[off+16:]))
	q.offset = int64(le.Uint64(b[off+24:]))
	q.promoted = le.Uint64(b[off+32:])
	q.shift = int64(le.Uint64(b[off+40:]))
	q.born = int64(le.Uint64(b[off+48:]))
	q.newCycle = int64(le.Uint64(b[off+56:]))
	q.newOffset = int64(le.Uint64(b[off+64:]))
	q.newBuckets = int64(le.Uint64(b[off+72:]))
	switch {
	case b[69]&^1 != 0:
		return fmt.Errorf("%w: plan flags %#x", errCorrupt, b[69])
	case q.id == 0 || q.id >= maxPlanID || q.roll == 0 || q.roll > q.id:
		return fmt.Errorf("%w: plan id %d, roll %d", errCorrupt, q.id, q.roll)
	case q.capacity < 1 || q.capacity > MaxCapacity:
		return fmt.Errorf("%w: plan capacity %d", errCorrupt, q.capacity)
	case q.n > 2*MaxClientsCap || q.pending > 2*MaxClientsCap:
		return fmt.Errorf("%w: plan counts %d+%d", errCorrupt, q.n, q.pending)
	case q.buckets == 0 || q.buckets > maxBuckets || q.buckets&(q.buckets-1) != 0:
		return fmt.Errorf("%w: plan buckets %d", errCorrupt, q.buckets)
	case !(q.scale >= 0 && q.scale <= 1) || !(q.thrFrac >= -1 && q.thrFrac <= 2):
		return fmt.Errorf("%w: plan scale %v, threshold %v", errCorrupt, q.scale, q.thrFrac)
	case q.cycle <= 0 || q.cycle > int64(MaxCycle) || q.offset < 0 || q.offset >= q.cycle:
		return fmt.Errorf("%w: plan cycle %d, offset %d", errCorrupt, q.cycle, q.offset)
	case q.window < minWindow || q.window > maxWindow || q.window > math.MaxInt64/q.cycle-2 || q.window < math.MinInt64/q.cycle+2:
		return fmt.Errorf("%w: plan window %d", errCorrupt, q.window)
	case q.shift < 0 || q.shift > maxShift:
		return fmt.Errorf("%w: plan shift %d", errCorrupt, q.shift)
	case q.newCycle < 0 || q.newCycle > int64(MaxCycle) || q.newOffset < 0 || (q.newCycle > 0 && q.newOffset >= q.newCycle) ||
		q.newBuckets < 0 || q.newBuckets > maxBuckets || q.newBuckets&(q.newBuckets-1) != 0:
		return fmt.Errorf("%w: plan's newest config %d, %d, %d", errCorrupt, q.newCycle, q.newOffset, q.newBuckets)
	}
	for _, f := range q.params {
		if !(f >= 0 && f <= 4*MaxCapacity*float64(2*MaxClientsCap)) {
			return fmt.Errorf("%w: plan parameter %v", errCorrupt, f)
		}
	}
	*p = q
	return nil
}

// Window indices stay far from overflow of k·cycle in nanoseconds.
const (
	minWindow = -(1 << 53)
	maxWindow = 1 << 53
)

// maxShift bounds a plan's clock shift: about 146 years of jumps.
const maxShift = 1 << 62

// budget is the window budget: units granted to workers in one window, all
// clients together, and the capacity in force for it (the smallest that any
// config that drew from it had). granted may exceed capacity only after the
// capacity shrank mid-window; nothing more is granted then.
type budget struct {
	window   int64
	roll     uint64 // the plan id that opened the window: a budget of an older roll is over
	granted  int64
	capacity int64
	end      int64 // when the window ends (Unix ns, on the shifted clock of the plan that opened it)
}

func appendBudget(dst []byte, v budget) []byte {
	le := binary.LittleEndian
	dst = append(dst[:0], budgetVersion)
	dst = le.AppendUint64(dst, uint64(v.window))
	dst = le.AppendUint64(dst, v.roll)
	dst = le.AppendUint64(dst, uint64(v.granted))
	dst = le.AppendUint64(dst, uint64(v.capacity))
	dst = le.AppendUint64(dst, uint64(v.end))
	return seal(dst)
}

func decodeBudget(b []byte) (budget, error) {
	if len(b) != budgetLen || b[0] != budgetVersion {
		return budget{}, fmt.Errorf("%w: budget of %d bytes", errCorrupt, len(b))
	}
	b, err := unseal(b)
	if err != nil {
		return budget{}, err
	}
	le := binary.LittleEndian
	v := budget{
		end:      int64(le.Uint64(b[33:])),
		window:   int64(le.Uint64(b[1:])),
		roll:     le.Uint64(b[9:]),
		granted:  int64(le.Uint64(b[17:])),
		capacity: int64(le.Uint64(b[25:])),
	}
	if v.roll == 0 || v.roll >= maxPlanID || v.capacity < 1 || v.capacity > MaxCapacity ||
		v.granted < 0 || v.granted > MaxCapacity {
		return budget{}, fmt.Errorf("%w: impossible budget", errCorrupt)
	}
	return v, nil
}

// entry is one client's record in its registry bucket. The counters
// (granted, demand) belong to window; share is the client's window
// entitlement under plan.
type entry struct {
	hash    uint64  // client hash, never 0
	created uint64  // plan id current when it arrived; counted from the next plan on
	since   int64   // when it arrived (Unix ns): scales a partial first window
	window  int64   // the window of granted and demand
	plan    uint64  // plan whose share is in share (0: none yet)
	share   int64   // units the client may be granted in window, under plan
	granted int64   // units granted to workers in window, over every plan of it
	demand  int64   // units asked for in window, rejected ones included
	prev    float64 // demand the window's shares are computed from (full-window rate)
	active  int64   // last window with demand (or of arrival): idle expiry
	// tries is how the client entered the table: 0 declared (RegisterAt);
	// 1 a newcomer seen once, unproven (while plan is 0 it waits, see
	// registered, and prev holds the units it asked for); 2 or more a
	// newcomer that asked again while it waited (proven).
	tries int64
}

// maxTries bounds an entry's recorded attempts (they stop counting there).
const maxTries = 1 << 20

// bucketVal is one registry key: up to bucketSlots entries, and whether a
// client whose home this is ever had to be placed in a later bucket.
type bucketVal struct {
	overflow bool
	entries  []entry
}

func appendBucket(dst []byte, b *bucketVal) []byte {
	le := binary.LittleEndian
	dst = append(dst[:0], bucketVersion, byte(len(b.entries)))
	var flags byte
	if b.overflow {
		flags = 1
	}
	dst = append(dst, flags)
	for i := range b.entries {
		e := &b.entries[i]
		dst = le.AppendUint64(dst, e.hash)
		dst = le.AppendUint64(dst, e.created)
		dst = le.AppendUint64(dst, uint64(e.since))
		dst = le.AppendUint64(dst, uint64(e.window))
		dst = le.AppendUint64(dst, e.plan)
		dst = le.AppendUint64(dst, uint64(e.share))
		dst = le.AppendUint64(dst, uint64(e.granted))
		dst = le.AppendUint64(dst, uint64(e.demand))
		dst = le.AppendUint64(dst, math.Float64bits(e.prev))
		dst = le.AppendUint64(dst, uint64(e.active))
		dst = le.AppendUint64(dst, uint64(e.tries))
	}
	return seal(dst)
}

// decodeBucket fills b from raw, reusing b's slice.
func decodeBucket(raw []byte, b *bucketVal) error {
	n, overflow, err := bucketHeader(raw)
	if err != nil {
		return err
	}
	b.overflow = overflow
	b.entries = b.entries[:0]
	var hashes [bucketSlots]uint64
	p := raw[bucketHead:]
	for i := 0; i < n; i++ {
		e, err := decodeEntry(p)
		if err != nil {
			return err
		}
		b.entries = append(b.entries, e)
		hashes[i] = e.hash
		p = p[entryLen:]
	}
	// Sorted, duplicates are neighbours: O(n log n) rather than comparing
	// every pair, on a path a flood of new ids takes once per request.
	slices.Sort(hashes[:n])
	for i := 1; i < n; i++ {
		if hashes[i] == hashes[i-1] {
			return fmt.Errorf("%w: duplicate entry", errCorrupt)
		}
	}
	return nil
}

// bucketHeader checks raw's version and length and returns its entry count
// and overflow flag.
func bucketHeader(raw []byte) (n int, overflow bool, err error) {
	if len(raw) < bucketHead || raw[0] != bucketVersion {
		return 0, false, fmt.Errorf("%w: bucket of %d bytes", errCorrupt, len(raw))
	}
	n = int(raw[1])
	if n > bucketSlots || len(raw) != bucketHead+n*entryLen+sealLen || raw[2]&^1 != 0 {
		return 0, false, fmt.Errorf("%w: bucket of %d entries in %d bytes", errCorrupt, n, len(raw))
	}
	if _, err := unseal(raw); err != nil {
		return 0, false, err
	}
	return n, raw[2]&1 != 0, nil
}

// lookupBucket finds the entry of hash h in raw without decoding the
// others: a lookup decodes one entry, whatever the bucket holds. Only that
// entry's fields are range-checked (the writer of the bucket decodes, and
// so checks, all of it: decodeBucket); the whole value's checksum is.
func lookupBucket(raw []byte, h uint64) (e entry, found, overflow bool, err error) {
	n, overflow, err := bucketHeader(raw)
	if err != nil {
		return entry{}, false, false, err
	}
	p := raw[bucketHead:]
	for i := 0; i < n; i++ {
		if binary.LittleEndian.Uint64(p) == h {
			e, err := decodeEntry(p)
			return e, err == nil, overflow, err
		}
		p = p[entryLen:]
	}
	return entry{}, false, overflow, nil
}

// decodeEntry decodes the entry at the start of p and checks that its
// fields are possible.
func decodeEntry(p []byte) (entry, error) {
	le := binary.LittleEndian
	e := entry{
		hash:    le.Uint64(p),
		created: le.Uint64(p[8:]),
		since:   int64(le.Uint64(p[16:])),
		window:  int64(le.Uint64(p[24:])),
		plan:    le.Uint64(p[32:]),
		share:   int64(le.Uint64(p[40:])),
		granted: int64(le.Uint64(p[48:])),
		demand:  int64(le.Uint64(p[56:])),
		prev:    math.Float64frombits(le.Uint64(p[64:])),
		active:  int64(le.Uint64(p[72:])),
		tries:   int64(le.Uint64(p[80:])),
	}
	if e.hash == 0 || e.created >= maxPlanID || e.plan >= maxPlanID ||
		e.share < 0 || e.share > MaxCapacity || e.granted < 0 || e.granted > e.share ||
		e.demand < 0 || !(e.prev >= 0 && e.prev <= 4*MaxCapacity) ||
		e.window < minWindow || e.window > maxWindow || e.active < minWindow || e.active > maxWindow || e.tries < 0 || e.tries > maxTries {
		return entry{}, fmt.Errorf("%w: impossible entry", errCorrupt)
	}
	return e, nil
}
