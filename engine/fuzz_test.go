package engine

import (
	"testing"
	"time"
)

// FuzzLimiter puts arbitrary bytes where the shared header and a client
// slot live, then drives a limiter with arbitrary ids and times: nothing may
// panic, since a panic would kill an Envoy worker's VM, and no decision may
// admit more than capacity in a cycle.
func FuzzLimiter(f *testing.F) {
	valid := appendHeader(nil, &header{cycle: 3, deadline: 1 << 62, clients: []clientEntry{{hash: 1, share: 5}, {hash: 2, share: 9}}})
	f.Add(valid, appendSlot(nil, slotValue{cycle: 3, hash: 1, granted: 2}), "a", int64(0), uint8(3))
	f.Add([]byte{1, 2, 3}, []byte{}, "", int64(-1), uint8(0))
	f.Add(valid[:len(valid)-1], []byte{1}, "b\x00\r\n", int64(1<<62), uint8(200))
	f.Fuzz(func(t *testing.T, hdr, slot []byte, id string, offset int64, maxClients uint8) {
		store := NewMemStore()
		cfg := Defaults(10, time.Second)
		cfg.MaxClients = int(maxClients)%8 + 1
		if err := store.Set(cfg.KeyPrefix+"/h", hdr, 0); err != nil {
			t.Fatal(err)
		}
		if err := store.Set(cfg.KeyPrefix+"/s/0", slot, 0); err != nil {
			t.Fatal(err)
		}
		l, err := New(cfg, store)
		if err != nil {
			t.Fatal(err)
		}
		now := t0.Add(time.Duration(offset % int64(time.Hour)))
		admitted := map[uint64]int64{}
		for i, c := range []string{id, "x", id + "y", "x", id} {
			at := now.Add(time.Duration(i) * 300 * time.Millisecond)
			if d := l.AdmitAt(at, c); d.Allowed && d.Reason == ReasonOK {
				admitted[d.Cycle]++
			}
			l.TickAt(at)
		}
		_ = l.RegisterAt(now, id, "z")
		for c, n := range admitted {
			if n > cfg.Capacity {
				t.Fatalf("cycle %d admitted %d > capacity %d", c, n, cfg.Capacity)
			}
		}
	})
}
