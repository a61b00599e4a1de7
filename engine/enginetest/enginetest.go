// Package enginetest holds the engine's test doubles: a store that injects
// faults, a clock that moves only when told, and a store that counts the
// keys written to it. Tests of the engine, of the plugin and the simulator
// use them; they are not part of the engine's API.
package enginetest

import (
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/borrowcycle/borrowcycle/engine/store"
)

// ErrInjected is the error a FaultyStore injects.
var ErrInjected = errors.New("store: injected failure")

// Faults says how often a FaultyStore misbehaves; each is a probability in
// [0, 1] drawn from a seeded generator, so a failing run can be replayed.
type Faults struct {
	Mismatch float64 // a Set fails with store.ErrCASMismatch without writing
	Error    float64 // a Get or Set fails with ErrInjected
	Corrupt  float64 // a Set stores garbage bytes instead of the value (and succeeds)
	Seed     uint64
}

// FaultyStore wraps a Store and injects faults, for testing that the
// protocol keeps its invariants when shared data misbehaves.
type FaultyStore struct {
	inner  store.Store
	faults Faults
	mu     sync.Mutex
	rng    *rand.Rand
}

// NewFaultyStore wraps inner.
func NewFaultyStore(inner store.Store, f Faults) *FaultyStore {
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
		return store.ErrCASMismatch
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

// ManualClock is a clock that moves only when told. It is safe for
// concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a clock reading start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now implements Clock.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d (which may be negative, to model a wall-clock
// step backwards).
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// KeyCounter wraps a store and counts the distinct keys set through it,
// for tests that bound the shared state a limit may create.
type KeyCounter struct {
	store.Store
	mu   sync.Mutex
	keys map[string]struct{}
}

// NewKeyCounter wraps inner.
func NewKeyCounter(inner store.Store) *KeyCounter {
	return &KeyCounter{Store: inner, keys: map[string]struct{}{}}
}

// Set implements store.Store.
func (k *KeyCounter) Set(key string, value []byte, cas uint32) error {
	err := k.Store.Set(key, value, cas)
	if err == nil {
		k.mu.Lock()
		k.keys[key] = struct{}{}
		k.mu.Unlock()
	}
	return err
}

// Keys is how many distinct keys were set.
func (k *KeyCounter) Keys() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.keys)
}
