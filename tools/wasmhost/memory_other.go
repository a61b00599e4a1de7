//go:build !linux

package wasmhost

import "context"

// withReservedMemory leaves wazero's own linear memory: one reservation in
// place, as V8 keeps it (see memory_linux.go), is mapped on Linux only.
func withReservedMemory(ctx context.Context) context.Context { return ctx }
