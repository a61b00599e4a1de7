//go:build !wasm

package host

import (
	"context"
	"sort"
	"testing"

	"github.com/borrowcycle/borrowcycle/tools/wasmhost"
	"github.com/tetratelabs/wazero"
)

// requiredExports are what Envoy calls: the ABI version marker, the
// allocator it copies host data through, the reactor initialiser, and the
// callbacks this plugin implements.
var requiredExports = []string{
	"proxy_abi_version_0_2_0", "proxy_on_memory_allocate", "_initialize",
	"proxy_on_vm_start", "proxy_on_configure", "proxy_on_context_create",
	"proxy_on_request_headers", "proxy_on_response_headers", "proxy_on_tick",
	"proxy_on_done", "proxy_on_log", "proxy_on_delete",
}

func TestModuleImportsAndExports(t *testing.T) {
	wasm, err := wasmBytes()
	if err != nil {
		t.Fatalf("reading %s: %v (run make build)", wasmPath, err)
	}
	ctx := context.Background()
	// The interpreter only validates here; it compiles in a fraction of the
	// compiler's time, which matters under the race detector.
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	mod, err := r.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatalf("compiling %s: %v", wasmPath, err)
	}
	var imports []string
	for _, f := range mod.ImportedFunctions() {
		module, name, _ := f.Import()
		imports = append(imports, module+"."+name)
		if module == "env" || module == "wasi_snapshot_preview1" && wasmhost.EnvoyWASI[name] {
			continue
		}
		t.Errorf("import %s.%s is neither env.* nor an allowed WASI function", module, name)
	}
	if len(imports) == 0 {
		t.Fatal("the module imports nothing: not a proxy-wasm module")
	}
	sort.Strings(imports)
	t.Logf("imports: %v", imports)
	exports := mod.ExportedFunctions()
	for _, name := range requiredExports {
		if _, ok := exports[name]; !ok {
			t.Errorf("export %s missing", name)
		}
	}
	if _, ok := mod.ExportedMemories()["memory"]; !ok {
		t.Error("linear memory is not exported as \"memory\"")
	}
}
