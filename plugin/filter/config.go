package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// HeaderStyle is which rate-limit headers responses carry.
type HeaderStyle uint8

// The values of rate_limit_headers.
const (
	StyleXRateLimit HeaderStyle = iota
	StyleIETF
	StyleNone
)

var styleNames = [...]string{"x-ratelimit", "ietf", "none"}

// String is the style's name in the configuration.
func (s HeaderStyle) String() string { return styleNames[s] }

// Config is one parsed limit (docs/contract.md), with every default filled
// in and the engine's Config derived from it. The single-limit form of the
// plugin configuration is one Config whose Match is empty.
type Config struct {
	// ClientID is where the client id comes from (clientid.go).
	ClientID ClientIDSpec
	// Peer is what max_ids_per_peer counts ids per: the source address or
	// the mTLS principal (a property source of clientid.go).
	Peer ClientIDSpec
	// ClientHeader is ClientID.Header: the header of the header source,
	// lower-cased; empty for the other sources.
	ClientHeader     string
	Passthrough      bool
	HeadersOnAllowed bool
	RateLimitHeaders HeaderStyle
	StatusCode       uint32
	MaxClientIDBytes int
	Name             string
	DebugHeaders     bool
	AccessLog        bool  // decided requests get the access-log record
	LogClientID      bool  // the access-log record carries the raw id
	Cost             int64 // units each matched request takes
	// RetryAfterJitter is the most a refusal's announced retry time is
	// moved later, uniformly at random (responses.go).
	RetryAfterJitter time.Duration
	// MaxWait is how long a request that would be refused may be held
	// for its unit instead (0: never held); MaxWaiting bounds the
	// requests one worker holds for the limit at once (wait.go).
	MaxWait    time.Duration
	MaxWaiting int
	Match      Match // which requests the limit decides; empty: all
	// Unlimited marks a rule that lets the requests it matches pass
	// unlimited (a health check, say); it has only Name and Match.
	Unlimited bool
	// Engine is the limit's engine configuration; with several windows,
	// the shortest one's (its cycle sets the tick and the duration bounds).
	Engine engine.Config
	// Windows are the limit's windows, longest first, when it has several
	// (windows.go); nil for one window.
	Windows []Window
	// FleetCluster is the Envoy cluster of Gubernator's HTTP gateway in
	// fleet mode (Engine.Fleet set; fleet.go), empty otherwise.
	FleetCluster string
}

// Settings is the whole parsed plugin configuration: its limits, in the
// order in which requests are matched against them.
type Settings struct {
	Limits []Config
}

// Primary is the index of the first limit that limits (is not Unlimited):
// the one that speaks for the filter where no request's limit is known.
// Validation guarantees there is one.
func (s *Settings) Primary() int {
	for i := range s.Limits {
		if !s.Limits[i].Unlimited {
			return i
		}
	}
	return 0
}

