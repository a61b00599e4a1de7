// Package store is shared state shaped like proxy-wasm shared data, the
// one thing the engine and its test support both need: the Store interface,
// its two errors, and MemStore, an in-memory Store with Envoy's exact
// semantics. It imports nothing of the engine, so that test support can
// wrap stores without importing the engine.
package store

import (
	"errors"
	"sync"
)

// Store is shared state shaped like proxy-wasm shared data: a process-wide map
// of keys to byte values, each with a CAS number.
//
// The protocol relies only on what Envoy and the SDK's emulator both
// guarantee, which the contract suite in engine/storetest checks:
//   - Get on a missing key returns ErrNotFound;
//   - Set with the CAS returned by the latest Get succeeds, and changes the CAS;
//   - Set with any other non-zero CAS on an existing key returns ErrCASMismatch;
//   - Set on a missing key succeeds whatever the CAS.
//
// It never passes CAS 0, which Envoy treats as "overwrite unconditionally".
// Values returned by Get must not be modified by the caller (a host may hand
// out its own buffer).
type Store interface {
	Get(key string) (value []byte, cas uint32, err error)
	Set(key string, value []byte, cas uint32) error
}

var (
	// ErrNotFound is returned by Get for a key that was never set.
	ErrNotFound = errors.New("store: key not found")
	// ErrCASMismatch is returned by Set when the key changed since the CAS
	// was read.
	ErrCASMismatch = errors.New("store: cas mismatch")
)

// MemStore is an in-memory Store with Envoy's exact shared-data semantics
// (proxy-wasm-cpp-host src/shared_data.cc): one mutex, one global CAS counter
// starting at 1 and skipping 0, Set with CAS 0 overwriting, Set on a missing
// key succeeding whatever the CAS, no delete, and Get returning a copy. It is
// safe for concurrent use; goroutines play the role of Envoy's workers.
type MemStore struct {
	mu      sync.Mutex
	data    map[string]memEntry
	nextCAS uint32
}

type memEntry struct {
	value []byte
	cas   uint32
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{data: make(map[string]memEntry), nextCAS: 1}
}

// Get implements Store.
func (m *MemStore) Get(key string) ([]byte, uint32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.data[key]
	if !ok {
		return nil, 0, ErrNotFound
	}
	return append([]byte(nil), e.value...), e.cas, nil
}

// Set implements Store.
func (m *MemStore) Set(key string, value []byte, cas uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.data[key]; ok && cas != 0 && cas != e.cas {
		return ErrCASMismatch
	}
	m.data[key] = memEntry{value: append([]byte(nil), value...), cas: m.bumpCAS()}
	return nil
}

// bumpCAS hands out the next CAS, skipping 0 on wrap-around as Envoy does.
func (m *MemStore) bumpCAS() uint32 {
	c := m.nextCAS
	m.nextCAS++
	if m.nextCAS == 0 {
		m.nextCAS = 1
	}
	return c
}
