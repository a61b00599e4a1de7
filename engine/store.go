package engine

import (
	"math"

	"github.com/borrowcycle/borrowcycle/engine/store"
)

// Store is shared state shaped like proxy-wasm shared data (see package
// store, which holds the contract the engine relies on).
type Store = store.Store

var (
	// ErrNotFound is returned by Get for a key that was never set.
	ErrNotFound = store.ErrNotFound
	// ErrCASMismatch is returned by Set when the key changed since the CAS
	// was read.
	ErrCASMismatch = store.ErrCASMismatch
)

// MemStore is an in-memory Store with Envoy's exact shared-data semantics.
type MemStore = store.MemStore

// NewMemStore returns an empty store.
func NewMemStore() *MemStore { return store.NewMemStore() }

// casCreate is the CAS used to create a key that was just seen missing. On a
// missing key any CAS succeeds; on a key that another worker created in the
// meantime it fails, unless that key's CAS is exactly 2^32-1 (Envoy's CAS
// counter is global, so that is one set in four billion, and only in the
// microseconds of a creation race). CAS 0 would overwrite the other worker's
// value, which is why it is never used.
const casCreate = math.MaxUint32
