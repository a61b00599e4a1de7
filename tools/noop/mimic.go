package main

import (
	"github.com/borrowcycle/borrowcycle/plugin/filter"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// The mimic modes (see the package comment). The values are fixed, of the
// sizes Borrowcycle's are in bench-envoy, so Envoy copies and encodes as
// many bytes.
const (
	mimicAllowed  = "allowed"
	mimicRejected = "rejected"
)

var (
	mimicPath   = []string{filter.AccessLogProperty}
	mimicRecord = []byte("limit=default action=allowed reason=ok share=20000000000 remaining=19999999999 client=9f2c61b1e0d1a4f3")
	mimicAdded  = [][2]string{
		{"x-ratelimit-limit", "20000000000"},
		{"x-ratelimit-remaining", "19999999999"},
		{"x-ratelimit-reset", "10"},
	}
	mimicReply = [][2]string{
		{"x-borrowcycle-reason", "over_limit"},
		{"x-envoy-ratelimited", "true"},
		{"retry-after", "3600"},
		{"x-ratelimit-limit", "4"},
		{"x-ratelimit-remaining", "0"},
		{"x-ratelimit-reset", "3600"},
	}
	mimicBody = []byte("borrowcycle: over_limit: this client is over its share for now; retry after the retry-after delay\n")
)

// mimicRequest makes the request-path host calls of the mode.
func mimicRequest(mode string) types.Action {
	_, _ = proxywasm.GetHttpRequestHeaders() // the client id's duplicate check reads the whole map
	_ = wallClockNanos()
	_ = proxywasm.SetProperty(mimicPath, mimicRecord)
	if mode != mimicRejected {
		return types.ActionContinue
	}
	_ = proxywasm.SendHttpResponse(429, mimicReply, mimicBody, -1)
	return types.ActionPause
}

// mimicResponse adds the rate-limit headers of an admitted request.
func mimicResponse() {
	for _, kv := range mimicAdded {
		_ = proxywasm.AddHttpResponseHeader(kv[0], kv[1])
	}
}
