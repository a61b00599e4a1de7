package host

import "github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"

// guard is the one panic boundary of a callback, deferred directly by it:
// nothing may panic across the ABI, where it would trap the VM and take the
// worker's filter chain with it. It logs the panic, counts it in the
// plugin's panics metric when the plugin has metrics (the count reaches
// the host at the next tick, like every counter), and runs fallback (when
// not nil) to set the callback's result.
func guard(p *pluginContext, callback string, fallback func()) {
	r := recover()
	if r == nil {
		return
	}
	proxywasm.LogErrorf("borrowcycle: panic in %s: %v", callback, r)
	if p != nil && p.metrics != nil {
		p.metrics.panics.pending++
	}
	if fallback != nil {
		fallback()
	}
}
