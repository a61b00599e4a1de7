package wasmhost

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// envoyMemoryLimitPages is Envoy's cap on a VM's linear memory: 1 GiB.
const envoyMemoryLimitPages = 1 << 14

// Import names one function a module imports.
type Import struct{ Module, Name string }

func (i Import) String() string { return i.Module + "." + i.Name }

// Module is a compiled plugin with its wazero runtime: the WASI and env host
// modules, and the code every VM of every Host made from it instantiates.
// Compile once, then make as many Hosts as needed; they run concurrently.
type Module struct {
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	imports  []Import
	stubbed  []Import
	names    atomic.Uint64 // makes instance names unique across Hosts
}

// CompileOptions tunes Compile.
type CompileOptions struct {
	// CacheDir, when set, keeps wazero's compiled code on disk, so that
	// later processes (the next `go test`) skip the compilation.
	CacheDir string
}

var (
	cacheMu  sync.Mutex
	memCache = wazero.NewCompilationCache()
	dirCache = map[string]wazero.CompilationCache{}
)

// compilationCache returns one cache per directory for the whole process, so
// every Compile of the same bytes after the first is a cache hit.
func compilationCache(dir string) (wazero.CompilationCache, error) {
	if dir == "" {
		return memCache, nil
	}
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if c, ok := dirCache[dir]; ok {
		return c, nil
	}
	c, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		return nil, err
	}
	dirCache[dir] = c
	return c, nil
}

// Compile compiles wasm and prepares its imports: WASI from wazero, the
// proxy-wasm env functions this package implements, and a stub answering
// Unimplemented for every other function the module imports, so that
// instantiation never fails on an import the host does not model.
func Compile(ctx context.Context, wasm []byte, opts CompileOptions) (*Module, error) {
	cache, err := compilationCache(opts.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("wasmhost: compilation cache: %w", err)
	}
	cfg := wazero.NewRuntimeConfig().
		WithCompilationCache(cache).
		WithMemoryLimitPages(envoyMemoryLimitPages)
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	m, err := compileIn(ctx, rt, wasm)
	if err != nil {
		_ = rt.Close(ctx)
		return nil, err
	}
	return m, nil
}

func compileIn(ctx context.Context, rt wazero.Runtime, wasm []byte) (*Module, error) {
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("wasmhost: compile: %w", err)
	}
	exports := compiled.ExportedFunctions()
	for _, name := range []string{"proxy_abi_version_0_2_0", "proxy_on_memory_allocate", "proxy_on_context_create"} {
		if _, ok := exports[name]; !ok {
			return nil, fmt.Errorf("wasmhost: not a proxy-wasm 0.2 module: no export %q", name)
		}
	}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		return nil, fmt.Errorf("wasmhost: wasi: %w", err)
	}
	m := &Module{rt: rt, compiled: compiled}
	byModule := map[string][]api.FunctionDefinition{}
	seen := map[Import]bool{}
	for _, def := range compiled.ImportedFunctions() {
		mod, name, _ := def.Import()
		if seen[Import{mod, name}] { // a module may import one function twice
			continue
		}
		seen[Import{mod, name}] = true
		m.imports = append(m.imports, Import{mod, name})
		if mod != wasi_snapshot_preview1.ModuleName {
			byModule[mod] = append(byModule[mod], def)
		}
	}
	for mod, defs := range byModule {
		if err := m.instantiateHostModule(ctx, mod, defs); err != nil {
			return nil, err
		}
	}
	sortImports(m.imports)
	sortImports(m.stubbed)
	return m, nil
}

// instantiateHostModule provides every function in defs: the real
// implementation when this package has one with the same signature, a stub
// otherwise.
func (m *Module) instantiateHostModule(ctx context.Context, mod string, defs []api.FunctionDefinition) error {
	b := m.rt.NewHostModuleBuilder(mod)
	for _, def := range defs {
		_, name, _ := def.Import()
		if f, ok := envFuncs[name]; ok && mod == "env" && sameSignature(def, f) {
			b.NewFunctionBuilder().WithGoModuleFunction(f.goFunc(callSlot[name]), f.params, f.results).Export(name)
			continue
		}
		m.stubbed = append(m.stubbed, Import{mod, name})
		b.NewFunctionBuilder().
			WithGoModuleFunction(stub(Import{mod, name}, len(def.ResultTypes())), def.ParamTypes(), def.ResultTypes()).
			Export(name)
	}
	if _, err := b.Instantiate(ctx); err != nil {
		return fmt.Errorf("wasmhost: host module %q: %w", mod, err)
	}
	return nil
}

func sameSignature(def api.FunctionDefinition, f envFunc) bool {
	return equalTypes(def.ParamTypes(), f.params) && equalTypes(def.ResultTypes(), f.results)
}

func equalTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// stub answers Unimplemented (or nothing, for a function without results)
// and records the call, so a test can require that a plugin never relies
// on an import the host does not model.
func stub(imp Import, results int) api.GoModuleFunction {
	return api.GoModuleFunc(func(ctx context.Context, _ api.Module, stack []uint64) {
		if vm := vmFrom(ctx); vm != nil {
			vm.host.countStubCall(imp)
		}
		for i := 0; i < results; i++ {
			stack[i] = 0
		}
		if results > 0 {
			stack[0] = uint64(StatusUnimplemented)
		}
	})
}

// Imports lists every function the module imports, sorted.
func (m *Module) Imports() []Import { return append([]Import(nil), m.imports...) }

// Stubbed lists the imports the host provides only as Unimplemented stubs.
func (m *Module) Stubbed() []Import { return append([]Import(nil), m.stubbed...) }

// Close releases the runtime and every VM still instantiated from it.
func (m *Module) Close(ctx context.Context) error { return m.rt.Close(ctx) }

func sortImports(s []Import) {
	sort.Slice(s, func(i, j int) bool {
		if s[i].Module != s[j].Module {
			return s[i].Module < s[j].Module
		}
		return s[i].Name < s[j].Name
	})
}
