//go:build !wasm

package host

import (
	"github.com/borrowcycle/borrowcycle/plugin/filter"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
)

// headerCopies is the first value of the request header name and the
// number of its copies, through the SDK: natively the host is the SDK's
// emulator, which has no ABI to call.
func headerCopies(name string) (string, int) {
	pairs, err := proxywasm.GetHttpRequestHeaders()
	if err != nil {
		return "", 0
	}
	return filter.HeaderCopies(pairs, name)
}
