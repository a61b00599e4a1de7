package host

import "encoding/binary"

// replier sends local replies (send is in reply_wasm.go and
// reply_other.go). Its buffer holds the serialized headers of the last
// reply and is reused: the host copies them during the call.
type replier struct{ buf []byte }

// appendPairs appends headers in the proxy-wasm map encoding: the number
// of pairs, each pair's key and value lengths (little-endian uint32), then
// each key and value followed by a NUL.
func appendPairs(b []byte, headers [][2]string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(headers)))
	for _, kv := range headers {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(kv[0])))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(kv[1])))
	}
	for _, kv := range headers {
		b = append(append(b, kv[0]...), 0)
		b = append(append(b, kv[1]...), 0)
	}
	return b
}