// rawConfig holds each field undecoded (nil when absent), so that a wrong
// type, a null or an out-of-range value is reported in the contract's words
// with the field's name, rather than as encoding/json's Go-typed message.
type rawConfig struct {
	Capacity         json.RawMessage `json:"capacity"`
	Cycle            json.RawMessage `json:"cycle"`
	Windows          json.RawMessage `json:"windows"`
	Reservation      json.RawMessage `json:"reservation"`
	ClientHeader     json.RawMessage `json:"client_header"`
	ClientID         json.RawMessage `json:"client_id"`
	MaxIDsPerPeer    json.RawMessage `json:"max_ids_per_peer"`
	Peer             json.RawMessage `json:"peer"`
	Mode             json.RawMessage `json:"mode"`
	MaxClients       json.RawMessage `json:"max_clients"`
	IdleCycles       json.RawMessage `json:"idle_cycles"`
	MinCycle         json.RawMessage `json:"min_cycle"`
	WindowOffset     json.RawMessage `json:"window_offset"`
	RetryAfterJitter json.RawMessage `json:"retry_after_jitter"`
	MaxWait          json.RawMessage `json:"max_wait"`
	MaxWaiting       json.RawMessage `json:"max_waiting"`
	FailureModeDeny  json.RawMessage `json:"failure_mode_deny"`
	RateLimitHeaders json.RawMessage `json:"rate_limit_headers"`
	HeadersOnAllowed json.RawMessage `json:"headers_on_allowed"`
	StatusCode       json.RawMessage `json:"status_code"`
	MaxClientIDBytes json.RawMessage `json:"max_client_id_bytes"`
	Name             json.RawMessage `json:"name"`
	DebugHeaders     json.RawMessage `json:"debug_headers"`
	AccessLog        json.RawMessage `json:"access_log"`
	LogClientID      json.RawMessage `json:"log_client_id"`
	Cost             json.RawMessage `json:"cost"`
	Match            json.RawMessage `json:"match"`
	Limits           json.RawMessage `json:"limits"`    // top level only
	Unlimited        json.RawMessage `json:"unlimited"` // elements of limits only
	Policy           json.RawMessage `json:"policy"`    // policy.go
	Burst            json.RawMessage `json:"burst"`
	Weights          json.RawMessage `json:"weights"`
	MaxShare         json.RawMessage `json:"max_share"`
	Caps             json.RawMessage `json:"caps"`
	Fleet            json.RawMessage `json:"fleet"`
}

// configError is a configuration error that names its field. Its text is
// exactly what follows "borrowcycle: invalid configuration: " in the log.
type configError struct {
	Field  string
	Reason string
}

func (e *configError) Error() string { return e.Field + ": " + e.Reason }

func fieldError(field, reason string) error { return &configError{Field: field, Reason: reason} }

// Tick period bounds. Ticks roll cycles over on time, hand back unused
// leases and flush the metrics; a tenth of a cycle keeps all three prompt,
// and the bounds keep short cycles from ticking wastefully and long ones
// from sitting on leases.
const (
	minTickPeriod = 100 * time.Millisecond
	maxTickPeriod = time.Second
)

// HousekeepingPeriod is how often the host should let the filter roll
// windows, return leases and flush metrics (Filter.Tick).
func (c *Config) HousekeepingPeriod() time.Duration {
	return c.fleetTickPeriod(min(max(c.Engine.Cycle/10, minTickPeriod), maxTickPeriod))
}

// TickPeriod is how often the host should tick the filter: the
// housekeeping period, or more often for the requests it holds (wait.go).
func (c *Config) TickPeriod() time.Duration {
	return min(c.HousekeepingPeriod(), c.holdTickPeriod())
}

// Defaults and bounds of the contract that the engine does not impose
// itself.
const (
	DefaultClientHeader     = "x-client-id"
	DefaultName             = "default"
	DefaultStatusCode       = 429
	DefaultMaxClientIDBytes = 256
	DefaultMaxWaiting       = 1000
	maxMaxWaiting           = 100000
	maxMaxWait              = time.Minute
	maxClientIDBytesLimit   = 4096
	maxNameLen              = 64
	maxHeaderNameLen        = 256
	maxCost                 = 1 << 20
)

// ParseSettings parses the plugin configuration: either the single-limit
// form (the limit's fields at the top level) or a "limits" list (limits.go).
// It is pure (no clock, no host calls), so every Envoy worker reaches the
// same verdict on the same bytes: a worker whose start fails after the
// canary passed would skip the filter.
func ParseSettings(data []byte) (Settings, error) {
	var top rawConfig
	if err := decodeStrict(data, &top, ""); err != nil {
		return Settings{}, err
	}
	if top.Limits == nil {
		cfg, err := parseLimit(&top, fieldParser{})
		if err != nil {
			return Settings{}, err
		}
		return Settings{Limits: []Config{cfg}}, nil
	}
	return parseLimits(&top)
}

