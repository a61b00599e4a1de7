package wasmhost

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// rootContextID is the plugin (root) context of every VM. Stream contexts
// are numbered after it.
const rootContextID = 1

type vmKey struct{}

// vmFrom returns the VM a host function was called from. Every call into a
// guest carries its VM in the context, which is how one env module serves
// all VMs of all Hosts of a Module.
func vmFrom(ctx context.Context) *VM {
	vm, _ := ctx.Value(vmKey{}).(*VM)
	return vm
}

// LogLine is one proxy_log call.
type LogLine struct {
	Level int
	Msg   string
}

// VM is one instance of the module: Envoy's per-worker clone. It is
// single-threaded like a worker; mu serialises every call into it.
type VM struct {
	host  *Host
	index int // -1 for the canary
	mod   api.Module
	ctx   context.Context

	mu      sync.Mutex
	exports exports
	stack   [8]uint64 // argument and result stack for outer calls
	alloc   [1]uint64 // stack for proxy_on_memory_allocate, called nested
	nextID  uint32
	stream  *stream // the stream being processed, during Do
	failure error   // set once a call traps; the VM is unusable after

	tickPeriod atomic.Uint32
	calls      []atomic.Uint64 // host calls the guest made, by slot of callNames

	logMu   sync.Mutex
	logs    []LogLine
	dropped int

	stdout, stderr *tailBuffer
}

type exports struct {
	initialize, contextCreate, vmStart, configure      api.Function
	requestHeaders, responseHeaders, log, done, delete api.Function
	tick, memoryAllocate                               api.Function
}

func (h *Host) instantiate(ctx context.Context, index int) (*VM, error) {
	vm := &VM{host: h, index: index, nextID: rootContextID + 1,
		stdout: newTailBuffer(), stderr: newTailBuffer(), calls: make([]atomic.Uint64, len(callNames))}
	vm.ctx = context.WithValue(context.Background(), vmKey{}, vm)
	cfg := wazero.NewModuleConfig().
		WithName(fmt.Sprintf("host%d-%s", h.id, vm.label())).
		WithStartFunctions(). // _initialize is called by start, so its failure is reported
		WithStdout(vm.stdout).
		WithStderr(vm.stderr).
		WithWalltime(func() (int64, int32) { vm.calls[slotWalltime].Add(1); return h.clock.walltime() }, sys.ClockResolution(1)).
		WithNanotime(func() int64 { vm.calls[slotNanotime].Add(1); return h.clock.nanotime() }, sys.ClockResolution(1)).
		// Real randomness, as in Envoy: identical seeds in every VM could
		// hide collisions between per-worker random ids.
		WithRandSource(rand.Reader)
	mod, err := h.mod.rt.InstantiateModule(withReservedMemory(ctx), h.mod.compiled, cfg)
	if err != nil {
		return nil, fmt.Errorf("wasmhost: instantiate %s: %w", vm.label(), err)
	}
	vm.mod = mod
	e := &vm.exports
	for name, f := range map[string]*api.Function{
		"_initialize": &e.initialize, "proxy_on_context_create": &e.contextCreate,
		"proxy_on_vm_start": &e.vmStart, "proxy_on_configure": &e.configure,
		"proxy_on_request_headers": &e.requestHeaders, "proxy_on_response_headers": &e.responseHeaders,
		"proxy_on_log": &e.log, "proxy_on_done": &e.done, "proxy_on_delete": &e.delete,
		"proxy_on_tick": &e.tick, "proxy_on_memory_allocate": &e.memoryAllocate,
	} {
		*f = mod.ExportedFunction(name)
	}
	return vm, nil
}

func (vm *VM) label() string {
	if vm.index < 0 {
		return "canary"
	}
	return fmt.Sprintf("vm%d", vm.index)
}

// start runs Envoy's start-up sequence on the VM.
func (vm *VM) start() error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if _, err := vm.call(vm.exports.initialize); err != nil {
		return fmt.Errorf("_initialize: %w", err)
	}
	if _, err := vm.call(vm.exports.contextCreate, rootContextID, 0); err != nil {
		return fmt.Errorf("proxy_on_context_create: %w", err)
	}
	if err := vm.startCallback("proxy_on_vm_start", vm.exports.vmStart, len(vm.host.opts.VMConfig)); err != nil {
		return err
	}
	return vm.startCallback("proxy_on_configure", vm.exports.configure, len(vm.host.opts.PluginConfig))
}

// startCallback calls proxy_on_vm_start or proxy_on_configure. A module
// without the export accepts, as it does in Envoy.
func (vm *VM) startCallback(name string, f api.Function, configSize int) error {
	if f == nil {
		return nil
	}
	ok, err := vm.call(f, rootContextID, uint64(configSize))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if ok == 0 {
		return fmt.Errorf("%s returned false%s", name, vm.errorLog())
	}
	return nil
}

// errorLog returns the VM's warn-and-above log lines, which is where a
// plugin says why it refused to start.
func (vm *VM) errorLog() string {
	var b strings.Builder
	for _, l := range vm.Logs() {
		if l.Level >= LogWarn {
			b.WriteString("; plugin log: ")
			b.WriteString(l.Msg)
		}
	}
	return b.String()
}

