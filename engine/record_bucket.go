package engine

// The bucket records (recordKey "c/<B>/<i>"): up to bucketSlots client
// entries each. Written by updateBucket only (a lease, a demand write-back
// or a registration), or replaced whole when unreadable (resetBucket).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// bucketVersion and the sizes of the bucket encoding: a head (version,
// the counts of long and short entries, flags), the long entries, then the
// short ones.
const (
	bucketVersion = 5
	bucketHead    = 1 + 1 + 1 + 1
	entryLen      = 8 * 13 // a long entry: every field
	shortLen      = 8 * 5  // a short entry: hash, created, since, window, prev
	bucketSlots   = 48     // entries per bucket key
)

// isShort reports whether e is written short: it holds no more than an
// unproven newcomer's fields (tries 1, nothing granted, demanded or
// shared, active in its window), which a flood of one-shot ids fills
// buckets with (design.md, "Keys"). The form follows from the fields
// alone, so a bucket has one encoding.
func isShort(e *entry) bool {
	return e.tries == 1 && e.active == e.window && e.plan == 0 && e.share == 0 && e.granted == 0 &&
		e.demand == 0 && e.lastDemand == 0 && e.lastGranted == 0
}

// entry is one client's record in its view bucket. The counters
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
	// lastDemand and lastGranted are demand and granted of the window
	// before window, kept when a rebase moved the counters on: the plan
	// of a large table is read after its window opened (see provisional),
	// and judges the window it closed from them.
	lastDemand, lastGranted int64
}

// maxTries bounds an entry's recorded attempts (they stop counting there).
const maxTries = 1 << 20

// bucketVal is one view key: up to bucketSlots entries, and whether a
// client whose home this is ever had to be placed in a later bucket.
type bucketVal struct {
	overflow bool
	entries  []entry
}

func appendBucket(dst []byte, b *bucketVal) []byte {
	short := 0
	for i := range b.entries {
		if isShort(&b.entries[i]) {
			short++
		}
	}
	var flags byte
	if b.overflow {
		flags = 1
	}
	dst = append(dst[:0], bucketVersion, byte(len(b.entries)-short), byte(short), flags)
	for i := range b.entries {
		if !isShort(&b.entries[i]) {
			dst = appendEntry(dst, &b.entries[i])
		}
	}
	for i := range b.entries {
		if isShort(&b.entries[i]) {
			dst = appendShort(dst, &b.entries[i])
		}
	}
	return seal(dst)
}

// appendEntry appends e's entryLen bytes to dst.
func appendEntry(dst []byte, e *entry) []byte {
	le := binary.LittleEndian
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
	dst = le.AppendUint64(dst, uint64(e.lastDemand))
	return le.AppendUint64(dst, uint64(e.lastGranted))
}

// appendShort appends the shortLen bytes of e, for which isShort holds, to
// dst.
func appendShort(dst []byte, e *entry) []byte {
	le := binary.LittleEndian
	dst = le.AppendUint64(dst, e.hash)
	dst = le.AppendUint64(dst, e.created)
	dst = le.AppendUint64(dst, uint64(e.since))
	dst = le.AppendUint64(dst, uint64(e.window))
	return le.AppendUint64(dst, math.Float64bits(e.prev))
}

// decodeBucket fills b from raw, reusing b's slice: the long entries, then
// the short ones.
func decodeBucket(raw []byte, b *bucketVal) error {
	long, short, overflow, err := bucketHeader(raw)
	if err != nil {
		return err
	}
	n := long + short
	b.overflow = overflow
	b.entries = slices.Grow(b.entries[:0], n)[:n]
	var hashes [bucketSlots]uint64
	p := raw[bucketHead:]
	for i := range b.entries {
		// (Decoded in place: a plan's scan decodes every entry.)
		size := entryLen
		if i >= long {
			size = shortLen
		}
		if err := decodeEntryAt(p, i >= long, &b.entries[i]); err != nil {
			b.entries = b.entries[:0]
			return err
		}
		hashes[i] = b.entries[i].hash
		p = p[size:]
	}
	if hasDuplicate(hashes[:n]) {
		b.entries = b.entries[:0]
		return fmt.Errorf("%w: duplicate entry", errCorrupt)
	}
	return nil
}

// hasDuplicate reports whether two of hashes are equal, reordering them.
// A bucket holds about a dozen entries (the table has a bucket for every
// 16 clients it may count): there, comparing every pair costs less than
// sorting, which was 2% of a request's time at 100,000 clients in Wasm.
// A fuller bucket (up to bucketSlots) is sorted, so that duplicates are
// neighbours.
func hasDuplicate(hashes []uint64) bool {
	if len(hashes) <= 16 {
		for i, h := range hashes {
			if slices.Contains(hashes[i+1:], h) {
				return true
			}
		}
		return false
	}
	slices.Sort(hashes)
	for i := 1; i < len(hashes); i++ {
		if hashes[i] == hashes[i-1] {
			return true
		}
	}
	return false
}

