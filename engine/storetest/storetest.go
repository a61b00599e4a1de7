// Package storetest is the contract every store.Store must meet: exactly
// the shared-data behaviour the engine's protocol relies on, which Envoy's
// shared data and the SDK's emulator both provide. Run it from the tests of
// any Store implementation.
package storetest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/borrowcycle/borrowcycle/engine/store"
)

// Run checks newStore's stores against the contract. Each subtest gets a
// fresh store.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	for _, c := range contract {
		t.Run(c.name, func(t *testing.T) { c.check(t, newStore(t)) })
	}
}

var contract = []struct {
	name  string
	check func(t *testing.T, s store.Store)
}{
	{"missing key is not found", func(t *testing.T, s store.Store) {
		_, _, err := s.Get("storetest/missing")
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Get(missing) error = %v, want ErrNotFound", err)
		}
	}},
	{"set on a missing key succeeds whatever the cas", func(t *testing.T, s store.Store) {
		for i, cas := range []uint32{1, 12345, 1<<32 - 1} {
			key := "storetest/create/" + string(rune('a'+i))
			mustSet(t, s, key, []byte("v"), cas)
			got := mustGet(t, s, key)
			if !bytes.Equal(got.value, []byte("v")) {
				t.Fatalf("Get(%s) = %q, want %q", key, got.value, "v")
			}
		}
	}},
	{"set with the latest cas succeeds and moves the cas", func(t *testing.T, s store.Store) {
		mustSet(t, s, "storetest/k", []byte("one"), 1<<32-1)
		first := mustGet(t, s, "storetest/k")
		mustSet(t, s, "storetest/k", []byte("two"), first.cas)
		second := mustGet(t, s, "storetest/k")
		if !bytes.Equal(second.value, []byte("two")) {
			t.Fatalf("value = %q, want %q", second.value, "two")
		}
		if second.cas == first.cas {
			t.Fatalf("cas did not change on a successful set: %d", first.cas)
		}
	}},
	{"set with a stale cas fails and keeps the value", func(t *testing.T, s store.Store) {
		mustSet(t, s, "storetest/k", []byte("one"), 1<<32-1)
		stale := mustGet(t, s, "storetest/k")
		mustSet(t, s, "storetest/k", []byte("two"), stale.cas)
		err := s.Set("storetest/k", []byte("three"), stale.cas)
		if !errors.Is(err, store.ErrCASMismatch) {
			t.Fatalf("Set with stale cas error = %v, want ErrCASMismatch", err)
		}
		if got := mustGet(t, s, "storetest/k"); !bytes.Equal(got.value, []byte("two")) {
			t.Fatalf("value after failed set = %q, want %q", got.value, "two")
		}
	}},
	{"creating an existing key with the create cas fails", func(t *testing.T, s store.Store) {
		mustSet(t, s, "storetest/k", []byte("first"), 1<<32-1)
		cur := mustGet(t, s, "storetest/k")
		mustSet(t, s, "storetest/k", []byte("second"), cur.cas) // its cas moves off the create cas
		err := s.Set("storetest/k", []byte("late creator"), 1<<32-1)
		if !errors.Is(err, store.ErrCASMismatch) {
			t.Fatalf("late create error = %v, want ErrCASMismatch", err)
		}
	}},
	{"keys are independent", func(t *testing.T, s store.Store) {
		mustSet(t, s, "storetest/a", []byte("a"), 1<<32-1)
		mustSet(t, s, "storetest/b", []byte("b"), 1<<32-1)
		a := mustGet(t, s, "storetest/a")
		b := mustGet(t, s, "storetest/b")
		mustSet(t, s, "storetest/b", []byte("b2"), b.cas)
		mustSet(t, s, "storetest/a", []byte("a2"), a.cas) // b's change does not invalidate a's cas
		if got := mustGet(t, s, "storetest/a"); !bytes.Equal(got.value, []byte("a2")) {
			t.Fatalf("a = %q, want a2", got.value)
		}
	}},
	{"binary values round-trip", func(t *testing.T, s store.Store) {
		v := []byte{0, 1, 2, 0xff, 0, '\n', '\r'}
		mustSet(t, s, "storetest/bin", v, 1<<32-1)
		if got := mustGet(t, s, "storetest/bin"); !bytes.Equal(got.value, v) {
			t.Fatalf("value = %v, want %v", got.value, v)
		}
	}},
}

type entry struct {
	value []byte
	cas   uint32
}

func mustGet(t *testing.T, s store.Store, key string) entry {
	t.Helper()
	v, cas, err := s.Get(key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	return entry{append([]byte(nil), v...), cas}
}

func mustSet(t *testing.T, s store.Store, key string, v []byte, cas uint32) {
	t.Helper()
	if err := s.Set(key, v, cas); err != nil {
		t.Fatalf("Set(%s, cas=%d): %v", key, cas, err)
	}
}
