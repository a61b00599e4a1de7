package wasmhost

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/borrowcycle/borrowcycle/engine"
)

// SharedData is the process-wide key-value store behind
// proxy_get_shared_data and proxy_set_shared_data. The store is
// engine.MemStore, which has the semantics of Envoy's shared data; this
// adapter only turns its errors into the ABI's status codes. Envoy keeps
// one such map per vm_id; a Host is one vm_id.
type SharedData struct{ store *engine.MemStore }

// NewSharedData returns an empty store whose first set gets CAS 1.
func NewSharedData() *SharedData { return &SharedData{store: engine.NewMemStore()} }

// Get returns a copy of the value of key and its CAS, or StatusNotFound.
func (s *SharedData) Get(key string) ([]byte, uint32, Status) {
	v, cas, err := s.store.Get(key)
	return v, cas, storeStatus(err)
}

// Set stores a copy of value under key if cas allows it (see
// engine.MemStore).
func (s *SharedData) Set(key string, value []byte, cas uint32) Status {
	return storeStatus(s.store.Set(key, value, cas))
}

// Store is the store itself, for tests that read or steer it directly.
func (s *SharedData) Store() *engine.MemStore { return s.store }

// storeStatus is the ABI status of a store error.
func storeStatus(err error) Status {
	switch {
	case err == nil:
		return StatusOK
	case errors.Is(err, engine.ErrNotFound):
		return StatusNotFound
	case errors.Is(err, engine.ErrCASMismatch):
		return StatusCasMismatch
	}
	return StatusInternalFailure
}

// Metrics is the process-wide stats store. As in Envoy, a metric is named,
// not owned by a VM: every VM that defines the same name and type gets the
// same stat, so counters add up across workers and a gauge holds the last
// value any worker recorded.
//
// Ids carry the metric type in their low two bits, as Envoy's do, so a
// counter id passed where a gauge is expected is caught the same way.
type Metrics struct {
	mu     sync.RWMutex
	byName map[metricKey]uint32
	stats  []*metric // index is id>>2
}

type metricKey struct {
	typ  uint32
	name string
}

type metric struct {
	name  string
	typ   uint32
	value atomic.Int64 // counter or gauge value; for histograms, the sum
	count atomic.Int64 // histogram: number of recorded values
}

// NewMetrics returns an empty store.
func NewMetrics() *Metrics { return &Metrics{byName: make(map[metricKey]uint32)} }

// Define returns the id of the named stat of that type, creating it once.
func (m *Metrics) Define(typ uint32, name string) (uint32, Status) {
	if typ > MetricHistogram {
		return 0, StatusBadArgument
	}
	k := metricKey{typ, name}
	m.mu.RLock()
	id, ok := m.byName[k]
	m.mu.RUnlock()
	if ok {
		return id, StatusOK
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if id, ok := m.byName[k]; ok {
		return id, StatusOK
	}
	id = uint32(len(m.stats))<<2 | typ
	m.stats = append(m.stats, &metric{name: name, typ: typ})
	m.byName[k] = id
	return id, StatusOK
}

func (m *Metrics) lookup(id uint32) *metric {
	m.mu.RLock()
	defer m.mu.RUnlock()
	i := int(id >> 2)
	if i >= len(m.stats) || m.stats[i].typ != id&3 {
		return nil
	}
	return m.stats[i]
}

// Increment adds offset, with Envoy's rules: counters take only positive
// offsets, gauges go both ways, histograms cannot be incremented.
func (m *Metrics) Increment(id uint32, offset int64) Status {
	s := m.lookup(id)
	switch {
	case s == nil && id&3 <= MetricGauge:
		return StatusNotFound
	case s == nil || s.typ == MetricHistogram:
		return StatusBadArgument
	case s.typ == MetricCounter && offset <= 0:
		return StatusBadArgument
	}
	s.value.Add(offset)
	return StatusOK
}

// Record sets a gauge, adds to a counter (as Envoy does) and records a
// histogram sample.
func (m *Metrics) Record(id uint32, value uint64) Status {
	s := m.lookup(id)
	if s == nil {
		return StatusNotFound
	}
	switch s.typ {
	case MetricGauge:
		s.value.Store(int64(value))
	case MetricCounter:
		s.value.Add(int64(value))
	default:
		s.value.Add(int64(value))
		s.count.Add(1)
	}
	return StatusOK
}

// Get reads a counter or gauge; histograms have no single value.
func (m *Metrics) Get(id uint32) (uint64, Status) {
	s := m.lookup(id)
	switch {
	case s == nil && id&3 <= MetricGauge:
		return 0, StatusNotFound
	case s == nil || s.typ == MetricHistogram:
		return 0, StatusBadArgument
	}
	return uint64(s.value.Load()), StatusOK
}

// Value returns the value of the counter or gauge named name, and whether it
// was defined. Histograms report their sum.
func (m *Metrics) Value(name string) (int64, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, typ := range []uint32{MetricCounter, MetricGauge, MetricHistogram} {
		if id, ok := m.byName[metricKey{typ, name}]; ok {
			return m.stats[id>>2].value.Load(), true
		}
	}
	return 0, false
}

// Snapshot returns every defined metric's value by name.
func (m *Metrics) Snapshot() map[string]int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[string]int64, len(m.stats))
	for _, s := range m.stats {
		out[s.name] = s.value.Load()
	}
	return out
}
