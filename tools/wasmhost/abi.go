package wasmhost

import (
	"encoding/binary"
	"errors"
	"strings"
)

// EnvoyWASI is the set of WASI functions Envoy (>= 1.33) provides to Go
// modules; a module that imports any other WASI function fails to load.
var EnvoyWASI = map[string]bool{
	"args_get": true, "args_sizes_get": true, "clock_time_get": true, "environ_get": true,
	"environ_sizes_get": true, "fd_close": true, "fd_fdstat_get": true, "fd_fdstat_set_flags": true,
	"fd_prestat_dir_name": true, "fd_prestat_get": true, "fd_write": true, "poll_oneoff": true,
	"proc_exit": true, "random_get": true, "sched_yield": true,
}

// Status is a proxy-wasm call result (WasmResult in proxy-wasm-cpp-host).
type Status uint32

// The values are the ABI's, not ours: the SDK's internal/abi_enums.go names
// the subset it understands.
const (
	StatusOK                  Status = 0
	StatusNotFound            Status = 1
	StatusBadArgument         Status = 2
	StatusSerializationFail   Status = 3
	StatusInvalidMemoryAccess Status = 6
	StatusEmpty               Status = 7
	StatusCasMismatch         Status = 8
	StatusInternalFailure     Status = 10
	StatusUnimplemented       Status = 12
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusNotFound:
		return "not_found"
	case StatusBadArgument:
		return "bad_argument"
	case StatusSerializationFail:
		return "serialization_failure"
	case StatusInvalidMemoryAccess:
		return "invalid_memory_access"
	case StatusEmpty:
		return "empty"
	case StatusCasMismatch:
		return "cas_mismatch"
	case StatusInternalFailure:
		return "internal_failure"
	case StatusUnimplemented:
		return "unimplemented"
	}
	return "status_" + itoa(uint64(s))
}

// Map types of proxy_*_header_map_* (abi_enums.go MapType).
const (
	mapRequestHeaders   = 0
	mapRequestTrailers  = 1
	mapResponseHeaders  = 2
	mapResponseTrailers = 3
)

// Buffer types of proxy_get_buffer_bytes (abi_enums.go BufferType).
const (
	bufferVMConfiguration     = 6
	bufferPluginConfiguration = 7
)

// Metric types of proxy_define_metric.
const (
	MetricCounter   = 0
	MetricGauge     = 1
	MetricHistogram = 2
)

// Log levels of proxy_log.
const (
	LogTrace = iota
	LogDebug
	LogInfo
	LogWarn
	LogError
	LogCritical
)

var logLevelNames = [...]string{"trace", "debug", "info", "warn", "error", "critical"}

func levelName(l int) string {
	if l >= 0 && l < len(logLevelNames) {
		return logLevelNames[l]
	}
	return "level_" + itoa(uint64(l))
}

// Actions returned by proxy_on_*_headers.
const (
	actionContinue = 0
	actionPause    = 1
)

// encodePairs serialises header pairs the way the ABI passes maps: a count,
// then every key and value length, then the NUL-terminated bytes.
func encodePairs(pairs [][2]string) []byte {
	size := 4
	for _, p := range pairs {
		size += 8 + len(p[0]) + 1 + len(p[1]) + 1
	}
	out := make([]byte, size)
	binary.LittleEndian.PutUint32(out, uint32(len(pairs)))
	lens := out[4:]
	data := out[4+8*len(pairs):]
	for i, p := range pairs {
		binary.LittleEndian.PutUint32(lens[8*i:], uint32(len(p[0])))
		binary.LittleEndian.PutUint32(lens[8*i+4:], uint32(len(p[1])))
		n := copy(data, p[0])
		data = data[n+1:]
		n = copy(data, p[1])
		data = data[n+1:]
	}
	return out
}

var errBadPairs = errors.New("malformed header map")

// decodePairs is the inverse of encodePairs. It copies the strings out, since
// b usually aliases guest memory, and checks every length against b so that a
// guest cannot make the host read out of bounds.
func decodePairs(b []byte) ([][2]string, error) {
	if len(b) < 4 {
		if len(b) == 0 {
			return nil, nil
		}
		return nil, errBadPairs
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n > (len(b)-4)/10 { // every pair takes at least 8 length bytes and 2 NULs
		return nil, errBadPairs
	}
	lens := b[4 : 4+8*n]
	data := b[4+8*n:]
	out := make([][2]string, n)
	for i := range out {
		for j := 0; j < 2; j++ {
			l := int(binary.LittleEndian.Uint32(lens[8*i+4*j:]))
			if l+1 > len(data) {
				return nil, errBadPairs
			}
			out[i][j] = string(data[:l])
			data = data[l+1:]
		}
	}
	return out, nil
}

// propertyKey turns a serialised property path (segments separated by NUL)
// into the dotted form tests use to set properties.
func propertyKey(raw []byte) string {
	return strings.ReplaceAll(string(raw), "\x00", ".")
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
