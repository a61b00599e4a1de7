package wasmhost

import (
	"context"
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// withReservedMemory makes the VMs instantiated under ctx keep their linear
// memory in one reservation of its maximum size, as V8 does in Envoy: a
// memory.grow then maps pages in place. wazero's default grows a Go slice,
// which copies the whole memory at each growth (tens of milliseconds at
// tens of megabytes) and leaves the new copy's pages to fault in over the
// next callbacks, a cost Envoy never pays. The reservation is virtual
// (MAP_NORESERVE): a page costs memory once it is touched.
func withReservedMemory(ctx context.Context) context.Context {
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(reserve))
}

// reserve maps max bytes for a memory of at most max bytes, or, when the
// mapping fails, grows a slice as wazero would.
func reserve(_, max uint64) experimental.LinearMemory {
	buf, err := syscall.Mmap(-1, 0, int(max), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_NORESERVE)
	if err != nil {
		return &growing{max: max}
	}
	return &reserved{buf: buf}
}

// reserved is a linear memory in place in one mapping.
type reserved struct{ buf []byte }

func (m *reserved) Reallocate(size uint64) []byte {
	if size > uint64(len(m.buf)) {
		return nil
	}
	return m.buf[:size]
}

func (m *reserved) Free() {
	if m.buf != nil {
		_ = syscall.Munmap(m.buf)
		m.buf = nil
	}
}

// growing is a linear memory in a slice that is copied as it grows.
type growing struct {
	buf []byte
	max uint64
}

func (m *growing) Reallocate(size uint64) []byte {
	if size > m.max {
		return nil
	}
	if size > uint64(cap(m.buf)) {
		m.buf = append(m.buf[:cap(m.buf)], make([]byte, size-uint64(cap(m.buf)))...)
	}
	m.buf = m.buf[:size]
	return m.buf
}

func (m *growing) Free() { m.buf = nil }
