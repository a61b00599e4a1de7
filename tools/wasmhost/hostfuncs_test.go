package wasmhost

import (
	"context"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/tetratelabs/wazero/api"
)

// guestCall runs one env function directly, as the guest would call it,
// with arguments that point into the VM's real linear memory.
type guestCall struct {
	t  *testing.T
	vm *VM
}

// put copies b into memory the guest allocated and returns its address.
func (g guestCall) put(b []byte) uint64 {
	g.t.Helper()
	res, err := g.vm.exports.memoryAllocate.Call(g.vm.ctx, uint64(len(b)+1))
	if err != nil || !g.vm.mod.Memory().Write(uint32(res[0]), b) {
		g.t.Fatalf("allocate guest memory: %v", err)
	}
	return res[0]
}

func (g guestCall) call(name string, args ...uint64) Status {
	g.t.Helper()
	f, ok := envFuncs[name]
	if !ok {
		g.t.Fatalf("no env function %s", name)
	}
	stack := make([]uint64, len(f.params))
	copy(stack, args)
	return f.fn(g.vm, g.vm.mod.Memory(), stack)
}

func (g guestCall) u32(addr uint64) uint32 {
	v, _ := g.vm.mod.Memory().ReadUint32Le(uint32(addr))
	return v
}

func (g guestCall) bytes(ptrAddr, sizeAddr uint64) []byte {
	b, _ := g.vm.mod.Memory().Read(g.u32(ptrAddr), g.u32(sizeAddr))
	return b
}

func newGuestCall(t *testing.T, h *Host, vm int) guestCall {
	v := h.VM(vm)
	v.mu.Lock()
	t.Cleanup(v.mu.Unlock)
	return guestCall{t, v}
}

func TestHostSharedDataThroughGuestMemory(t *testing.T) {
	h := newHost(t, noopWasm, Options{VMs: 2})
	g := newGuestCall(t, h, 0)
	key, val := g.put([]byte("k")), g.put([]byte("v1"))
	out := g.put(make([]byte, 12)) // value pointer, value size, cas
	if st := g.call("proxy_get_shared_data", key, 1, out, out+4, out+8); st != StatusNotFound {
		t.Fatalf("get missing: %v", st)
	}
	if st := g.call("proxy_set_shared_data", key, 1, val, 2, 4242); st != StatusOK {
		t.Fatalf("set missing key with arbitrary cas: %v", st)
	}
	if st := g.call("proxy_get_shared_data", key, 1, out, out+4, out+8); st != StatusOK {
		t.Fatalf("get: %v", st)
	}
	if got := string(g.bytes(out, out+4)); got != "v1" || g.u32(out+8) != 1 {
		t.Fatalf("get returned %q cas %d, want \"v1\" cas 1", got, g.u32(out+8))
	}
	if g.u32(out) == uint32(val) {
		t.Fatal("get handed back the setter's buffer instead of a fresh guest allocation")
	}
	if st := g.call("proxy_set_shared_data", key, 1, val, 1, 99); st != StatusCasMismatch {
		t.Fatalf("stale cas: %v", st)
	}
	if st := g.call("proxy_set_shared_data", key, 1, val, 1, 0); st != StatusOK {
		t.Fatalf("cas 0: %v", st)
	}
	// The other VM sees the same store.
	if v, cas, _ := h.Shared().Get("k"); string(v) != "v" || cas != 2 {
		t.Fatalf("store holds %q cas %d", v, cas)
	}
	if st := g.call("proxy_get_shared_data", 0xfffffff0, 100, out, out+4, out+8); st != StatusInvalidMemoryAccess {
		t.Fatalf("key out of bounds: %v", st)
	}
}

func TestHostHeaderMapsThroughGuestMemory(t *testing.T) {
	h := newHost(t, noopWasm, Options{VMs: 1})
	g := newGuestCall(t, h, 0)
	out := g.put(make([]byte, 8))
	key := g.put([]byte("X-Client-Id"))
	if st := g.call("proxy_get_header_map_value", mapRequestHeaders, key, 11, out, out+4); st != StatusBadArgument {
		t.Fatalf("header read outside a stream: %v", st)
	}
	g.vm.stream = &stream{request: [][2]string{{"x-client-id", "a"}, {"x-client-id", "b"}}}
	defer func() { g.vm.stream = nil }()
	if st := g.call("proxy_get_header_map_value", mapRequestHeaders, key, 11, out, out+4); st != StatusOK || string(g.bytes(out, out+4)) != "a" {
		t.Fatalf("get first value: %v %q", st, g.bytes(out, out+4))
	}
	if st := g.call("proxy_get_header_map_value", mapResponseHeaders, key, 11, out, out+4); st != StatusBadArgument {
		t.Fatalf("response map during the request: %v", st)
	}
	val := g.put([]byte("z"))
	g.call("proxy_replace_header_map_value", mapRequestHeaders, key, 11, val, 1)
	g.call("proxy_add_header_map_value", mapRequestHeaders, g.put([]byte("New")), 3, val, 1)
	want := [][2]string{{"x-client-id", "z"}, {"x-client-id", "b"}, {"new", "z"}}
	if !reflect.DeepEqual(g.vm.stream.request, want) {
		t.Fatalf("after replace and add: %v", g.vm.stream.request)
	}
	if st := g.call("proxy_get_header_map_pairs", mapRequestHeaders, out, out+4); st != StatusOK {
		t.Fatalf("pairs: %v", st)
	}
	if got, _ := decodePairs(g.bytes(out, out+4)); !reflect.DeepEqual(got, want) {
		t.Fatalf("pairs read back: %v", got)
	}
	g.call("proxy_remove_header_map_value", mapRequestHeaders, key, 11)
	if want := [][2]string{{"new", "z"}}; !reflect.DeepEqual(g.vm.stream.request, want) {
		t.Fatalf("after remove: %v", g.vm.stream.request)
	}
	set := encodePairs([][2]string{{"A", "1"}})
	g.call("proxy_set_header_map_pairs", mapRequestHeaders, g.put(set), uint64(len(set)))
	if want := [][2]string{{"a", "1"}}; !reflect.DeepEqual(g.vm.stream.request, want) {
		t.Fatalf("after set pairs: %v", g.vm.stream.request)
	}
}

