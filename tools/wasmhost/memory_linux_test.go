package wasmhost

import "testing"

// A reserved memory grows in place, as V8's does: what the guest wrote
// stays at its address, the new pages read zero, and growth past the
// maximum is refused.
func TestReservedMemoryGrowsInPlace(t *testing.T) {
	const page = 1 << 16
	for name, m := range map[string]interface {
		Reallocate(uint64) []byte
		Free()
	}{"reserved": reserve(0, 16*page), "growing": &growing{max: 16 * page}} {
		t.Run(name, func(t *testing.T) {
			defer m.Free()
			small := m.Reallocate(page)
			if len(small) != page {
				t.Fatalf("len %d after Reallocate(%d)", len(small), page)
			}
			small[page-1] = 7
			big := m.Reallocate(16 * page)
			if len(big) != 16*page || big[page-1] != 7 || big[page] != 0 || big[16*page-1] != 0 {
				t.Fatalf("after growing: len %d, byte %d, new bytes %d, %d", len(big), big[page-1], big[page], big[16*page-1])
			}
			if _, mapped := m.(*reserved); name == "reserved" && (!mapped || &big[0] != &small[0]) {
				t.Errorf("the reserved memory moved as it grew (mapped: %v)", mapped)
			}
			if m.Reallocate(17*page) != nil {
				t.Error("grew past its maximum")
			}
		})
	}
}
