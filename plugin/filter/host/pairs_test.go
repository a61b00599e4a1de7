package host

import (
	"encoding/binary"
	"testing"
)

// encodePairs is the proxy-wasm pairs encoding, as a host writes it.
func encodePairs(pairs [][2]string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(pairs)))
	for _, kv := range pairs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(kv[0])))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(kv[1])))
	}
	for _, kv := range pairs {
		b = append(append(append(append(b, kv[0]...), 0), kv[1]...), 0)
	}
	return b
}

func TestScanPairs(t *testing.T) {
	headers := [][2]string{{":path", "/"}, {"x-client-id", "alice"}, {"x-client-id-2", "x"}, {"x-client-id", ""}, {"x-client", "y"}}
	b := encodePairs(headers)
	cases := []struct {
		name, first string
		copies      int
	}{{"x-client-id", "alice", 2}, {":path", "/", 1}, {"x-client", "y", 1}, {"x-client-i", "", 0}, {"absent", "", 0}}
	for _, c := range cases {
		if first, copies := scanPairs(b, c.name); first != c.first || copies != c.copies {
			t.Errorf("%s: %q, %d; want %q, %d", c.name, first, copies, c.first, c.copies)
		}
	}
	if first, copies := scanPairs(encodePairs(nil), "x"); first != "" || copies != 0 {
		t.Errorf("empty map: %q, %d", first, copies)
	}
	// Malformed maps: whatever prefix is whole counts, and nothing is read
	// past the end.
	for cut := 0; cut < len(b); cut++ {
		first, copies := scanPairs(b[:cut], "x-client-id")
		if copies > 2 || copies > 0 && first != "alice" {
			t.Errorf("cut at %d: %q, %d", cut, first, copies)
		}
	}
	huge := binary.LittleEndian.AppendUint32(nil, 1<<31)
	if _, copies := scanPairs(append(huge, make([]byte, 16)...), "x"); copies != 0 {
		t.Errorf("a count beyond the buffer: %d copies", copies)
	}
	lying := encodePairs([][2]string{{"x", "y"}})
	binary.LittleEndian.PutUint32(lying[8:], 1<<30) // the value's length
	if _, copies := scanPairs(lying, "x"); copies != 0 {
		t.Errorf("a length beyond the buffer: %d copies", copies)
	}
}
