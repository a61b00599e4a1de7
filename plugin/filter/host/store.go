package host

import (
	"errors"
	"fmt"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// sharedStore is the engine's Store over proxy-wasm shared data, which
// Envoy keeps per vm_id for the whole process: it is how the VMs of all
// workers agree on one limit. Keys arrive already prefixed by the engine
// (engine.Config.KeyPrefix, "borrowcycle/<name>").
type sharedStore struct {
	// zeroCAS passes CAS 0 through as a compare; see testSupport.ZeroCAS.
	zeroCAS bool
}

var errZeroCAS = errors.New("shared data: refusing cas 0, which the host would treat as an unconditional overwrite")

// Get implements engine.Store. The value may alias host or guest memory
// the caller must not modify, as engine.Store allows.
func (s *sharedStore) Get(key string) ([]byte, uint32, error) {
	v, cas, err := proxywasm.GetSharedData(key)
	if err != nil {
		return nil, 0, storeError("get", key, err)
	}
	return v, cas, nil
}

// Set implements engine.Store.
func (s *sharedStore) Set(key string, value []byte, cas uint32) error {
	if cas == 0 && !s.zeroCAS {
		return errZeroCAS
	}
	if err := proxywasm.SetSharedData(key, value, cas); err != nil {
		return storeError("set", key, err)
	}
	return nil
}

// storeError maps the SDK's status errors onto the engine's sentinels; other
// failures keep their text for the log.
func storeError(op, key string, err error) error {
	switch {
	case errors.Is(err, types.ErrorStatusNotFound):
		return engine.ErrNotFound
	case errors.Is(err, types.ErrorStatusCasMismatch):
		return engine.ErrCASMismatch
	}
	return fmt.Errorf("shared data %s %q: %w", op, key, err)
}
