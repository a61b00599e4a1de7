package wasmhost

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/tetratelabs/wazero/api"
)

// envFunc is one proxy-wasm host function. fn reads its arguments from
// stack and returns the call's status; the wrapper stores it as the result.
type envFunc struct {
	params  []api.ValueType
	results []api.ValueType
	fn      func(vm *VM, mem api.Memory, stack []uint64) Status
}

// goFunc is f as a wazero host function, counted in slot (see callNames).
func (f envFunc) goFunc(slot int) api.GoModuleFunction {
	return api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		vm := vmFrom(ctx)
		if vm == nil { // called outside a VM call: cannot happen through Host
			stack[0] = uint64(StatusInternalFailure)
			return
		}
		vm.calls[slot].Add(1)
		stack[0] = uint64(f.fn(vm, mod.Memory(), stack))
	})
}

// callNames names the slots of VM.calls: every env function of envFuncs,
// in order, then the WASI clock reads (one slot per clock).
var callNames, callSlot = func() ([]string, map[string]int) {
	names := make([]string, 0, len(envFuncs)+2)
	for name := range envFuncs {
		names = append(names, name)
	}
	sort.Strings(names)
	names = append(names, "clock_time_get(realtime)", "clock_time_get(monotonic)")
	slot := make(map[string]int, len(names))
	for i, n := range names {
		slot[n] = i
	}
	return names, slot
}()

// Slots of the WASI clock reads in VM.calls.
var slotWalltime, slotNanotime = len(envFuncs), len(envFuncs) + 1

var i32, i64 = api.ValueTypeI32, api.ValueTypeI64

func i32s(n int) []api.ValueType {
	t := make([]api.ValueType, n)
	for i := range t {
		t[i] = i32
	}
	return t
}

// fn builds an envFunc taking n i32 parameters and returning a status.
func fn(n int, f func(vm *VM, mem api.Memory, stack []uint64) Status) envFunc {
	return envFunc{params: i32s(n), results: i32s(1), fn: f}
}

// onHeaderMap builds an envFunc like fn whose first parameter is a header
// map type: f gets the stream's map of that type.
func onHeaderMap(n int, f func(vm *VM, mem api.Memory, stack []uint64, m *[][2]string) Status) envFunc {
	return fn(n, func(vm *VM, mem api.Memory, s []uint64) Status {
		m, status := vm.headerMap(arg(s, 0))
		if status != StatusOK {
			return status
		}
		return f(vm, mem, s, m)
	})
}

// envFuncs are the env imports of the Go SDK (proxywasm/internal/
// abi_hostcalls.go) that this host implements. Queues, HTTP calls, foreign
// functions and body buffers are left to stubs.
var envFuncs = map[string]envFunc{
	"proxy_log":                          fn(3, proxyLog),
	"proxy_send_local_response":          fn(8, proxySendLocalResponse),
	"proxy_get_shared_data":              fn(5, proxyGetSharedData),
	"proxy_set_shared_data":              fn(5, proxySetSharedData),
	"proxy_get_header_map_value":         onHeaderMap(5, proxyGetHeaderMapValue),
	"proxy_add_header_map_value":         onHeaderMap(5, proxyAddHeaderMapValue),
	"proxy_replace_header_map_value":     onHeaderMap(5, proxyReplaceHeaderMapValue),
	"proxy_remove_header_map_value":      onHeaderMap(3, proxyRemoveHeaderMapValue),
	"proxy_get_header_map_pairs":         onHeaderMap(3, proxyGetHeaderMapPairs),
	"proxy_set_header_map_pairs":         onHeaderMap(3, proxySetHeaderMapPairs),
	"proxy_get_buffer_bytes":             fn(5, proxyGetBufferBytes),
	"proxy_continue_stream":              fn(1, proxyContinueStream),
	"proxy_close_stream":                 fn(1, okStatus),
	"proxy_set_tick_period_milliseconds": fn(1, proxySetTickPeriod),
	"proxy_set_effective_context":        fn(1, okStatus),
	"proxy_done":                         fn(0, okStatus),
	"proxy_define_metric":                fn(4, proxyDefineMetric),
	"proxy_increment_metric":             {params: []api.ValueType{i32, i64}, results: i32s(1), fn: proxyIncrementMetric},
	"proxy_record_metric":                {params: []api.ValueType{i32, i64}, results: i32s(1), fn: proxyRecordMetric},
	"proxy_get_metric":                   fn(2, proxyGetMetric),
	"proxy_get_property":                 fn(4, proxyGetProperty),
	"proxy_set_property":                 fn(4, proxySetProperty),
}

func arg(stack []uint64, i int) uint32 { return uint32(stack[i]) }