// shutdown tells the plugin context it is done and deletes it, as Envoy
// does when a VM goes away, then frees the instance.
func (vm *VM) shutdown(ctx context.Context) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.failure == nil {
		_, _ = vm.call(vm.exports.done, rootContextID)
		_, _ = vm.call(vm.exports.delete, rootContextID)
	}
	_ = vm.mod.Close(ctx)
}

// call invokes an export with vm.mu held. A missing export is a no-op
// returning 0. Any error (a trap, or proc_exit after a Go panic) marks the
// VM failed for good: Envoy does not call into a VM that trapped either.
func (vm *VM) call(f api.Function, args ...uint64) (uint64, error) {
	if vm.failure != nil {
		return 0, vm.failure
	}
	if f == nil {
		return 0, nil
	}
	stack := vm.stack[:]
	copy(stack, args)
	if err := f.CallWithStack(vm.ctx, stack); err != nil {
		vm.failure = vm.describeFailure(err)
		return 0, vm.failure
	}
	return stack[0], nil
}

func (vm *VM) describeFailure(err error) error {
	msg := fmt.Sprintf("%s failed: %v", vm.label(), err)
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		msg = fmt.Sprintf("%s exited with code %d", vm.label(), exit.ExitCode())
	}
	if tail := strings.TrimSpace(vm.stderr.String()); tail != "" {
		msg += "; stderr: " + lastLines(tail, 5)
	}
	return &VMError{VM: vm.index, msg: msg, err: err}
}

// VMError reports a VM that trapped or exited. Every later call to the same
// VM returns it.
type VMError struct {
	VM  int
	msg string
	err error
}

func (e *VMError) Error() string { return "wasmhost: " + e.msg }
func (e *VMError) Unwrap() error { return e.err }

// copyOut gives bytes to the guest the way Envoy does: memory obtained from
// the guest's proxy_on_memory_allocate, its address and size written at
// ptrPtr and sizePtr.
func (vm *VM) copyOut(mem api.Memory, data []byte, ptrPtr, sizePtr uint32) Status {
	var addr uint32
	if len(data) > 0 {
		vm.alloc[0] = uint64(len(data))
		if err := vm.exports.memoryAllocate.CallWithStack(vm.ctx, vm.alloc[:]); err != nil {
			return StatusInternalFailure
		}
		addr = uint32(vm.alloc[0])
		if addr == 0 || !mem.Write(addr, data) {
			return StatusInvalidMemoryAccess
		}
	}
	if !mem.WriteUint32Le(ptrPtr, addr) || !mem.WriteUint32Le(sizePtr, uint32(len(data))) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

func (vm *VM) log(level int, msg string) {
	if level < vm.host.opts.LogLevel {
		return
	}
	vm.logMu.Lock()
	kept := len(vm.logs) < vm.host.opts.MaxLogs
	if kept {
		vm.logs = append(vm.logs, LogLine{level, msg})
	} else {
		vm.dropped++
	}
	vm.logMu.Unlock()
	if kept && vm.host.opts.LogSink != nil {
		vm.host.opts.LogSink(vm.index, level, msg)
	}
}

// Logs returns the log lines the VM kept.
func (vm *VM) Logs() []LogLine {
	vm.logMu.Lock()
	defer vm.logMu.Unlock()
	return append([]LogLine(nil), vm.logs...)
}

// Stdout and Stderr return the tail of what the VM wrote through WASI; a Go
// guest's panic message lands in Stderr.
func (vm *VM) Stdout() string { return vm.stdout.String() }
func (vm *VM) Stderr() string { return vm.stderr.String() }

// Failure returns the error that made the VM unusable, or nil.
func (vm *VM) Failure() error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.failure
}

// TickPeriod returns the period the plugin set, in milliseconds (0: none).
func (vm *VM) TickPeriod() uint32 { return vm.tickPeriod.Load() }

func (vm *VM) tick() error {
	if vm.TickPeriod() == 0 {
		return fmt.Errorf("wasmhost: %s set no tick period", vm.label())
	}
	vm.mu.Lock()
	defer vm.mu.Unlock()
	_, err := vm.call(vm.exports.tick, rootContextID)
	return err
}

// MemoryPages returns the VM's linear memory size in 64 KiB pages. Linear
// memory never shrinks, so this is the high-water mark.
func (vm *VM) MemoryPages() uint32 {
	mem := vm.mod.Memory()
	if mem == nil {
		return 0
	}
	return mem.Size() / 65536
}

// Call invokes any export with raw arguments, serialised with the VM's other
// calls. It is for tests that need to misuse the ABI, e.g. to trap a VM.
func (vm *VM) Call(name string, args ...uint64) ([]uint64, error) {
	f := vm.mod.ExportedFunction(name)
	if f == nil {
		return nil, fmt.Errorf("wasmhost: no export %q", name)
	}
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.failure != nil {
		return nil, vm.failure
	}
	res, err := f.Call(vm.ctx, args...)
	if err != nil {
		vm.failure = vm.describeFailure(err)
		return nil, vm.failure
	}
	return res, nil
}

// tailBuffer keeps the last tailLimit bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailLimit = 64 << 10

func newTailBuffer() *tailBuffer { return &tailBuffer{} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - tailLimit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
