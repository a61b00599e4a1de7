// Package wasmhost runs a compiled proxy-wasm plugin on wazero the way Envoy
// runs it: several VMs of one module (one per worker thread), each with its
// own instance and linear memory, sharing one process-wide shared-data map
// and one set of metrics.
//
// It owns:
//   - the host side of the proxy-wasm ABI that the Go SDK imports (package
//     env), with Envoy's semantics where they matter to a rate limiter:
//     shared data with one global CAS counter, metrics resolved by name to one
//     process-wide stat, local replies that still go through the filter's
//     response path;
//   - the start-up sequence: a canary VM configured first and discarded, whose
//     failed configure fails New with the plugin's own error log line;
//   - a host-owned clock behind WASI's wall and monotonic clocks, so tests
//     move time explicitly;
//   - a request driver: Do for one stream on one VM, Drive for concurrent load
//     with one goroutine per VM, since each VM is single-threaded.
//   - a count of the calls each VM makes across the ABI (Host.HostCalls),
//     env functions and WASI clock reads, which the benchmarks report per
//     request.
//
// It does not model networking, bodies, trailers, HTTP callouts or queues:
// those imports exist (instantiation never fails) but answer Unimplemented,
// and Module.Stubbed lists them.
package wasmhost