// view returns the guest memory whose pointer and size are the arguments
// i and i+1, without copying; ok is false when the range is outside memory.
func view(mem api.Memory, s []uint64, i int) ([]byte, bool) {
	size := arg(s, i+1)
	if size == 0 {
		return nil, true
	}
	return mem.Read(arg(s, i), size)
}

func viewString(mem api.Memory, s []uint64, i int) (string, bool) {
	b, ok := view(mem, s, i)
	return string(b), ok
}

// view2 is view of two ranges, the arguments i, i+1 and j, j+1; ok is
// false when either is outside memory.
func view2(mem api.Memory, s []uint64, i, j int) (a, b []byte, ok bool) {
	a, ok1 := view(mem, s, i)
	b, ok2 := view(mem, s, j)
	return a, b, ok1 && ok2
}

// written is the status of a write into guest memory.
func written(ok bool) Status {
	if !ok {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

func okStatus(*VM, api.Memory, []uint64) Status { return StatusOK }

func proxyLog(vm *VM, mem api.Memory, s []uint64) Status {
	msg, ok := viewString(mem, s, 1)
	if !ok {
		return StatusInvalidMemoryAccess
	}
	vm.log(int(arg(s, 0)), msg)
	return StatusOK
}

func proxySendLocalResponse(vm *VM, mem api.Memory, s []uint64) Status {
	st := vm.stream
	if st == nil {
		return StatusBadArgument
	}
	body, raw, ok := view2(mem, s, 3, 5)
	if !ok {
		return StatusInvalidMemoryAccess
	}
	headers, err := decodePairs(raw)
	if err != nil {
		return StatusBadArgument
	}
	// Envoy sends the reply after the callback returns; the stream records
	// it and Do builds the response then.
	headers = lowerKeys(headers)
	if len(body) > 0 && !slices.ContainsFunc(headers, func(kv [2]string) bool { return kv[0] == "content-type" }) {
		// As Envoy's local replies do (Utility::sendLocalReply).
		headers = append(headers, [2]string{"content-type", "text/plain"})
	}
	st.local = &localReply{status: int(arg(s, 0)), body: string(body), headers: headers}
	return StatusOK
}

func proxyGetSharedData(vm *VM, mem api.Memory, s []uint64) Status {
	key, ok := viewString(mem, s, 0)
	if !ok {
		return StatusInvalidMemoryAccess
	}
	// The copy is taken under the store's lock; the guest allocation happens
	// after it is released, as in Envoy.
	value, cas, status := vm.host.shared.Get(key)
	if status != StatusOK {
		return status
	}
	if st := vm.copyOut(mem, value, arg(s, 2), arg(s, 3)); st != StatusOK {
		return st
	}
	return written(mem.WriteUint32Le(arg(s, 4), cas))
}

func proxySetSharedData(vm *VM, mem api.Memory, s []uint64) Status {
	key, value, ok := view2(mem, s, 0, 2)
	if !ok {
		return StatusInvalidMemoryAccess
	}
	return vm.host.shared.Set(string(key), value, arg(s, 4))
}

// headerMap returns the stream's map of the given type. Trailers are always
// empty; outside a stream there is no map at all.
func (vm *VM) headerMap(mapType uint32) (*[][2]string, Status) {
	st := vm.stream
	if st == nil {
		return nil, StatusBadArgument
	}
	switch mapType {
	case mapRequestHeaders:
		return &st.request, StatusOK
	case mapResponseHeaders:
		if !st.responding {
			return nil, StatusBadArgument
		}
		return &st.response, StatusOK
	case mapRequestTrailers, mapResponseTrailers:
		return &st.trailers, StatusOK
	}
	return nil, StatusBadArgument
}

func proxyGetHeaderMapValue(vm *VM, mem api.Memory, s []uint64, m *[][2]string) Status {
	key, ok := viewString(mem, s, 1)
	if !ok {
		return StatusInvalidMemoryAccess
	}
	key = strings.ToLower(key)
	for _, p := range *m {
		if p[0] == key { // Envoy returns the first value
			return vm.copyOut(mem, []byte(p[1]), arg(s, 3), arg(s, 4))
		}
	}
	return StatusNotFound
}

func headerKeyValue(mem api.Memory, s []uint64) (key, value string, ok bool) {
	k, v, ok := view2(mem, s, 1, 3)
	return strings.ToLower(string(k)), string(v), ok
}

func proxyAddHeaderMapValue(vm *VM, mem api.Memory, s []uint64, m *[][2]string) Status {
	key, value, ok := headerKeyValue(mem, s)
	if !ok {
		return StatusInvalidMemoryAccess
	}
	*m = append(*m, [2]string{key, value})
	return StatusOK
}

// proxyReplaceHeaderMapValue follows Envoy's setCopy: the first entry with
// the key takes the value, or the pair is added.
func proxyReplaceHeaderMapValue(vm *VM, mem api.Memory, s []uint64, m *[][2]string) Status {
	key, value, ok := headerKeyValue(mem, s)
	if !ok {
		return StatusInvalidMemoryAccess
	}
	for i, p := range *m {
		if p[0] == key {
			(*m)[i][1] = value
			return StatusOK
		}
	}
	*m = append(*m, [2]string{key, value})
	return StatusOK
}

func proxyRemoveHeaderMapValue(vm *VM, mem api.Memory, s []uint64, m *[][2]string) Status {
	key, ok := viewString(mem, s, 1)
	if !ok {
		return StatusInvalidMemoryAccess
	}
	*m = removeKey(*m, strings.ToLower(key))
	return StatusOK
}

func proxyGetHeaderMapPairs(vm *VM, mem api.Memory, s []uint64, m *[][2]string) Status {
	return vm.copyOut(mem, encodePairs(*m), arg(s, 1), arg(s, 2))
}

func proxySetHeaderMapPairs(vm *VM, mem api.Memory, s []uint64, m *[][2]string) Status {
	raw, ok := view(mem, s, 1)
	if !ok {
		return StatusInvalidMemoryAccess
	}
	pairs, err := decodePairs(raw)
	if err != nil {
		return StatusBadArgument
	}
	*m = lowerKeys(pairs)
	return StatusOK
}

// proxyGetBufferBytes serves the two configuration buffers. An empty one
// answers NotFound, which the SDK reports for an absent configuration too.
func proxyGetBufferBytes(vm *VM, mem api.Memory, s []uint64) Status {
	var buf []byte
	switch arg(s, 0) {
	case bufferVMConfiguration:
		buf = vm.host.opts.VMConfig
	case bufferPluginConfiguration:
		buf = vm.host.opts.PluginConfig
	default:
		return StatusNotFound
	}
	start, max := int(arg(s, 1)), int(int32(arg(s, 2)))
	if start < 0 || max < 0 {
		return StatusBadArgument
	}
	if start >= len(buf) {
		return StatusNotFound
	}
	buf = buf[start:]
	if max < len(buf) {
		buf = buf[:max]
	}
	return vm.copyOut(mem, buf, arg(s, 3), arg(s, 4))
}

func proxyContinueStream(vm *VM, _ api.Memory, s []uint64) Status {
	if st := vm.stream; st != nil && arg(s, 0) == 0 {
		st.continued = true
	}
	return StatusOK
}

func proxySetTickPeriod(vm *VM, _ api.Memory, s []uint64) Status {
	vm.tickPeriod.Store(arg(s, 0))
	return StatusOK
}

func proxyDefineMetric(vm *VM, mem api.Memory, s []uint64) Status {
	name, ok := viewString(mem, s, 1)
	if !ok {
		return StatusInvalidMemoryAccess
	}
	id, status := vm.host.metrics.Define(arg(s, 0), name)
	if status != StatusOK {
		return status
	}
	return written(mem.WriteUint32Le(arg(s, 3), id))
}

func proxyIncrementMetric(vm *VM, _ api.Memory, s []uint64) Status {
	return vm.host.metrics.Increment(arg(s, 0), int64(s[1]))
}

func proxyRecordMetric(vm *VM, _ api.Memory, s []uint64) Status {
	return vm.host.metrics.Record(arg(s, 0), s[1])
}

func proxyGetMetric(vm *VM, mem api.Memory, s []uint64) Status {
	v, status := vm.host.metrics.Get(arg(s, 0))
	if status != StatusOK {
		return status
	}
	return written(mem.WriteUint64Le(arg(s, 1), v))
}

func proxyGetProperty(vm *VM, mem api.Memory, s []uint64) Status {
	raw, ok := view(mem, s, 0)
	if !ok {
		return StatusInvalidMemoryAccess
	}
	value, found := vm.host.property(propertyKey(raw))
	if !found {
		return StatusNotFound
	}
	return vm.copyOut(mem, value, arg(s, 2), arg(s, 3))
}

func proxySetProperty(vm *VM, mem api.Memory, s []uint64) Status {
	raw, value, ok := view2(mem, s, 0, 2)
	if !ok {
		return StatusInvalidMemoryAccess
	}
	vm.host.SetProperty(propertyKey(raw), string(value))
	return StatusOK
}

func lowerKeys(pairs [][2]string) [][2]string {
	for i := range pairs {
		pairs[i][0] = strings.ToLower(pairs[i][0])
	}
	return pairs
}

func removeKey(pairs [][2]string, key string) [][2]string {
	out := pairs[:0]
	for _, p := range pairs {
		if p[0] != key {
			out = append(out, p)
		}
	}
	return out
}

func clockProperty(c *Clock) []byte {
	return strconv.AppendInt(nil, c.wall.Load(), 10)
}
