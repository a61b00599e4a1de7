//go:build wasm

package host

import (
	"errors"
	"strconv"
	"unsafe"

	"github.com/borrowcycle/borrowcycle/plugin/filter"
)

// accessLogPathBytes is the serialized property path of the access-log
// record: one element, so its own bytes.
var accessLogPathBytes = []byte(filter.AccessLogProperty)

// setAccessLog sets the access-log record with proxy_set_property. It calls
// the ABI itself, not the SDK's SetProperty, because that serializes the
// path anew (an allocation) on every request.
func setAccessLog(record []byte) error {
	if len(record) == 0 {
		return nil
	}
	if st := proxySetProperty(&accessLogPathBytes[0], int32(len(accessLogPathBytes)), &record[0], int32(len(record))); st != 0 {
		return errors.New("proxy_set_property: status " + strconv.FormatUint(uint64(st), 10))
	}
	return nil
}

//go:wasmimport env proxy_set_property
func proxySetProperty(path *byte, pathSize int32, value *byte, valueSize int32) uint32

// getProperty reads the property at path (its elements joined by NUL, the
// ABI's encoding) with proxy_get_property. It calls the ABI itself, not
// the SDK's GetProperty, which encodes the path anew (an allocation) on
// every request. The value is in memory the host allocated in the guest
// for this call.
func getProperty(path string) ([]byte, error) {
	if path == "" {
		return nil, errors.New("empty property path")
	}
	var data *byte
	var size int32
	if st := proxyGetProperty(unsafe.StringData(path), int32(len(path)), unsafe.Pointer(&data), &size); st != 0 {
		return nil, errors.New("proxy_get_property: status " + strconv.FormatUint(uint64(st), 10))
	}
	if data == nil || size == 0 {
		return nil, nil
	}
	return unsafe.Slice(data, size), nil
}

//go:wasmimport env proxy_get_property
func proxyGetProperty(path *byte, pathSize int32, value unsafe.Pointer, valueSize *int32) uint32
