package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Options configures a Host.
type Options struct {
	// VMs is the number of worker VMs (Envoy's --concurrency); at least 1.
	VMs int
	// PluginConfig is the filter's configuration (config.configuration).
	PluginConfig []byte
	// VMConfig is the VM's configuration (vm_config.configuration).
	VMConfig []byte
	// Clock drives every VM's WASI clocks; nil means a new clock at
	// DefaultStart.
	Clock *Clock
	// Properties answer proxy_get_property, keyed by dotted path
	// ("plugin_name"); any other path is NotFound.
	Properties map[string]string
	// ClockProperty, when set, is a property path that answers the clock's
	// wall time in decimal Unix nanoseconds.
	ClockProperty string
	// UpstreamHeaders is the response the upstream gives a continued
	// request; nil means just ":status: 200".
	UpstreamHeaders [][2]string
	// LogLevel is the lowest proxy_log level kept (default LogTrace, all).
	LogLevel int
	// MaxLogs bounds the log lines kept per VM (default 10000); later ones
	// are counted, not kept.
	MaxLogs int
	// LogSink, when set, also receives every kept log line as it happens.
	// vm is -1 for the canary. It must be safe for concurrent use.
	LogSink func(vm int, level int, msg string)
}

// Host is one Envoy process running one plugin: N worker VMs that share a
// SharedData store (one vm_id), a Metrics store and a Clock. A Host is safe
// for concurrent use; calls into one VM are serialised.
type Host struct {
	mod     *Module
	opts    Options
	id      uint64
	clock   *Clock
	shared  *SharedData
	metrics *Metrics
	vms     []*VM

	propMu sync.RWMutex
	props  map[string]string

	stubMu    sync.Mutex
	stubCalls map[Import]int
}

// New starts a host the way Envoy starts a filter's VMs: a canary VM runs
// _initialize, proxy_on_context_create, proxy_on_vm_start and
// proxy_on_configure and is closed; then each worker VM does the same. A
// failed start of the canary or of any worker fails New with the plugin's
// error log lines.
func New(ctx context.Context, mod *Module, opts Options) (*Host, error) {
	if opts.VMs < 1 {
		return nil, errors.New("wasmhost: Options.VMs must be at least 1")
	}
	if opts.Clock == nil {
		opts.Clock = NewClock(DefaultStart)
	}
	if opts.UpstreamHeaders == nil {
		opts.UpstreamHeaders = [][2]string{{":status", "200"}}
	}
	if opts.MaxLogs <= 0 {
		opts.MaxLogs = 10000
	}
	h := &Host{
		mod:       mod,
		opts:      opts,
		id:        mod.names.Add(1),
		clock:     opts.Clock,
		shared:    NewSharedData(),
		metrics:   NewMetrics(),
		props:     make(map[string]string, len(opts.Properties)),
		stubCalls: make(map[Import]int),
	}
	for k, v := range opts.Properties {
		h.props[k] = v
	}
	if err := h.runCanary(ctx); err != nil {
		return nil, err
	}
	for i := 0; i < opts.VMs; i++ {
		vm, err := h.startVM(ctx, i)
		if err != nil {
			h.Close(ctx)
			return nil, err
		}
		h.vms = append(h.vms, vm)
	}
	return h, nil
}

// runCanary mirrors Envoy's check of a new configuration on a throwaway VM
// before any worker sees it.
func (h *Host) runCanary(ctx context.Context) error {
	vm, err := h.startVM(ctx, -1)
	if err != nil {
		return err
	}
	vm.shutdown(ctx)
	return nil
}

func (h *Host) startVM(ctx context.Context, index int) (*VM, error) {
	vm, err := h.instantiate(ctx, index)
	if err != nil {
		return nil, err
	}
	if err := vm.start(); err != nil {
		vm.shutdown(ctx)
		return nil, fmt.Errorf("wasmhost: %s: %w", vm.label(), err)
	}
	return vm, nil
}

// Close shuts every VM down (proxy_on_done, proxy_on_delete) and frees it.
// The Module stays usable for other Hosts.
func (h *Host) Close(ctx context.Context) {
	for _, vm := range h.vms {
		vm.shutdown(ctx)
	}
}

// VMs returns the number of worker VMs.
func (h *Host) VMs() int { return len(h.vms) }

// VM returns worker VM i.
func (h *Host) VM(i int) *VM { return h.vms[i] }

// Clock returns the clock the VMs read.
func (h *Host) Clock() *Clock { return h.clock }

// Shared returns the shared-data store the VMs share.
func (h *Host) Shared() *SharedData { return h.shared }

// HostCalls counts the env functions and WASI clock reads the worker VMs
// have called so far, by name: the calls that cross the ABI, whose number
// per request the benchmarks report.
func (h *Host) HostCalls() map[string]uint64 {
	out := map[string]uint64{}
	for _, vm := range h.vms {
		for i := range vm.calls {
			if n := vm.calls[i].Load(); n > 0 {
				out[callNames[i]] += n
			}
		}
	}
	return out
}

// Metrics returns the process-wide metrics.
func (h *Host) Metrics() *Metrics { return h.metrics }

// Metric returns the value of the named counter or gauge (0 if undefined).
func (h *Host) Metric(name string) int64 {
	v, _ := h.metrics.Value(name)
	return v
}

// SetProperty sets what proxy_get_property answers for a dotted path.
func (h *Host) SetProperty(path, value string) {
	h.propMu.Lock()
	h.props[path] = value
	h.propMu.Unlock()
}

func (h *Host) property(path string) ([]byte, bool) {
	if path == h.opts.ClockProperty && path != "" {
		return clockProperty(h.clock), true
	}
	h.propMu.RLock()
	v, ok := h.props[path]
	h.propMu.RUnlock()
	return []byte(v), ok
}

func (h *Host) countStubCall(imp Import) {
	h.stubMu.Lock()
	h.stubCalls[imp]++
	h.stubMu.Unlock()
}

// StubCalls returns how often each unimplemented import was called.
func (h *Host) StubCalls() map[Import]int {
	h.stubMu.Lock()
	defer h.stubMu.Unlock()
	out := make(map[Import]int, len(h.stubCalls))
	for k, v := range h.stubCalls {
		out[k] = v
	}
	return out
}

// Logs returns every VM's kept log lines, canary first, as "vm level msg".
func (h *Host) Logs() []string {
	var out []string
	for _, vm := range h.vms {
		for _, l := range vm.Logs() {
			out = append(out, fmt.Sprintf("%s %s %s", vm.label(), levelName(l.Level), l.Msg))
		}
	}
	return out
}

// Tick fires proxy_on_tick on worker VM i, as its timer would. It fails if
// the VM never set a tick period.
func (h *Host) Tick(i int) error { return h.vms[i].tick() }

// TickAll ticks every VM that set a tick period, in order.
func (h *Host) TickAll() error {
	var errs []error
	for _, vm := range h.vms {
		if vm.TickPeriod() > 0 {
			errs = append(errs, vm.tick())
		}
	}
	return errors.Join(errs...)
}

// MemoryPages returns each worker VM's linear memory size in 64 KiB pages.
func (h *Host) MemoryPages() []uint32 {
	out := make([]uint32, len(h.vms))
	for i, vm := range h.vms {
		out[i] = vm.MemoryPages()
	}
	return out
}
