package wasmhost

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/borrowcycle/borrowcycle/engine/storetest"
)

func TestSharedDataEnvoySemantics(t *testing.T) {
	s := NewSharedData()
	if _, _, st := s.Get("a"); st != StatusNotFound {
		t.Fatalf("get missing: %v, want not_found", st)
	}
	// A missing key is created whatever the CAS, and CAS values come from
	// one counter shared by all keys, starting at 1.
	if st := s.Set("a", []byte("1"), 12345); st != StatusOK {
		t.Fatalf("set missing with cas 12345: %v", st)
	}
	if st := s.Set("b", []byte("x"), 0); st != StatusOK {
		t.Fatalf("set b: %v", st)
	}
	_, casA, _ := s.Get("a")
	_, casB, _ := s.Get("b")
	if casA != 1 || casB != 2 {
		t.Fatalf("cas a=%d b=%d, want 1 and 2 from one global counter", casA, casB)
	}
	// A stale CAS is a mismatch and does not consume a CAS value.
	if st := s.Set("a", []byte("2"), casB); st != StatusCasMismatch {
		t.Fatalf("stale cas: %v, want cas_mismatch", st)
	}
	if st := s.Set("a", []byte("2"), casA); st != StatusOK {
		t.Fatalf("matching cas: %v", st)
	}
	v, casA2, _ := s.Get("a")
	if string(v) != "2" || casA2 != 3 {
		t.Fatalf("after set: %q cas %d, want \"2\" cas 3", v, casA2)
	}
	// CAS 0 overwrites whatever the current CAS.
	if st := s.Set("a", []byte("3"), 0); st != StatusOK {
		t.Fatalf("cas 0: %v", st)
	}
	if v, _, _ := s.Get("a"); string(v) != "3" {
		t.Fatalf("cas 0 did not overwrite: %q", v)
	}
	// Get hands out a copy.
	v[0] = 'z'
	if v2, _, _ := s.Get("a"); string(v2) != "3" {
		t.Fatalf("store aliased a returned value: %q", v2)
	}
}

// statusStore reads SharedData back through its statuses, so that the
// engine's Store contract checks the adapter, not only the store under it.
type statusStore struct{ s *SharedData }

var statusErrors = map[Status]error{StatusNotFound: engine.ErrNotFound, StatusCasMismatch: engine.ErrCASMismatch}

func statusError(st Status) error {
	if st == StatusOK {
		return nil
	}
	if err, ok := statusErrors[st]; ok {
		return err
	}
	return fmt.Errorf("status %v", st)
}

func (a statusStore) Get(key string) ([]byte, uint32, error) {
	v, cas, st := a.s.Get(key)
	return v, cas, statusError(st)
}

func (a statusStore) Set(key string, value []byte, cas uint32) error {
	return statusError(a.s.Set(key, value, cas))
}

func TestSharedDataStoreContract(t *testing.T) {
	storetest.Run(t, func(*testing.T) engine.Store { return statusStore{NewSharedData()} })
}

