//go:build !wasm

package host

import (
	"github.com/borrowcycle/borrowcycle/plugin/filter"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
)

// send sends r through the SDK: natively the host is the SDK's emulator,
// which has no ABI to call.
func (s *replier) send(r filter.Reply) error {
	return proxywasm.SendHttpResponse(r.Status, r.Headers, r.Body, -1)
}