// bucketHeader checks raw's version, length and checksum and returns its
// counts of long and short entries and its overflow flag.
func bucketHeader(raw []byte) (long, short int, overflow bool, err error) {
	if len(raw) < bucketHead || raw[0] != bucketVersion {
		return 0, 0, false, fmt.Errorf("%w: bucket of %d bytes", errCorrupt, len(raw))
	}
	long, short = int(raw[1]), int(raw[2])
	if long+short > bucketSlots || len(raw) != bucketHead+long*entryLen+short*shortLen+sealLen || raw[3]&^1 != 0 {
		return 0, 0, false, fmt.Errorf("%w: bucket of %d+%d entries in %d bytes", errCorrupt, long, short, len(raw))
	}
	if _, err := unseal(raw); err != nil {
		return 0, 0, false, err
	}
	return long, short, raw[3]&1 != 0, nil
}

// lookupBucket finds the entry of hash h in raw without decoding the
// others: a lookup decodes one entry, whatever the bucket holds. Only that
// entry's fields are range-checked (placing a client and a plan's scan
// decode, and so check, all of them: decodeBucket); the whole value's
// checksum is.
func lookupBucket(raw []byte, h uint64) (e entry, found, overflow bool, err error) {
	at, short, overflow, err := findEntry(raw, h)
	if err != nil || at < 0 {
		return entry{}, false, overflow, err
	}
	err = decodeEntryAt(raw[at:], short, &e)
	return e, err == nil, overflow, err
}

// findEntry checks raw's header and checksum and returns the offset of
// the entry of hash h in it, or -1, and whether that entry is short.
func findEntry(raw []byte, h uint64) (at int, short, overflow bool, err error) {
	long, shorts, overflow, err := bucketHeader(raw)
	if err != nil {
		return -1, false, false, err
	}
	le := binary.LittleEndian
	for i := 0; i < long; i++ {
		if at := bucketHead + i*entryLen; le.Uint64(raw[at:]) == h {
			return at, false, overflow, nil
		}
	}
	for i, from := 0, bucketHead+long*entryLen; i < shorts; i++ {
		if at := from + i*shortLen; le.Uint64(raw[at:]) == h {
			return at, true, overflow, nil
		}
	}
	return -1, false, overflow, nil
}

// decodeEntryAt decodes the entry at the start of p, short or long, into
// e and checks that its fields are possible, and that a long one could
// not have been short (a bucket has one encoding).
func decodeEntryAt(p []byte, short bool, e *entry) error {
	if !short {
		if err := decodeEntry(p, e); err != nil {
			return err
		}
		if isShort(e) {
			*e = entry{}
			return fmt.Errorf("%w: a short entry written long", errCorrupt)
		}
		return nil
	}
	le := binary.LittleEndian
	window := int64(le.Uint64(p[24:]))
	return checkEntry(e, entry{
		hash:    le.Uint64(p),
		created: le.Uint64(p[8:]),
		since:   int64(le.Uint64(p[16:])),
		window:  window,
		prev:    math.Float64frombits(le.Uint64(p[32:])),
		active:  window,
		tries:   1,
	})
}

// decodeEntry decodes the long entry at the start of p into e and checks
// that its fields are possible.
func decodeEntry(p []byte, e *entry) error {
	le := binary.LittleEndian
	return checkEntry(e, entry{
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

		lastDemand:  int64(le.Uint64(p[88:])),
		lastGranted: int64(le.Uint64(p[96:])),
	})
}

// checkEntry sets e to d when d's fields are possible, and to the zero
// entry with errCorrupt when they are not.
func checkEntry(e *entry, d entry) error {
	*e = d
	if e.hash == 0 || e.created >= maxPlanID || e.plan >= maxPlanID ||
		e.share < 0 || e.share > MaxCapacity || e.granted < 0 || e.granted > e.share ||
		e.demand < 0 || !(e.prev >= 0 && e.prev <= 4*MaxCapacity) ||
		e.window < minWindow || e.window > maxWindow || e.active < minWindow || e.active > maxWindow || e.tries < 0 || e.tries > maxTries ||
		e.lastDemand < 0 || e.lastGranted < 0 || e.lastGranted > MaxCapacity {
		*e = entry{}
		return fmt.Errorf("%w: impossible entry", errCorrupt)
	}
	return nil
}

// updateBucket is the one read-modify-write of a bucket: change is handed
// bucket b as read (empty when it was never written) and edits it in
// place, reporting whether to write it. An unreadable bucket is reported
// to the Observer and returned as errCorrupt: only a roller may replace it
// (resetCorrupt). read, when not nil, is a read of the bucket made just
// before, which serves the first attempt.
func (r *view) updateBucket(b int, read *bucketRead, change func(bkt *bucketVal, missing bool) (write bool, err error)) error {
	key := r.key(b)
	return r.update(key, "bucket", read, func(st stored) ([]byte, error) {
		if st.missing {
			r.bkt.overflow, r.bkt.entries = false, r.bkt.entries[:0]
		} else if err := decodeBucket(st.raw, &r.bkt); err != nil {
			r.obs.ValueReset(key, err)
			return nil, err
		}
		write, err := change(&r.bkt, st.missing)
		if err != nil || !write {
			return nil, err
		}
		r.buf = appendBucket(r.buf, &r.bkt)
		return r.buf, nil
	})
}