// ParseConfig parses a plugin configuration that holds exactly one limit,
// in either form: the configuration of tests and tools that run one.
func ParseConfig(data []byte) (Config, error) {
	s, err := ParseSettings(data)
	if err != nil {
		return Config{}, err
	}
	if len(s.Limits) != 1 {
		return Config{}, fieldError("limits", "this caller runs exactly one limit, got "+strconv.Itoa(len(s.Limits)))
	}
	return s.Limits[0], nil
}

// parseLimit parses one limit from raw, whose fields are the limit's own or
// inherited (p.label says which name an error gives the field).
func parseLimit(raw *rawConfig, p fieldParser) (Config, error) {
	var spans []windowSpan
	if raw.Windows != nil {
		// (Parsed first: a windows that is no array, null say, is that
		// field's error, not one of the fields it would rule out.)
		if spans = p.windows("windows", raw.Windows); p.err != nil {
			return Config{}, p.err
		}
		for _, f := range []string{"capacity", "cycle"} {
			if given(raw, f) {
				return Config{}, fieldError(p.label(f), "not allowed with windows: each window gives its own capacity and cycle")
			}
		}
		for _, f := range []string{"max_share", "caps"} {
			if given(raw, f) {
				return Config{}, fieldError(p.label(f), "not supported with windows: give each window its own limit")
			}
		}
	}
	var capacity int64
	var cycle time.Duration
	if spans != nil {
		capacity, cycle = spans[len(spans)-1].capacity, spans[len(spans)-1].cycle // the shortest window
	} else {
		capacity = p.integer("capacity", raw.Capacity, 0, 1, engine.MaxCapacity, true)
		cycle = p.duration("cycle", raw.Cycle, 0, engine.MinCycleLength, engine.MaxCycle, true)
	}
	if p.err != nil {
		return Config{}, p.err
	}
	cfg := Config{Engine: engine.Defaults(capacity, cycle)}
	p.parseFields(raw, &cfg)
	if p.err != nil {
		return Config{}, p.err
	}
	if cfg.Cost > capacity && spans == nil { // (each window's is checked by expandWindows)
		return Config{}, fieldError(p.label("cost"), "must not exceed capacity ("+strconv.FormatInt(capacity, 10)+"), got "+strconv.FormatInt(cfg.Cost, 10))
	}
	if err := checkCaps(&cfg, p.label); err != nil {
		return Config{}, err
	}
	// The shared-data map is per vm_id, so the limit's name keeps limits
	// that share a vm_id apart.
	cfg.Engine.KeyPrefix = "borrowcycle/" + cfg.Name
	if err := cfg.Engine.Validate(); err != nil {
		return Config{}, fromEngineError(err, p.label)
	}
	if err := checkPacedCost(&cfg.Engine, cfg.Cost, p.label("cost")); err != nil {
		return Config{}, err
	}
	if spans != nil {
		if err := expandWindows(&cfg, spans, raw.MinCycle != nil, p.label); err != nil {
			return Config{}, err
		}
	}
	return cfg, nil
}

// fromEngineError maps the engine's validation error onto the contract's
// field names. The checks above make it unreachable for the user-facing
// fields; it stays as the backstop if the engine's bounds tighten.
func fromEngineError(err error, label func(string) string) error {
	var fe *engine.FieldError
	if !errors.As(err, &fe) {
		return fieldError(label("config"), err.Error())
	}
	field := fe.Field
	if field == "key_prefix" {
		field = "name"
	}
	return fieldError(label(field), fe.Reason)
}

