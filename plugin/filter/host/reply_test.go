package host

import (
	"bytes"
	"testing"
)

func TestAppendPairs(t *testing.T) {
	got := appendPairs([]byte("x"), [][2]string{{"ab", "c"}, {"d", ""}})
	want := []byte("x" +
		"\x02\x00\x00\x00" + // two pairs
		"\x02\x00\x00\x00\x01\x00\x00\x00" + "\x01\x00\x00\x00\x00\x00\x00\x00" + // lengths
		"ab\x00c\x00" + "d\x00\x00")
	if !bytes.Equal(got, want) {
		t.Errorf("appendPairs = %q, want %q", got, want)
	}
	if got := appendPairs(nil, nil); !bytes.Equal(got, []byte{0, 0, 0, 0}) {
		t.Errorf("no pairs = %q", got)
	}
}
