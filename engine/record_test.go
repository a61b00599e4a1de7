package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"testing"
	"time"
)

// scriptedStore is a MemStore whose every Get and Set first reads one byte
// of a script: 1 makes another writer add one to the counter just before
// (so a Set that follows a read loses its compare-and-swap), 2 makes the
// call fail as a host error would, anything else (or an exhausted script)
// lets it through.
type scriptedStore struct {
	mem    *MemStore
	script []byte
	others uint64 // increments the other writer made
	calls  int
}

var errScripted = errors.New("scripted host error")

func (s *scriptedStore) next() byte {
	s.calls++
	if len(s.script) == 0 {
		return 0
	}
	b := s.script[0]
	s.script = s.script[1:]
	return b % 4
}

func (s *scriptedStore) interleave() {
	raw, _, err := s.mem.Get("k")
	var c uint64
	if err == nil {
		c = binary.LittleEndian.Uint64(raw)
	}
	if err := s.mem.Set("k", binary.LittleEndian.AppendUint64(nil, c+1), 0); err == nil {
		s.others++
	}
}

func (s *scriptedStore) Get(key string) ([]byte, uint32, error) {
	switch s.next() {
	case 1:
		s.interleave()
	case 2:
		return nil, 0, errScripted
	}
	return s.mem.Get(key)
}

func (s *scriptedStore) Set(key string, value []byte, cas uint32) error {
	switch s.next() {
	case 1:
		s.interleave()
	case 2:
		return errScripted
	}
	return s.mem.Set(key, value, cas)
}

// FuzzTransaction drives the one compare-and-swap loop (casUpdate) against
// a store where another writer slips in between its read and its write,
// and reads and writes fail, as the fuzzer chooses; a transaction may
// start from a read made before it (as a newcomer's registration does),
// which may be stale by then. Each transaction adds one to a counter.
// Whatever the interleaving: a transaction that returns nil added exactly
// one to the value it last read, one that returns an error added nothing,
// no transaction calls its change more than retries times, and only
// running out of them returns ErrRetriesExhausted.
func FuzzTransaction(f *testing.F) {
	f.Add([]byte{}, uint8(3), uint8(0))
	f.Add([]byte{1, 1, 1, 1, 1, 1, 1, 1}, uint8(3), uint8(1))
	f.Add([]byte{0, 2, 0, 1, 0, 0, 2, 2, 1, 0}, uint8(5), uint8(3))
	f.Fuzz(func(t *testing.T, script []byte, retries, preread uint8) {
		s := &scriptedStore{mem: NewMemStore(), script: script}
		n := int(retries%6) + 1
		var ours uint64
		for round := 0; round < 6; round++ {
			var read *bucketRead
			if preread>>round&1 == 1 {
				raw, cas, err := s.mem.Get("k")
				read = &bucketRead{raw: raw, cas: cas, missing: errors.Is(err, ErrNotFound), valid: true}
			}
			calls := 0
			err := casUpdate(s, NopObserver{}, n, "k", "test", read, func(st stored) ([]byte, error) {
				calls++
				var c uint64
				if !st.missing {
					if len(st.raw) != 8 {
						t.Fatalf("change handed %d bytes", len(st.raw))
					}
					c = binary.LittleEndian.Uint64(st.raw)
				}
				return binary.LittleEndian.AppendUint64(nil, c+1), nil
			})
			if calls > n {
				t.Fatalf("change called %d times with %d retries", calls, n)
			}
			switch {
			case err == nil:
				ours++
			case errors.Is(err, ErrRetriesExhausted):
				if calls != n {
					t.Fatalf("retries exhausted after %d of %d attempts", calls, n)
				}
			case !errors.Is(err, errScripted):
				t.Fatalf("unexpected error %v", err)
			}
		}
		var got uint64
		if raw, _, err := s.mem.Get("k"); err == nil {
			got = binary.LittleEndian.Uint64(raw)
		}
		if got != ours+s.others {
			t.Fatalf("counter %d, want %d (ours) + %d (the other writer's): an update was lost or applied twice", got, ours, s.others)
		}
	})
}