// decodeStrict reads one JSON object into raw; at names the object in
// errors ("" for the whole configuration). Field names must match
// exactly: json.Unmarshal into a struct would match them ignoring case
// ("Capacity" setting capacity), so the object is read as a map and each
// key looked up. A key given twice keeps its last value, as encoding/json
// does.
//
// json.Decoder is avoided on purpose: its io.Reader call keeps every Read
// method reachable, which links the WASI import fd_read, and Envoy provides
// only a fixed set of WASI functions.
func decodeStrict(data []byte, raw *rawConfig, at string) error {
	trimmed := bytes.TrimSpace(data)
	switch {
	case len(trimmed) == 0 && at == "":
		return fieldError("capacity", "required")
	case len(trimmed) == 0 || trimmed[0] != '{':
		if !json.Valid(trimmed) {
			return jsonError(json.Unmarshal(trimmed, new(any)))
		}
		if at != "" {
			return fieldError(at, "must be an object, got "+jsonKind(trimmed))
		}
		return fieldError("json", "the configuration must be a JSON object, got "+jsonKind(trimmed))
	}
	members, names, err := objectMembers(trimmed)
	if err != nil {
		return err
	}
	for _, name := range names {
		dst := raw.field(name)
		if dst == nil || at != "" && name == "limits" || at == "" && name == "unlimited" {
			return fieldError(join(at, name), "unknown field")
		}
		*dst = members[name]
	}
	return nil
}

// objectMembers decodes a JSON object into its members and their names,
// sorted: with several wrong fields the same one is reported every time.
func objectMembers(obj []byte) (map[string]json.RawMessage, []string, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(obj, &members); err != nil {
		return nil, nil, jsonError(err)
	}
	names := make([]string, 0, len(members))
	for name := range members {
		names = append(names, name)
	}
	sort.Strings(names)
	return members, names, nil
}

// join names a field inside the object at ("" for the top level).
func join(at, field string) string {
	if at == "" {
		return field
	}
	return at + "." + field
}

// jsonError turns encoding/json's errors into errors of the "json" field:
// the document itself is wrong, not one setting.
func jsonError(err error) error {
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		return fieldError("json", "malformed at byte "+strconv.FormatInt(syn.Offset, 10)+": "+syn.Error())
	}
	return fieldError("json", err.Error())
}

// fieldParser parses fields in order and keeps the first error, so a
// configuration is reported field by field in the contract's order. For an
// element of limits, at is its name ("limits[2]"), own its fields and top
// the top level's: an error names a field the element inherits from the
// top level by its top-level name, and any other as "limits[2].field".
type fieldParser struct {
	err      error
	at       string
	own, top *rawConfig
}

// label is the name of field in errors.
func (p *fieldParser) label(field string) string {
	if p.own == nil || given(p.own, field) || !given(p.top, field) {
		return join(p.at, field)
	}
	return field
}

// given reports whether raw holds field.
func given(raw *rawConfig, field string) bool {
	f := raw.field(field)
	return f != nil && *f != nil
}

func (p *fieldParser) fail(field, reason string) {
	if p.err == nil {
		p.err = fieldError(p.label(field), reason)
	}
}

// present reports whether a field was given; null is rejected as a wrong
// type rather than read as "use the default", so a templating mistake that
// renders null is not silently accepted.
func (p *fieldParser) present(field string, raw json.RawMessage, want string, required bool) bool {
	if raw == nil {
		if required {
			p.fail(field, "required")
		}
		return false
	}
	if got := jsonKind(raw); got != want {
		p.fail(field, "must be "+want+", got "+got)
		return false
	}
	return true
}

