package engine

import (
	"errors"
	"math/rand/v2"
	"sync"
)

// ErrInjected is the error a FaultyStore injects.
var ErrInjected = errors.New("store: injected failure")

// Faults says how often a FaultyStore misbehaves; each is a probability in
// [0, 1] drawn from a seeded generator, so a failing run can be replayed.
type Faults struct {
	Mismatch float64 // a Set fails with ErrCASMismatch without writing
	Error    float64 // a Get or Set fails with ErrInjected
	Corrupt  float64 // a Set stores garbage bytes instead of the value (and succeeds)
	Seed     uint64
}

// FaultyStore wraps a Store and injects faults, for testing that the
// protocol keeps its invariants when shared data misbehaves.
type FaultyStore struct {
	inner  Store
	faults Faults
	mu     sync.Mutex
	rng    *rand.Rand
}

// NewFaultyStore wraps inner.
func NewFaultyStore(inner Store, f Faults) *FaultyStore {
	return &FaultyStore{inner: inner, faults: f, rng: rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))}
}

func (s *FaultyStore) roll(p float64) bool {
	if p <= 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.Float64() < p
}

// Get implements Store. Reads are faithful, as in Envoy, where a get copies
// the stored bytes under the shared-data mutex; corruption is injected where
// it can really come from, a writer storing a bad value.
func (s *FaultyStore) Get(key string) ([]byte, uint32, error) {
	if s.roll(s.faults.Error) {
		return nil, 0, ErrInjected
	}
	return s.inner.Get(key)
}

// Set implements Store.
func (s *FaultyStore) Set(key string, value []byte, cas uint32) error {
	if s.roll(s.faults.Error) {
		return ErrInjected
	}
	if s.roll(s.faults.Mismatch) {
		return ErrCASMismatch
	}
	if s.roll(s.faults.Corrupt) {
		value = s.garbage()
	}
	return s.inner.Set(key, value, cas)
}

func (s *FaultyStore) garbage() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := make([]byte, s.rng.IntN(64))
	for i := range b {
		b[i] = byte(s.rng.Uint32())
	}
	return b
}
