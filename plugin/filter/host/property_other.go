//go:build !wasm

package host

import (
	"strings"

	"github.com/borrowcycle/borrowcycle/plugin/filter"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
)

var accessLogPath = []string{filter.AccessLogProperty}

// setAccessLog sets the access-log record through the SDK: natively the
// host is the SDK's emulator, which has no ABI to call.
func setAccessLog(record []byte) error {
	if len(record) == 0 {
		return nil
	}
	return proxywasm.SetProperty(accessLogPath, record)
}

// getProperty reads the property at path (its elements joined by NUL)
// through the SDK.
func getProperty(path string) ([]byte, error) {
	return proxywasm.GetProperty(strings.Split(path, "\x00"))
}