func (p *fieldParser) integer(field string, raw json.RawMessage, def, lo, hi int64, required bool) int64 {
	if !p.present(field, raw, "a number", required) {
		return def
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < lo || n > hi {
		p.fail(field, "must be an integer in ["+strconv.FormatInt(lo, 10)+", "+strconv.FormatInt(hi, 10)+"], got "+string(raw))
		return def
	}
	return n
}

func (p *fieldParser) number(field string, raw json.RawMessage, def, lo, hi float64) float64 {
	if !p.present(field, raw, "a number", false) {
		return def
	}
	x, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsNaN(x) || x < lo || x > hi {
		p.fail(field, "must be a number in ["+strconv.FormatFloat(lo, 'g', -1, 64)+", "+strconv.FormatFloat(hi, 'g', -1, 64)+"], got "+string(raw))
		return def
	}
	return x
}

// duration parses a Go duration string in (lo, hi].
func (p *fieldParser) duration(field string, raw json.RawMessage, def, lo, hi time.Duration, required bool) time.Duration {
	d, ok := p.parseDuration(field, raw, required)
	if !ok {
		return def
	}
	switch {
	case lo == 0 && (d <= 0 || d > hi):
		p.fail(field, "must be in (0s, "+hi.String()+"], got "+d.String())
		return def
	case lo > 0 && (d < lo || d > hi):
		p.fail(field, "must be in ["+lo.String()+", "+hi.String()+"], got "+d.String())
		return def
	}
	return d
}

// delay parses a duration that may be 0: in [0, hi], 0 when absent.
func (p *fieldParser) delay(field string, raw json.RawMessage, hi time.Duration) time.Duration {
	d, ok := p.parseDuration(field, raw, false)
	if !ok {
		return 0
	}
	if d < 0 || d > hi {
		p.fail(field, "must be in [0s, "+hi.String()+"], got "+d.String())
		return 0
	}
	return d
}

// windowOffset parses where windows start within a cycle: a duration in
// [0, cycle), 0 when absent.
func (p *fieldParser) windowOffset(field string, raw json.RawMessage, cycle time.Duration) time.Duration {
	d, ok := p.parseDuration(field, raw, false)
	if !ok {
		return 0
	}
	if d < 0 || d >= cycle {
		p.fail(field, "must be in [0s, "+cycle.String()+"), got "+d.String())
		return 0
	}
	return d
}

// parseDuration reads a Go duration string; false when it is absent or
// invalid (the error is recorded).
func (p *fieldParser) parseDuration(field string, raw json.RawMessage, required bool) (time.Duration, bool) {
	s, ok := p.str(field, raw, required)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.fail(field, "invalid duration "+strconv.Quote(s))
		return 0, false
	}
	return d, true
}

func (p *fieldParser) boolean(field string, raw json.RawMessage, def bool) bool {
	if !p.present(field, raw, "a boolean", false) {
		return def
	}
	return raw[0] == 't'
}

func (p *fieldParser) str(field string, raw json.RawMessage, required bool) (string, bool) {
	if !p.present(field, raw, "a string", required) {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		p.fail(field, "invalid string: "+err.Error())
		return "", false
	}
	return s, true
}

func (p *fieldParser) enum(field string, raw json.RawMessage, def string, allowed ...string) string {
	s, ok := p.str(field, raw, false)
	if !ok {
		return def
	}
	if indexOf(allowed, s) < 0 {
		p.fail(field, "must be one of "+quoteAll(allowed)+", got "+strconv.Quote(s))
		return def
	}
	return s
}

// headerName accepts an HTTP field name (RFC 9110 token characters) and
// lower-cases it, the form in which Envoy stores and looks up headers.
func (p *fieldParser) headerName(field string, raw json.RawMessage, def string) string {
	s, ok := p.str(field, raw, false)
	if !ok {
		return def
	}
	if s == "" || len(s) > maxHeaderNameLen || !isToken(s) {
		p.fail(field, "must be an HTTP header name of 1 to "+strconv.Itoa(maxHeaderNameLen)+" token characters, got "+strconv.Quote(s))
		return def
	}
	return strings.ToLower(s)
}

// name accepts [a-z0-9_]{1,64}: it is embedded in shared-data keys, metric
// names (which Envoy's stats_tags regexes must split unambiguously, hence no
// dots) and a quoted header parameter.
func (p *fieldParser) name(field string, raw json.RawMessage, def string) string {
	s, ok := p.str(field, raw, false)
	if !ok {
		return def
	}
	valid := s != "" && len(s) <= maxNameLen
	for i := 0; valid && i < len(s); i++ {
		c := s[i]
		valid = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_'
	}
	if !valid {
		p.fail(field, "must match [a-z0-9_]{1,64}, got "+strconv.Quote(s))
		return def
	}
	return s
}

// jsonKind names the JSON type of a raw value by its first byte; the
// decoder has already checked the value is well formed.
func jsonKind(raw json.RawMessage) string {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "a number"
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

func quoteAll(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}
