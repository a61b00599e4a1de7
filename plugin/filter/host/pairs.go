package host

import (
	"encoding/binary"
	"unsafe"
)

// scanPairs finds the header name in b, a header map in the proxy-wasm
// pairs encoding: a little-endian uint32 count n, then n pairs of uint32
// key and value lengths, then each key and each value followed by a NUL.
// It returns the first value and the number of copies, and reads nothing
// past b: a malformed map counts what it holds up to where it breaks.
func scanPairs(b []byte, name string) (string, int) {
	if len(b) < 4 {
		return "", 0
	}
	n := int(binary.LittleEndian.Uint32(b))
	sizes := 4
	data := 4 + 8*n
	if n > len(b)/8 || data > len(b) {
		return "", 0
	}
	first, copies := "", 0
	for i := 0; i < n; i++ {
		k := int(binary.LittleEndian.Uint32(b[sizes:]))
		v := int(binary.LittleEndian.Uint32(b[sizes+4:]))
		sizes += 8
		if data+k+1+v+1 > len(b) { // lengths are below 2^32: no overflow
			break
		}
		key := b[data : data+k]
		value := b[data+k+1 : data+k+1+v]
		data += k + 1 + v + 1
		if string(key) == name {
			if copies == 0 {
				first = unsafe.String(unsafe.SliceData(value), len(value))
			}
			copies++
		}
	}
	return first, copies
}
