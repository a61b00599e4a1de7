//go:build wasm

package host

import (
	"errors"
	"strconv"

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
