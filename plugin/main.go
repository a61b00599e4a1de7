// Command plugin is Borrowcycle's Envoy HTTP filter: a proxy-wasm module,
// built with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared, that puts every
// request through the fair-share limiter of package engine.
//
// The package owns everything between Envoy and the engine: parsing the
// plugin configuration (config.go), extracting the client id (clientid.go),
// the engine.Store over proxy-wasm shared data (store.go), local replies and
// rate-limit headers (responses.go), metrics and the engine Observer
// (metrics.go), and the VM, plugin and HTTP contexts (plugin.go). The
// limiting itself (cycles, shares, leases) lives in engine.
package main

import "github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"

// main is never called: a c-shared wasip1 module is started with _initialize,
// which runs init.
func main() {}

func init() { proxywasm.SetVMContext(&vmContext{}) }
