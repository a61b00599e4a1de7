package store

import "testing"

// The CAS counter skips 0 when it wraps, as Envoy's does: 0 would mean
// "overwrite unconditionally" to the next writer.
func TestCASCounterSkipsZeroOnWrap(t *testing.T) {
	s := NewMemStore()
	s.nextCAS = 1<<32 - 1
	for _, k := range []string{"a", "b"} {
		if err := s.Set(k, []byte("1"), 0); err != nil {
			t.Fatal(err)
		}
	}
	_, casA, _ := s.Get("a")
	_, casB, _ := s.Get("b")
	if casA != 1<<32-1 || casB != 1 {
		t.Fatalf("cas a=%d b=%d, want 4294967295 then 1", casA, casB)
	}
}
