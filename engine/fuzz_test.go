package engine

import (
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/internal/capcheck"
)

// FuzzLimiter puts arbitrary bytes where the plan, the window budget and a
// bucket of client entries live, then drives a limiter with arbitrary ids,
// costs and times: nothing may panic, since a panic would kill an Envoy
// worker's VM, and neither invariant may break.
func FuzzLimiter(f *testing.F) {
	validPlan := appendPlan(nil, &plan{id: 3, roll: 2, window: windowIndex(t0.UnixNano(), &Config{Cycle: time.Second}),
		capacity: 10, n: 2, buckets: 1, params: policyParams{5, 0.5}, thrFrac: 2, scale: 1, cycle: int64(time.Second)})
	validBucket := appendBucket(nil, &bucketVal{entries: []entry{{hash: HashID("a"), created: 1, window: 5, plan: 3, share: 5, granted: 2}}})
	f.Add(validPlan, appendBudget(nil, budget{window: 5, roll: 2, granted: 3, capacity: 10}), validBucket, "a", int64(0), uint8(3), uint8(1))
	f.Add([]byte{1, 2, 3}, []byte{}, []byte{1}, "", int64(-1), uint8(0), uint8(0))
	f.Add(validPlan[:len(validPlan)-1], []byte{1}, validBucket[:20], "b\x00\r\n", int64(1<<62), uint8(200), uint8(9))
	f.Fuzz(func(t *testing.T, planRaw, budgetRaw, bucketRaw []byte, id string, offset int64, maxClients, cost uint8) {
		store := NewMemStore()
		cfg := Defaults(10, time.Second)
		cfg.MinCycle = 200 * time.Millisecond
		cfg.MaxClients = int(maxClients)%8 + 1
		for key, v := range map[string][]byte{"p": planRaw, "w": budgetRaw, "c/1/0": bucketRaw} {
			if err := store.Set(recordKey(&cfg, key), v, 0); err != nil {
				t.Fatal(err)
			}
		}
		l, err := New(cfg, store)
		if err != nil {
			t.Fatal(err)
		}
		check := capcheck.New(cfg.Capacity)
		now := t0.Add(time.Duration(offset % int64(time.Hour)))
		for i, c := range []string{id, "x", id + "y", "x", id, "x"} {
			at := now.Add(time.Duration(i) * 300 * time.Millisecond)
			n := int64(cost%4) + 1
			d := l.AdmitNAt(at, c, n)
			if d.Allowed && d.Reason == ReasonOK {
				check.Admit(capcheck.Admission{Window: d.Window, Period: d.Plan, Client: c, Share: d.Limit, Cost: n})
			}
			l.TickAt(at)
		}
		_ = l.RegisterAt(now, id, "z")
		_ = l.Snapshot()
		// A window that started from a value the fuzzer wrote may have
		// granted units before this limiter ran; everything it admitted
		// itself still fits.
		check.Check(t)
	})
}

// FuzzCodecs: every decoder either refuses a value or returns one that
// encodes back to the same bytes, and never panics.
func FuzzCodecs(f *testing.F) {
	f.Add(appendPlan(nil, &plan{id: 1, roll: 1, capacity: 1, buckets: 1, scale: 1, cycle: 1}))
	f.Add(appendBudget(nil, budget{roll: 1, capacity: 5, granted: 2}))
	f.Add(appendBudget(nil, budget{roll: 1, capacity: 5, granted: 2, booked: []booking{{client: 4, n: 1, at: 9}, {client: 5, at: 7}}}))
	f.Add(appendBudget(nil, budget{roll: 1, capacity: 5, granted: 2, late: 1.5, owed: 3, seen: 2, booked: []booking{{client: 4, n: 1, at: 9}}}))
	f.Add(appendBucket(nil, &bucketVal{overflow: true, entries: []entry{{hash: 7, share: 3, granted: 1}}}))
	f.Add(appendPace(nil, pace{tat: 11, turns: []turn{{client: 2, at: 12}, {client: 3, at: 14}}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var p plan
		if decodePlan(raw, &p) == nil {
			if got := appendPlan(nil, &p); string(got) != string(raw) {
				t.Fatalf("plan does not round-trip")
			}
		}
		if v, err := decodeBudget(raw); err == nil {
			if got := appendBudget(nil, v); string(got) != string(raw) {
				t.Fatalf("budget does not round-trip")
			}
		}
		if v, err := decodePace(raw); err == nil {
			if got := appendPace(nil, v); string(got) != string(raw) {
				t.Fatalf("pace does not round-trip")
			}
		}
		var b bucketVal
		if decodeBucket(raw, &b) == nil {
			if got := appendBucket(nil, &b); string(got) != string(raw) {
				t.Fatalf("bucket does not round-trip")
			}
			for i := range b.entries {
				if e := &b.entries[i]; e.granted > e.share {
					t.Fatalf("accepted an entry with granted %d > share %d", e.granted, e.share)
				}
				// A lookup finds what the whole decode found.
				if got, found, overflow, err := lookupBucket(raw, b.entries[i].hash); err != nil || !found || got != b.entries[i] || overflow != b.overflow {
					t.Fatalf("lookup of entry %d: %+v %v %v %v, decoded %+v", i, got, found, overflow, err, b.entries[i])
				}
			}
		}
		// A lookup never finds what is not there, nor accepts a value the
		// whole decode refuses for its header.
		if _, _, _, err := bucketHeader(raw); err == nil {
			if _, found, _, _ := lookupBucket(raw, 0); found {
				t.Fatalf("lookup found hash 0, which no entry may have")
			}
		} else if _, _, _, err := lookupBucket(raw, 1); err == nil {
			t.Fatalf("lookup accepted a bucket whose header is refused")
		}
	})
}
