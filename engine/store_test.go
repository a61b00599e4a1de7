package engine_test

import (
	"errors"
	"testing"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/borrowcycle/borrowcycle/engine/enginetest"
	"github.com/borrowcycle/borrowcycle/engine/storetest"
)

func TestMemStoreContract(t *testing.T) {
	storetest.Run(t, func(*testing.T) engine.Store { return engine.NewMemStore() })
}

func TestFaultFreeFaultyStoreContract(t *testing.T) {
	storetest.Run(t, func(*testing.T) engine.Store {
		return enginetest.NewFaultyStore(engine.NewMemStore(), enginetest.Faults{})
	})
}

// Envoy-specific semantics the contract does not demand but MemStore must
// model, because they are what makes naive protocols wrong in Envoy.
func TestMemStoreIsEnvoyFaithful(t *testing.T) {
	t.Run("cas zero overwrites unconditionally", func(t *testing.T) {
		s := engine.NewMemStore()
		mustSet(t, s, "k", "a", 0)
		mustSet(t, s, "k", "b", 0)
		if v, _, _ := s.Get("k"); string(v) != "b" {
			t.Fatalf("value = %q, want b", v)
		}
	})
	t.Run("cas counter is global across keys", func(t *testing.T) {
		s := engine.NewMemStore()
		mustSet(t, s, "a", "1", 0)
		mustSet(t, s, "b", "1", 0)
		_, casA, _ := s.Get("a")
		_, casB, _ := s.Get("b")
		if casA != 1 || casB != 2 {
			t.Fatalf("cas a=%d b=%d, want 1 and 2 from one counter", casA, casB)
		}
	})
	t.Run("get returns a copy", func(t *testing.T) {
		s := engine.NewMemStore()
		mustSet(t, s, "k", "abc", 0)
		v, _, _ := s.Get("k")
		v[0] = 'X'
		if w, _, _ := s.Get("k"); string(w) != "abc" {
			t.Fatalf("store changed through a returned value: %q", w)
		}
	})
}

func TestFaultyStoreInjects(t *testing.T) {
	s := enginetest.NewFaultyStore(engine.NewMemStore(), enginetest.Faults{Error: 1})
	if _, _, err := s.Get("k"); !errors.Is(err, enginetest.ErrInjected) {
		t.Fatalf("Get error = %v, want injected", err)
	}
	s = enginetest.NewFaultyStore(engine.NewMemStore(), enginetest.Faults{Mismatch: 1})
	if err := s.Set("k", []byte("v"), 1); !errors.Is(err, engine.ErrCASMismatch) {
		t.Fatalf("Set error = %v, want mismatch", err)
	}
}

func mustSet(t *testing.T, s engine.Store, key, v string, cas uint32) {
	t.Helper()
	if err := s.Set(key, []byte(v), cas); err != nil {
		t.Fatal(err)
	}
}