func TestHostMetricsThroughGuestMemory(t *testing.T) {
	h := newHost(t, noopWasm, Options{VMs: 2})
	ids := make([]uint32, 2)
	for vm := range ids {
		g := newGuestCall(t, h, vm)
		name, out := g.put([]byte("m.requests")), g.put(make([]byte, 8))
		if st := g.call("proxy_define_metric", MetricCounter, name, 10, out); st != StatusOK {
			t.Fatalf("define: %v", st)
		}
		ids[vm] = g.u32(out)
		if st := g.call("proxy_increment_metric", uint64(ids[vm]), uint64(vm+1)); st != StatusOK {
			t.Fatalf("increment: %v", st)
		}
		if st := g.call("proxy_get_metric", uint64(ids[vm]), out); st != StatusOK {
			t.Fatalf("get: %v", st)
		}
		v, _ := g.vm.mod.Memory().ReadUint64Le(uint32(out))
		if want := []uint64{1, 3}[vm]; v != want {
			t.Fatalf("vm %d reads %d, want %d: one stat for both VMs", vm, v, want)
		}
	}
	if ids[0] != ids[1] || h.Metric("m.requests") != 3 {
		t.Fatalf("ids %v, value %d", ids, h.Metric("m.requests"))
	}
}

// A module importing functions the host does not implement, or implements
// with another signature, still instantiates; the stubs answer
// Unimplemented and are counted.
func TestUnimplementedImportsAreStubbed(t *testing.T) {
	m, err := Compile(context.Background(), stubModule(), CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	want := []Import{{"env", "proxy_http_call"}, {"env", "proxy_log"}, {"other", "f"}}
	if got := m.Stubbed(); !reflect.DeepEqual(got, want) {
		t.Fatalf("stubbed %v, want %v", got, want)
	}
	h, err := New(context.Background(), m, Options{VMs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	res, err := h.VM(0).Call("call_stub")
	if err != nil || len(res) != 1 || Status(res[0]) != StatusUnimplemented {
		t.Fatalf("stub returned %v %v", res, err)
	}
	if calls := h.StubCalls(); calls[Import{"env", "proxy_http_call"}] != 1 {
		t.Fatalf("stub calls %v", calls)
	}
}

// stubModule assembles a minimal proxy-wasm-shaped module by hand: three
// odd imports, the three exports Compile requires, and call_stub, which
// calls env.proxy_http_call with zeros.
func stubModule() []byte {
	i32, i64 := byte(api.ValueTypeI32), byte(api.ValueTypeI64)
	funcType := func(params []byte, results ...byte) []byte {
		b := append([]byte{0x60, byte(len(params))}, params...)
		return append(append(b, byte(len(results))), results...)
	}
	ten := make([]byte, 10)
	for i := range ten {
		ten[i] = i32
	}
	types := [][]byte{
		funcType(ten, i32),         // 0: proxy_http_call
		funcType([]byte{i64}),      // 1: proxy_log, wrong signature on purpose
		funcType(nil),              // 2: other.f, abi version
		funcType([]byte{i32}, i32), // 3: memory allocate
		funcType([]byte{i32, i32}), // 4: context create
		funcType(nil, i32),         // 5: call_stub
	}
	imports := [][]byte{
		importEntry("env", "proxy_http_call", 0), importEntry("env", "proxy_log", 1), importEntry("other", "f", 2),
	}
	funcs := [][]byte{{2}, {3}, {4}, {5}} // functions 3..6
	exports := [][]byte{
		exportEntry("proxy_abi_version_0_2_0", 3), exportEntry("proxy_on_memory_allocate", 4),
		exportEntry("proxy_on_context_create", 5), exportEntry("call_stub", 6),
	}
	callStub := []byte{0}
	for i := 0; i < 10; i++ {
		callStub = append(callStub, 0x41, 0) // i32.const 0
	}
	callStub = append(callStub, 0x10, 0, 0x0b) // call 0; end
	codes := [][]byte{
		{0, 0x0b},          // abi version: nothing
		{0, 0x20, 0, 0x0b}, // allocate: return the size (never used)
		{0, 0x0b},          // context create: nothing
		callStub,
	}
	for i, c := range codes {
		codes[i] = append([]byte{byte(len(c))}, c...)
	}
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	for _, s := range []struct {
		id      byte
		entries [][]byte
	}{{1, types}, {2, imports}, {3, funcs}, {7, exports}, {10, codes}} {
		body := []byte{byte(len(s.entries))}
		for _, e := range s.entries {
			body = append(body, e...)
		}
		out = append(out, s.id)
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	return out
}

func wasmName(s string) []byte { return append([]byte{byte(len(s))}, s...) }

func importEntry(mod, name string, typ byte) []byte {
	return append(append(wasmName(mod), wasmName(name)...), 0, typ)
}

func exportEntry(name string, fn byte) []byte { return append(wasmName(name), 0, fn) }
