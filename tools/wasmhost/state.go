package wasmhost

import (
	"sync"
	"sync/atomic"
)

// SharedData is the process-wide key-value store behind
// proxy_get_shared_data and proxy_set_shared_data, with the semantics of
// proxy-wasm-cpp-host's src/shared_data.cc:
//   - one mutex over everything;
//   - one global uint32 CAS counter (not one per key) that starts at 1,
//     advances on every successful set and skips 0 when it wraps;
//   - set with cas 0 overwrites; set on a missing key succeeds whatever the
//     cas; any other cas that is not the key's current one is a mismatch;
//   - no delete;
//   - get returns a copy.
//
// Envoy keeps one such map per vm_id; a Host is one vm_id.
type SharedData struct {
	mu      sync.Mutex
	entries map[string]sharedEntry
	nextCAS uint32
}

type sharedEntry struct {
	value []byte
	cas   uint32
}

// NewSharedData returns an empty store whose first set gets CAS 1.
func NewSharedData() *SharedData {
	return &SharedData{entries: make(map[string]sharedEntry), nextCAS: 1}
}

// Get returns a copy of the value of key and its CAS, or StatusNotFound.
func (s *SharedData) Get(key string) ([]byte, uint32, Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok {
		return nil, 0, StatusNotFound
	}
	return append([]byte(nil), e.value...), e.cas, StatusOK
}

// Set stores a copy of value under key if cas allows it (see SharedData).
func (s *SharedData) Set(key string, value []byte, cas uint32) Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[key]; ok && cas != 0 && cas != e.cas {
		return StatusCasMismatch
	}
	s.entries[key] = sharedEntry{value: append([]byte(nil), value...), cas: s.takeCAS()}
	return StatusOK
}

// takeCAS hands out the next CAS value; the caller holds s.mu.
func (s *SharedData) takeCAS() uint32 {
	c := s.nextCAS
	s.nextCAS++
	if s.nextCAS == 0 {
		s.nextCAS = 1
	}
	return c
}

// SetNextCAS moves the global CAS counter, so tests can reach wrap-around.
func (s *SharedData) SetNextCAS(c uint32) {
	s.mu.Lock()
	s.nextCAS = c
	s.mu.Unlock()
}

// Keys returns the keys present, in no particular order.
func (s *SharedData) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.entries))
	for k := range s.entries {
		keys = append(keys, k)
	}
	return keys
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
