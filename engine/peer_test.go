package engine

import (
	"fmt"
	"testing"
	"time"
)

// MaxIDsPerPeer over synthetic times, across two workers of one store: a
// peer's first N ids of a window are its own for the window, a further one
// is refused too_many_ids until the window ends, and the next window starts
// the peer's ids afresh. Another peer is not affected.
func TestMaxIDsPerPeer(t *testing.T) {
	cfg := testConfig() // 40 per 10 s
	cfg.MaxIDsPerPeer = 2
	store := NewMemStore()
	w1, w2 := newLimiter(t, cfg, store), newLimiter(t, cfg, store)
	if err := w1.RegisterAt(t0, "a", "b", "c", "d"); err != nil { // (known clients: no newcomer waits)
		t.Fatal(err)
	}
	at := t0.Add(time.Second)
	steps := []struct {
		w      *Limiter
		at     time.Time
		peer   string
		client string
		want   Reason
	}{
		{w1, at, "10.0.0.1", "a", ReasonOK},
		{w2, at, "10.0.0.1", "b", ReasonOK},
		{w1, at, "10.0.0.1", "c", ReasonTooManyIDs}, // (w1 read the record)
		{w2, at, "10.0.0.1", "c", ReasonTooManyIDs}, // (w2 knows from its mark)
		{w1, at, "10.0.0.1", "b", ReasonOK},
		{w2, at, "10.0.0.2", "c", ReasonOK}, // another peer
		{w1, at, "", "d", ReasonOK},         // no peer: no bound
		{w1, at.Add(10 * time.Second), "10.0.0.1", "c", ReasonOK},
		{w2, at.Add(10 * time.Second), "10.0.0.1", "d", ReasonOK},
		{w2, at.Add(10 * time.Second), "10.0.0.1", "a", ReasonTooManyIDs},
	}
	for i, s := range steps {
		d := s.w.AdmitFromAt(s.at, s.peer, s.client, 1)
		if d.Reason != s.want {
			t.Fatalf("step %d (%s from %q): %+v, want %s", i, s.client, s.peer, d, s.want)
		}
		if s.want == ReasonTooManyIDs && (d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > cfg.Cycle) {
			t.Fatalf("step %d: %+v, want a refusal until the window ends", i, d)
		}
	}
}

// A rotating caller against two honest ones, one id per peer: the
// rotation is refused before it reaches the client table, so it neither
// registers newcomers nor dilutes the honest shares.
func TestRotationFromOnePeerGetsOneShare(t *testing.T) {
	cfg := testConfig()
	cfg.Capacity = 30
	cfg.MaxIDsPerPeer = 1
	l := newLimiter(t, cfg, NewMemStore())
	got := map[string]int{}
	for w := 0; w < 3; w++ {
		for i := 0; i < 100; i++ {
			at := t0.Add(time.Duration(w)*cfg.Cycle + time.Duration(i)*cfg.Cycle/100)
			if l.AdmitFromAt(at, "honest-1", "h1", 1).Allowed {
				got["h1"]++
			}
			if l.AdmitFromAt(at, "honest-2", "h2", 1).Allowed {
				got["h2"]++
			}
			if l.AdmitFromAt(at, "attacker", fmt.Sprintf("rot-%d", i%10), 1).Allowed {
				got["attacker"]++
			}
		}
	}
	total := got["h1"] + got["h2"] + got["attacker"]
	if share := float64(got["attacker"]) / float64(total); share > 1.0/3+0.05 {
		t.Fatalf("admitted %v: the rotating peer got %.2f of them, want at most 1/3 + 5%%", got, share)
	}
	if s := l.Snapshot(); len(s.Clients) != 3 {
		t.Fatalf("the table counts %d clients, want the three first ids", len(s.Clients))
	}
}

// Peers beyond a bucket's room are not bounded (nor refused): a flood of
// peers costs the bound, never a client its requests.
func TestPeerFloodIsNotBoundedButNotRefused(t *testing.T) {
	cfg := testConfig()
	cfg.Capacity = 1 << 20
	cfg.MaxClients = 1
	cfg.MaxIDsPerPeer = 1
	l := newLimiter(t, cfg, NewMemStore())
	if err := l.RegisterAt(t0, "x"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4*peerSlots; i++ {
		if d := l.AdmitFromAt(t0.Add(time.Second), fmt.Sprintf("peer-%d", i), "x", 1); !d.Allowed {
			t.Fatalf("peer %d: %+v, want admitted", i, d)
		}
	}
}

func FuzzDecodePeers(f *testing.F) {
	f.Add(appendPeers(nil, []peerEntry{{peer: 1, window: 5, ids: []uint64{7, 8}}, {peer: 2, window: 4}}))
	f.Fuzz(func(t *testing.T, raw []byte) {
		es, err := decodePeers(raw, nil)
		if err != nil {
			return
		}
		if again := appendPeers(nil, es); string(again) != string(raw) {
			t.Fatalf("re-encoded %x, read %x", again, raw)
		}
	})
}
