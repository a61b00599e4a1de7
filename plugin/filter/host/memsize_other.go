//go:build !wasm

package host

// linearMemoryBytes has no meaning outside a wasm VM; native tests run the
// plugin as ordinary Go code.
func linearMemoryBytes() uint64 { return 0 }
