package host

// linearMemoryPages is the wasm memory.size instruction: the VM's linear
// memory in 64 KiB pages. Implemented in memsize_wasm.s; the Go runtime has
// the same instruction but does not export it, and runtime.MemStats would
// stop the world to report a different quantity (the heap, not the memory
// Envoy has to provide).
func linearMemoryPages() uint32

// linearMemoryBytes is the size of the VM's linear memory, which never
// shrinks.
func linearMemoryBytes() uint64 { return uint64(linearMemoryPages()) << 16 }
