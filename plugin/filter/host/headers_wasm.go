//go:build wasm

package host

import "unsafe"

// headerCopies is the first value of the request header name and the
// number of its copies. It calls proxy_get_header_map_pairs itself and
// scans the host's encoding in place (the count, each key's and value's
// length, then each key and value followed by a NUL), where the SDK's
// GetHttpRequestHeaders would first build a slice of every pair. The
// value aliases the host's copy, which lives until the next request.
func headerCopies(name string) (string, int) {
	var data *byte
	var size int32
	if st := proxyGetHeaderMapPairs(mapRequestHeaders, unsafe.Pointer(&data), &size); st != 0 || data == nil || size < 4 {
		return "", 0
	}
	return scanPairs(unsafe.Slice(data, size), name)
}

// mapRequestHeaders is the ABI's map type of the request headers.
const mapRequestHeaders = 0

//go:wasmimport env proxy_get_header_map_pairs
func proxyGetHeaderMapPairs(mapType int32, value unsafe.Pointer, valueSize *int32) uint32