// TestEncodingIsPinned holds every record's encoding, and the checksum,
// to what recordFormat names. Workers of two modules share keys only when
// they encode alike: a change here without a new recordFormat would have
// an upgraded module read the draining one's values as unreadable.
func TestEncodingIsPinned(t *testing.T) {
	const want = "55ebc9d0e7a2ae49"
	p := plan{id: 7, roll: 6, window: 1_700_000_000, at: 1_700_000_000_123, capacity: 40, n: 3, pending: 1, buckets: 4,
		cycle: int64(time.Second), shift: 2, born: 9, newCycle: int64(time.Second), newBuckets: 4}
	p.params[0], p.thrFrac, p.thrHash, p.promoted, p.spread = 13.5, 0.25, 99, 42, 1.5
	p.provisional, p.carried, p.print = true, true, 0x5eed
	bkt := bucketVal{overflow: true, entries: []entry{{hash: 5, created: 6, since: 7, window: 8, plan: 6, share: 10, granted: 4, demand: 3, prev: 2.5, active: 8, tries: 2, lastDemand: 11, lastGranted: 9},
		{hash: 12, created: 6, since: 7, window: 8, prev: 1, active: 8, tries: 1}}} // (the second is short)
	fs := newFleetState()
	fs.nextID, fs.syncer = 3, 2
	fs.claim(8).leased = 11
	var all []byte
	all = append(all, appendPlan(nil, &p)...)
	all = append(all, appendBudget(nil, budget{window: 8, roll: 6, granted: 17, capacity: 40, end: 9_000, late: 2.5, owed: 3, seen: 1, booked: []booking{{client: 3, n: 1, at: 8_500}}})...)
	all = append(all, appendBucket(nil, &bkt)...)
	all = append(all, appendPace(nil, pace{tat: 12_345, turns: []turn{{client: 3, at: 12_000}}})...)
	all = append(all, appendFleet(nil, &fs)...)
	all = append(all, appendPeers(nil, []peerEntry{{peer: 1, window: 8, ids: []uint64{2, 3}}})...)
	sum := sha256.Sum256(all)
	if got := hex.EncodeToString(sum[:8]); got != want {
		t.Fatalf("the records encode as %s, not as format %s pinned (%s): a change of encoding needs a new recordFormat (record.go), then this pin, and a CHANGELOG line", got, recordFormat, want)
	}
}

// A bucket that names one client twice is unreadable, wherever the two
// entries are, in a bucket of any size (small ones compare every pair,
// full ones sort).
func TestABucketWithADuplicateIsUnreadable(t *testing.T) {
	for _, n := range []int{2, 3, 12, 16, 17, 30, bucketSlots} {
		for _, at := range [][2]int{{0, 1}, {0, n - 1}, {n / 2, n - 1}, {n - 2, n - 1}} {
			if at[0] == at[1] {
				continue
			}
			bkt := bucketVal{entries: make([]entry, n)}
			for i := range bkt.entries {
				bkt.entries[i] = entry{hash: uint64(1000 - 7*i), window: 5, active: 5}
			}
			raw := appendBucket(nil, &bkt)
			var b bucketVal
			if err := decodeBucket(raw, &b); err != nil {
				t.Fatalf("%d distinct entries: %v", n, err)
			}
			bkt.entries[at[1]].hash = bkt.entries[at[0]].hash
			raw = appendBucket(nil, &bkt)
			if err := decodeBucket(raw, &b); !errors.Is(err, errCorrupt) {
				t.Errorf("%d entries, %d and %d the same client: %v, want errCorrupt", n, at[0], at[1], err)
			}
		}
	}
}

