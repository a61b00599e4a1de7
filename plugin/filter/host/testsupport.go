package host

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
)

// The VM configuration has one field, test_support, and production leaves
// it empty: it adapts the plugin to hosts that are not Envoy (the SDK's
// emulator, benchmarks), and docs/contract.md ("Test support") documents
// it. Every hook for such hosts is here, and nothing else reads it.
type testSupport struct {
	// ClockProperty makes "now" the host property at this dotted path
	// (decimal Unix nanoseconds), for hosts whose clock is fake.
	ClockProperty string `json:"clock_property"`
	// MemoryProperty makes every tick write the VM's linear memory size in
	// bytes to the host property at this dotted path, for benchmarks that
	// cannot see the guest's memory from the host.
	MemoryProperty string `json:"memory_property"`
	// ZeroCAS lets the shared-data store pass CAS 0 to the host as an
	// ordinary compare. Envoy never hands out CAS 0 and reads a set with
	// CAS 0 as "overwrite unconditionally", which would break the engine's
	// protocol, so by default the store refuses it; the SDK's emulator does
	// hand out 0 (it numbers a key created with CAS 2^32-1 as 2^32-1+1) and
	// compares it like any other.
	ZeroCAS bool `json:"zero_cas"`
}

// parseVMConfig reads {"test_support": {...}}, refusing unknown fields at
// both levels. Not json.Decoder with DisallowUnknownFields: see
// filter.ParseConfig on fd_read.
func parseVMConfig(data []byte) (testSupport, error) {
	var ts testSupport
	if len(bytes.TrimSpace(data)) == 0 {
		return ts, nil
	}
	inner, err := onlyFields(data, "test_support")
	if err != nil || inner["test_support"] == nil {
		return ts, err
	}
	raw := inner["test_support"]
	if _, err := onlyFields(raw, "clock_property", "memory_property", "zero_cas"); err != nil {
		return ts, fmt.Errorf("test_support: %w", err)
	}
	if err := json.Unmarshal(raw, &ts); err != nil {
		return testSupport{}, fmt.Errorf("test_support: %w", err)
	}
	return ts, nil
}

// onlyFields decodes a JSON object whose field names must be among names,
// exactly (json.Unmarshal into a struct would ignore case).
func onlyFields(data []byte, names ...string) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, err
	}
	for name := range fields {
		known := false
		for _, n := range names {
			known = known || n == name
		}
		if !known {
			return nil, fmt.Errorf("unknown field %q", name)
		}
	}
	return fields, nil
}

// clock is the filter's clock: the wall clock, unless clock_property
// points it at a host property.
func (ts *testSupport) clock() engine.Clock {
	if ts.ClockProperty == "" {
		return wallClock{}
	}
	return &propertyClock{path: strings.Split(ts.ClockProperty, ".")}
}

// reportMemory writes the VM's linear memory size to memory_property, if
// set.
func (ts *testSupport) reportMemory() {
	if ts.MemoryProperty != "" {
		_ = proxywasm.SetProperty(strings.Split(ts.MemoryProperty, "."), strconv.AppendUint(nil, linearMemoryBytes(), 10))
	}
}

// propertyClock reads "now" from a host property holding decimal Unix
// nanoseconds.
type propertyClock struct {
	path []string
	last time.Time
}

// Now implements engine.Clock. When the property is missing or unreadable
// it repeats the last good reading (the wall clock before the first), so a
// test that forgets to set it sees time stand still rather than jump.
func (c *propertyClock) Now() time.Time {
	raw, err := proxywasm.GetProperty(c.path)
	if err == nil {
		if ns, perr := strconv.ParseInt(string(raw), 10, 64); perr == nil {
			c.last = time.Unix(0, ns)
			return c.last
		}
	}
	if c.last.IsZero() {
		c.last = time.Now()
	}
	return c.last
}
