//go:build !wasm

package host

import (
	"errors"
	"testing"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/borrowcycle/borrowcycle/engine/storetest"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/proxytest"
)

// TestSharedStoreContract runs the engine's Store contract against
// sharedStore over the SDK's emulated shared data (native proxytest: the
// store is host calls, and the host is the same Go emulator in both runners).
// The emulator hands out CAS 0, hence zeroCAS (testSupport.ZeroCAS).
func TestSharedStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) engine.Store {
		_, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().WithVMContext(&vmContext{}))
		t.Cleanup(reset)
		return &sharedStore{zeroCAS: true}
	})
}

func TestSharedStoreRefusesCASZero(t *testing.T) {
	_, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().WithVMContext(&vmContext{}))
	defer reset()
	s := &sharedStore{}
	if err := s.Set("k", []byte("v"), 0); !errors.Is(err, errZeroCAS) {
		t.Fatalf("Set with cas 0 without zero_cas: %v, want errZeroCAS", err)
	}
	if _, _, err := s.Get("k"); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("the refused Set wrote anyway: Get error %v", err)
	}
}

// corruptSharedData overwrites key with bytes no engine version decodes.
// It calls the SDK from the test process, which reaches the same emulated
// shared data as the plugin under both runners.
func corruptSharedData(t *testing.T, key string) {
	t.Helper()
	_, cas, err := proxywasm.GetSharedData(key)
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	if err := proxywasm.SetSharedData(key, []byte{0xee, 1, 2, 3}, cas); err != nil {
		t.Fatalf("corrupting %s: %v", key, err)
	}
}