// updateEntry writes what decoding the whole bucket, changing the one
// entry and encoding it all again writes; it leaves a bucket without the
// entry as it was, and refuses one whose entry is impossible.
func TestUpdateEntryWritesTheBucketAFullRewriteWould(t *testing.T) {
	store := NewMemStore()
	l := newLimiter(t, testConfig(), store)
	r, key := l.view, l.view.key(0)
	bkt := bucketVal{overflow: true}
	for i := range 5 {
		bkt.entries = append(bkt.entries, entry{hash: uint64(100 + i), created: 1, window: 5, plan: 3, share: 10, granted: int64(i), demand: int64(2 * i), prev: 1.5, active: 5, tries: 2})
	}
	if err := store.Set(key, appendBucket(nil, &bkt), 0); err != nil {
		t.Fatal(err)
	}
	for _, h := range []uint64{100, 102, 104} {
		found, err := r.updateEntry(0, h, func(e *entry) (bool, error) {
			e.granted += 3
			e.demand += 7
			return true, nil
		}, nil)
		if err != nil || !found {
			t.Fatalf("entry %d: found %v, %v", h, found, err)
		}
		bkt.entries[h-100].granted += 3
		bkt.entries[h-100].demand += 7
		if raw, _, _ := store.Get(key); string(raw) != string(appendBucket(nil, &bkt)) {
			t.Fatalf("entry %d changed in place differs from the bucket rewritten", h)
		}
	}
	_, cas, _ := store.Get(key)
	if found, err := r.updateEntry(0, 999, func(*entry) (bool, error) { t.Fatal("change called for a missing entry"); return true, nil }, nil); found || err != nil {
		t.Fatalf("a missing entry: found %v, %v", found, err)
	}
	bkt.entries[1].granted = bkt.entries[1].share + 1 // impossible: more granted than its share
	if err := store.Set(key, appendBucket(nil, &bkt), cas); err != nil {
		t.Fatal(err)
	}
	before, _, _ := store.Get(key)
	if _, err := r.updateEntry(0, 101, func(*entry) (bool, error) { return true, nil }, nil); !errors.Is(err, errCorrupt) {
		t.Fatalf("an impossible entry: %v, want errCorrupt", err)
	}
	if raw, _, _ := store.Get(key); string(raw) != string(before) {
		t.Fatal("a bucket with an impossible entry was written")
	}
}

// pickOthers changes the entries of the hashes in grant, adding to what
// each was granted; one changed to a newcomer's fields (short) is not
// written.
type pickOthers struct {
	grant  map[uint64]int64
	offers []uint64
	picked uint64
}

func (o *pickOthers) pick(h uint64) bool {
	o.offers = append(o.offers, h)
	o.picked = h
	_, ok := o.grant[h]
	return ok
}

func (o *pickOthers) change(e *entry) bool {
	if g := o.grant[o.picked]; g > 0 {
		e.granted += g
	} else {
		*e = entry{hash: e.hash, window: e.window, active: e.window, tries: 1}
	}
	return true
}

// The other entries a write changes (leases ahead) are written as a full
// rewrite would write them; only long entries but the one written are
// offered, and a change that would make an entry short is dropped.
func TestUpdateEntryChangesOthersAsAFullRewriteWould(t *testing.T) {
	store := NewMemStore()
	r := newLimiter(t, testConfig(), store).view
	key := r.key(0)
	bkt := bucketVal{}
	for i := range 5 {
		bkt.entries = append(bkt.entries, entry{hash: uint64(100 + i), created: 1, window: 5, plan: 3, share: 10, granted: 1, demand: 2, prev: 1.5, active: 5, tries: 2})
	}
	bkt.entries = append(bkt.entries, entry{hash: 200, created: 3, since: 40, window: 5, prev: 2, active: 5, tries: 1})
	if err := store.Set(key, appendBucket(nil, &bkt), 0); err != nil {
		t.Fatal(err)
	}
	others := &pickOthers{grant: map[uint64]int64{101: 4, 103: 0, 104: 2, 200: 9}}
	if _, err := r.updateEntry(0, 100, func(e *entry) (bool, error) { e.demand++; return true, nil }, others); err != nil {
		t.Fatal(err)
	}
	if want := []uint64{101, 102, 103, 104}; !slices.Equal(others.offers, want) {
		t.Errorf("offered %v, want the long entries but the one written, %v", others.offers, want)
	}
	bkt.entries[0].demand++
	bkt.entries[1].granted += 4
	bkt.entries[4].granted += 2
	if raw, _, _ := store.Get(key); string(raw) != string(appendBucket(nil, &bkt)) {
		var got bucketVal
		_ = decodeBucket(raw, &got)
		t.Fatalf("wrote %+v, want %+v", got.entries, bkt.entries)
	}
}

