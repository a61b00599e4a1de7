package wasmhost

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// The modules under test are built by `make build`; the tests compile each
// once per test binary and share it between Hosts.
const (
	noopWasm   = "noop.wasm"
	pluginWasm = "borrowcycle.wasm"
)

var (
	modulesMu sync.Mutex
	modules   = map[string]*Module{}
)

// loadModule returns the compiled module build/<name>. A missing file is a
// failure, not a skip: `make test` builds it first, so its absence means the
// build is broken or was not run.
func loadModule(tb testing.TB, name string) *Module {
	tb.Helper()
	modulesMu.Lock()
	defer modulesMu.Unlock()
	if m, ok := modules[name]; ok {
		return m
	}
	path := filepath.Join("..", "..", "build", name)
	// The Makefile names the plugin by this variable for the e2e suite; a
	// developer can point it at another build of the plugin.
	if env := os.Getenv("BORROWCYCLE_WASM"); name == pluginWasm && env != "" {
		path = env
	}
	wasm, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%s is missing (%v): run `make build` first", path, err)
	}
	m, err := Compile(context.Background(), wasm, CompileOptions{CacheDir: cacheDir()})
	if err != nil {
		tb.Fatalf("compile %s: %v", path, err)
	}
	modules[name] = m
	return m
}

// cacheDir keeps wazero's compiled code between test runs: compiling a Go
// module under the race detector takes seconds.
func cacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "borrowcycle", "wazero")
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, mod := range modules {
		_ = mod.Close(context.Background())
	}
	os.Exit(code)
}

// newHost starts a host on the named module and closes it with the test.
func newHost(tb testing.TB, name string, opts Options) *Host {
	tb.Helper()
	h, err := New(context.Background(), loadModule(tb, name), opts)
	if err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	tb.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// driveAroundTrap sends n requests from client a round-robin over three
// VMs of which VM 1 has trapped. Every request VM 1 gets must fail; every
// other response goes to healthy (one at a time), and the number of
// responses healthy accepted is returned.
func driveAroundTrap(t *testing.T, h *Host, n int, healthy func(Result) bool) int {
	t.Helper()
	var mu sync.Mutex
	accepted := 0
	h.Drive(n, RoundRobin(3), func(int) [][2]string { return Request("/", "a") }, func(i int, r Result) {
		mu.Lock()
		defer mu.Unlock()
		if r.VM == 1 {
			if r.Err == nil {
				t.Errorf("the trapped VM served request %d: %v", i, r)
			}
			return
		}
		if healthy(r) {
			accepted++
		}
	})
	return accepted
}