func TestMetricsOneStatPerName(t *testing.T) {
	m := NewMetrics()
	c1, _ := m.Define(MetricCounter, "reqs")
	c2, _ := m.Define(MetricCounter, "reqs")
	g, _ := m.Define(MetricGauge, "reqs")
	if c1 != c2 {
		t.Fatalf("same counter defined twice: ids %d and %d", c1, c2)
	}
	if g == c1 {
		t.Fatal("a gauge and a counter of the same name share an id")
	}
	for _, off := range []int64{1, 2, 3} {
		if st := m.Increment(c1, off); st != StatusOK {
			t.Fatalf("increment: %v", st)
		}
	}
	if st := m.Increment(c1, 0); st != StatusBadArgument {
		t.Fatalf("counter increment by 0: %v, want bad_argument", st)
	}
	if st := m.Increment(c1, -1); st != StatusBadArgument {
		t.Fatalf("counter increment by -1: %v, want bad_argument", st)
	}
	if st := m.Record(c1, 4); st != StatusOK { // Envoy adds to a counter
		t.Fatalf("record counter: %v", st)
	}
	if v, st := m.Get(c1); v != 10 || st != StatusOK {
		t.Fatalf("counter = %d (%v), want 10", v, st)
	}
	m.Increment(g, 5)
	m.Increment(g, -2)
	if v, _ := m.Get(g); v != 3 {
		t.Fatalf("gauge = %d, want 3", v)
	}
	m.Record(g, 7)
	if v, _ := m.Get(g); v != 7 {
		t.Fatalf("gauge after record = %d, want 7", v)
	}
	h, _ := m.Define(MetricHistogram, "lat")
	if st := m.Record(h, 3); st != StatusOK {
		t.Fatalf("record histogram: %v", st)
	}
	if _, st := m.Get(h); st != StatusBadArgument {
		t.Fatalf("get histogram: %v, want bad_argument", st)
	}
	if st := m.Increment(h, 1); st != StatusBadArgument {
		t.Fatalf("increment histogram: %v, want bad_argument", st)
	}
	if _, st := m.Get(99 << 2); st != StatusNotFound {
		t.Fatalf("get unknown counter id: %v, want not_found", st)
	}
	if _, st := m.Define(7, "x"); st != StatusBadArgument {
		t.Fatalf("define type 7: %v, want bad_argument", st)
	}
	if v, ok := m.Value("lat"); !ok || v != 3 {
		t.Fatalf("histogram sum by name = %d %v, want 3", v, ok)
	}
}

func TestPairsRoundTrip(t *testing.T) {
	in := [][2]string{{":status", "200"}, {"x-a", ""}, {"", "v"}, {"k", "vé"}}
	out, err := decodePairs(encodePairs(in))
	if err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %v %v", out, err)
	}
	if out, err := decodePairs(encodePairs(nil)); err != nil || len(out) != 0 {
		t.Fatalf("empty map: %v %v", out, err)
	}
	bad := encodePairs(in)
	bad[4] = 200 // first key length now runs past the end
	if _, err := decodePairs(bad); err == nil {
		t.Fatal("decoded a map whose lengths overrun it")
	}
	if _, err := decodePairs([]byte{255, 255, 255, 255}); err == nil {
		t.Fatal("decoded a map claiming 2^32-1 pairs in 4 bytes")
	}
}

func TestClock(t *testing.T) {
	start := time.Date(2031, 5, 6, 7, 8, 9, 10, time.UTC)
	c := NewClock(start)
	m0 := c.nanotime()
	c.Advance(1500 * time.Millisecond)
	if got := c.Now(); !got.Equal(start.Add(1500 * time.Millisecond)) {
		t.Fatalf("now = %v", got)
	}
	sec, nsec := c.walltime()
	if got := time.Unix(sec, int64(nsec)); !got.Equal(start.Add(1500 * time.Millisecond)) {
		t.Fatalf("walltime = %d.%09d", sec, nsec)
	}
	if d := c.nanotime() - m0; d != int64(1500*time.Millisecond) {
		t.Fatalf("monotonic advanced %d", d)
	}
	c.Set(start) // the wall clock steps back; the monotonic one must not
	if !c.Now().Equal(start) || c.nanotime()-m0 != int64(1500*time.Millisecond) {
		t.Fatalf("after step back: now %v, monotonic +%d", c.Now(), c.nanotime()-m0)
	}
	c.Set(start.Add(time.Second))
	if d := c.nanotime() - m0; d != int64(2500*time.Millisecond) {
		t.Fatalf("after step forward monotonic +%d, want 2.5s", d)
	}
}

// The SDK turns statuses into errors by number; a wrong constant would make
// the guest see a different error than Envoy gives it.
func TestStatusNumbersMatchTheABI(t *testing.T) {
	for st, want := range map[Status]uint32{StatusOK: 0, StatusNotFound: 1, StatusBadArgument: 2,
		StatusInvalidMemoryAccess: 6, StatusEmpty: 7, StatusCasMismatch: 8, StatusUnimplemented: 12} {
		if uint32(st) != want {
			t.Errorf("%v = %d, want %d", st, uint32(st), want)
		}
	}
}