// A newcomer's entry is written short and any other long; a bucket
// decodes to what was encoded (long entries first), a short entry written
// long is unreadable, and updateEntry moves an entry between the forms.
func TestNewcomersAreWrittenShort(t *testing.T) {
	newcomer := entry{hash: 21, created: 3, since: 40, window: 5, prev: 2, active: 5, tries: 1}
	counted := entry{hash: 22, created: 1, since: 10, window: 5, plan: 3, share: 10, granted: 4, demand: 6, prev: 1.5, active: 5, tries: 2}
	for _, e := range []entry{counted, {hash: 23, window: 5, active: 5}, {hash: 24, window: 5, active: 4, tries: 1}, {hash: 25, window: 5, active: 5, tries: 1, demand: 1}} {
		if isShort(&e) {
			t.Errorf("%+v is short", e)
		}
	}
	bkt := bucketVal{overflow: true, entries: []entry{newcomer, counted}}
	raw := appendBucket(nil, &bkt)
	if want := bucketHead + entryLen + shortLen + sealLen; len(raw) != want {
		t.Fatalf("a bucket of one long and one short entry in %d bytes, want %d", len(raw), want)
	}
	var got bucketVal
	if err := decodeBucket(raw, &got); err != nil || !got.overflow || len(got.entries) != 2 || got.entries[0] != counted || got.entries[1] != newcomer {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	bkt.entries = slices.Clone(got.entries) // (in the order decoded, for the rewrites below)
	for _, e := range bkt.entries {
		if found, ok, _, err := lookupBucket(raw, e.hash); err != nil || !ok || found != e {
			t.Fatalf("lookup of %d: %+v %v %v", e.hash, found, ok, err)
		}
	}

	// The same newcomer in the long form: unreadable.
	long := append([]byte{bucketVersion, 1, 0, 0}, appendEntry(nil, &newcomer)...)
	if err := decodeBucket(seal(long), &got); !errors.Is(err, errCorrupt) {
		t.Fatalf("a short entry written long: %v, want errCorrupt", err)
	}

	// A lease makes it long, and a rewrite back to a newcomer's fields short.
	store := NewMemStore()
	r := newLimiter(t, testConfig(), store).view
	key := r.key(0)
	if err := store.Set(key, raw, 0); err != nil {
		t.Fatal(err)
	}
	for _, change := range []func(e *entry){
		func(e *entry) { e.plan, e.share, e.granted = 4, 8, 2 },
		func(e *entry) { e.plan, e.share, e.granted = 0, 0, 0 },
	} {
		if found, err := r.updateEntry(0, newcomer.hash, func(e *entry) (bool, error) { change(e); return true, nil }, nil); err != nil || !found {
			t.Fatalf("updateEntry: %v %v", found, err)
		}
		change(&bkt.entries[1])
		if raw, _, _ := store.Get(key); string(raw) != string(appendBucket(nil, &bkt)) {
			t.Fatalf("updateEntry wrote another bucket than a full rewrite (%+v)", bkt.entries[1])
		}
	}
}