// updateEntry is updateBucket for a change to the entry of hash h alone (a
// request's sync of its client): it decodes that entry,
// hands it to change, and writes it back in its place, the other entries
// copied as read. Decoding and encoding a dozen entries to change one was
// a tenth of a request's time at 100,000 clients in Wasm. The checksum
// still covers the whole bucket; the other entries' fields are checked
// by the next decode of the whole bucket (a plan's scan, a placement).
// An entry that changes form (a newcomer's first lease makes it long) has
// no place of its size: the bucket is then decoded and encoded whole.
// found is false, and change not called, when the bucket or the entry is
// missing. others, if not nil, may change the bucket's other long entries
// in the same write (see entryOthers).
func (r *view) updateEntry(b int, h uint64, change func(e *entry) (write bool, err error), others entryOthers) (found bool, err error) {
	key := r.key(b)
	err = r.update(key, "bucket", nil, func(st stored) ([]byte, error) {
		found = false
		if st.missing {
			return nil, nil
		}
		var e entry
		at, short, _, err := findEntry(st.raw, h)
		if err == nil && at >= 0 {
			err = decodeEntryAt(st.raw[at:], short, &e)
		}
		if err != nil {
			r.obs.ValueReset(key, err)
			return nil, err
		}
		if at < 0 {
			return nil, nil
		}
		found = true
		write, err := change(&e)
		if err != nil || !write {
			return nil, err
		}
		if isShort(&e) != short {
			return r.rewriteEntry(key, st.raw, e)
		}
		n := len(st.raw) - sealLen
		r.buf = append(r.buf[:0], st.raw[:n]...)
		// (In place: r.buf holds the entry's bytes.)
		if short {
			appendShort(r.buf[at:at], &e)
		} else {
			appendEntry(r.buf[at:at], &e)
		}
		if others != nil {
			changeOthers(r.buf, int(st.raw[1]), at, others)
		}
		r.buf = seal(r.buf)
		return r.buf, nil
	})
	return found, err
}

// entryOthers changes, in the write of one entry, other entries of its
// bucket: pick says from the hash alone whether to decode the entry, and
// change changes the entry last picked and says whether to write it.
// Only long entries are offered, and a change that would make one short
// is not written: either would move the entries after it.
type entryOthers interface {
	pick(h uint64) bool
	change(e *entry) bool
}

// changeOthers offers others the long entries of bucket raw (its header
// checked, its long ones counted) but the one at skip, and writes in place
// those it changes. An entry that does not decode is left as it is: the
// next decode of the whole bucket reports it.
func changeOthers(raw []byte, long, skip int, others entryOthers) {
	for i := 0; i < long; i++ {
		at := bucketHead + i*entryLen
		if at == skip || !others.pick(binary.LittleEndian.Uint64(raw[at:])) {
			continue
		}
		var e entry
		if decodeEntryAt(raw[at:], false, &e) != nil || !others.change(&e) || isShort(&e) {
			continue
		}
		appendEntry(raw[at:at], &e)
	}
}

// rewriteEntry encodes bucket raw whole, with e in place of the entry of
// its hash.
func (r *view) rewriteEntry(key string, raw []byte, e entry) ([]byte, error) {
	if err := decodeBucket(raw, &r.bkt); err != nil {
		r.obs.ValueReset(key, err)
		return nil, err
	}
	for i := range r.bkt.entries {
		if r.bkt.entries[i].hash == e.hash {
			r.bkt.entries[i] = e
		}
	}
	r.buf = appendBucket(r.buf, &r.bkt)
	return r.buf, nil
}

// resetBucket replaces unreadable bucket b, read with CAS cas, by an empty
// one: its clients come back as newcomers. (See view.resetCorrupt.)
func (r *view) resetBucket(b int, cas uint32) {
	r.buf = appendBucket(r.buf, &bucketVal{})
	if err := r.store.Set(r.key(b), r.buf, cas); err != nil && !errors.Is(err, ErrCASMismatch) {
		r.obs.StoreFailure("reset bucket", err)
	}
}

// tablePrefix names the bucket keys of a table of nb buckets: tables of
// different sizes never share a key.
func tablePrefix(cfg *Config, nb int) string { return recordKey(cfg, "c/"+strconv.Itoa(nb)+"/") }

func (r *view) key(b int) string {
	if r.keys[b] == "" {
		r.keys[b] = r.prefix + strconv.Itoa(b)
	}
	return r.keys[b]
}
