package filter

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Bounds of the "limits" form. Each limit has its own limiter and shared
// state, and a request is matched against the limits in order, so the list
// is kept to what a filter in front of one service needs.
const (
	MaxLimits          = 64
	MaxHeaderMatches   = 16
	maxMatchValueBytes = 1024
	maxMethodBytes     = 32
)

// Match is which requests a limit decides. Every condition given must hold;
// the zero Match holds for every request.
type Match struct {
	PathPrefix string // "" when not given
	PathExact  string // "" when not given
	Methods    []string
	Headers    []HeaderMatch // sorted by name
}

// HeaderMatch is one header condition: the header is present with exactly
// Value, or present at all when Any.
type HeaderMatch struct {
	Name  string // lower-cased
	Value string
	Any   bool
}

// IsZero reports whether m holds for every request.
func (m *Match) IsZero() bool {
	return m.PathPrefix == "" && m.PathExact == "" && len(m.Methods) == 0 && len(m.Headers) == 0
}

// Request is what matching and admission read of a request: its headers,
// pseudo-headers (":path", ":method") included, by lower-case name, and
// the host properties a client id source names. The host reads them from
// Envoy on demand, so a header or property no limit needs is never read.
type Request interface {
	// Header is the first value of the header name.
	Header(name string) (value string, found bool)
	// HeaderCopies is the first value of the header name and the number of
	// times the header appears in the request (0 when absent).
	HeaderCopies(name string) (first string, copies int)
	// Property is the value of the host property at path, its elements
	// joined by NUL bytes (ClientIDSpec.Property); found is false when
	// the host has no such property. The value is only read during the
	// call of Decide.
	Property(path string) (value []byte, found bool)
}

// requestLine is the path and method of one request, read once and only
// when some limit needs them.
type requestLine struct {
	path, method string
}

// holds reports whether m holds for the request. Path conditions compare
// the path without its query string: "/search?q=x" matches path_exact
// "/search".
func (m *Match) holds(line *requestLine, req Request) bool {
	if m.PathExact != "" && line.path != m.PathExact {
		return false
	}
	if m.PathPrefix != "" && !strings.HasPrefix(line.path, m.PathPrefix) {
		return false
	}
	if len(m.Methods) > 0 && indexOf(m.Methods, line.method) < 0 {
		return false
	}
	for i := range m.Headers {
		h := &m.Headers[i]
		v, found := req.Header(h.Name)
		if !found || !h.Any && v != h.Value {
			return false
		}
	}
	return true
}

// stripQuery cuts the query string off a request path.
func stripQuery(path string) string {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		return path[:i]
	}
	return path
}

// parseLimits parses the "limits" form. The top level's fields other than
// limits are defaults that every limit inherits and may override; name and
// match are each limit's own, so the top level may not give them.
func parseLimits(top *rawConfig) (Settings, error) {
	for _, field := range []string{"name", "match"} {
		if given(top, field) {
			return Settings{}, fieldError(field, "not allowed at the top level with limits: each limit gives its own")
		}
	}
	if k := jsonKind(top.Limits); k != "an array" {
		return Settings{}, fieldError("limits", "must be an array, got "+k)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(top.Limits, &elems); err != nil {
		return Settings{}, jsonError(err)
	}
	if len(elems) == 0 || len(elems) > MaxLimits {
		return Settings{}, fieldError("limits", "must hold 1 to "+strconv.Itoa(MaxLimits)+" limits, got "+strconv.Itoa(len(elems)))
	}
	s := Settings{Limits: make([]Config, 0, len(elems))}
	catchAll := -1 // the first limit without a match
	for i, elem := range elems {
		at := "limits[" + strconv.Itoa(i) + "]"
		var own rawConfig
		if err := decodeStrict(elem, &own, at); err != nil {
			return Settings{}, err
		}
		if own.Name == nil {
			return Settings{}, fieldError(at+".name", "required: each limit needs its own name")
		}
		cfg, err := parseElement(&own, top, at)
		if err != nil {
			return Settings{}, err
		}
		if catchAll >= 0 {
			return Settings{}, fieldError(at, "unreachable: limits["+strconv.Itoa(catchAll)+"] has no match, so it decides every request")
		}
		for j := range s.Limits {
			if s.Limits[j].Name == cfg.Name {
				return Settings{}, fieldError(at+".name", "duplicate of limits["+strconv.Itoa(j)+"].name "+strconv.Quote(cfg.Name))
			}
		}
		if cfg.Match.IsZero() {
			catchAll = i
		}
		s.Limits = append(s.Limits, cfg)
	}
	if s.Limits[s.Primary()].Unlimited {
		return Settings{}, fieldError("limits", "every limit is unlimited: at least one must limit")
	}
	return s, nil
}

// parseElement parses the element of limits at at: a limit, inheriting the
// top level's fields, or an unlimited rule, which takes a name and a match
// only.
func parseElement(own, top *rawConfig, at string) (Config, error) {
	p := fieldParser{at: at, own: own, top: top}
	if !p.boolean("unlimited", own.Unlimited, false) {
		if p.err != nil {
			return Config{}, p.err
		}
		merged := inherit(own, top)
		return parseLimit(&merged, p)
	}
	for _, field := range inheritedFields {
		if given(own, field) {
			return Config{}, fieldError(join(at, field), "not allowed with unlimited: an unlimited rule has only name and match")
		}
	}
	cfg := Config{Unlimited: true}
	cfg.Name = p.name("name", own.Name, "")
	cfg.Match = p.match("match", own.Match)
	return cfg, p.err
}

// inherit is own with every field it does not give taken from top.
// client_header and client_id are two spellings of one setting: a limit
// that gives either takes neither from the top level. Likewise windows
// and capacity or cycle: a limit that gives windows takes no capacity or
// cycle, and one that gives either takes no windows.
func inherit(own, top *rawConfig) rawConfig {
	merged := *own
	ownsID := own.ClientHeader != nil || own.ClientID != nil
	ownsWindows := own.Windows != nil
	ownsSpan := own.Capacity != nil || own.Cycle != nil
	for _, name := range inheritedFields {
		if ownsID && (name == "client_header" || name == "client_id") ||
			ownsWindows && (name == "capacity" || name == "cycle") || ownsSpan && name == "windows" {
			continue
		}
		if dst := merged.field(name); *dst == nil {
			*dst = *top.field(name)
		}
	}
	return merged
}

// inheritedFields are the fields a limit takes from the top level when it
// does not give them: all but its name, its match, and the fields of the
// limits form itself.
var inheritedFields = func() []string {
	var names []string
	for i := range schema {
		switch n := schema[i].name; n {
		case "name", "match", "limits", "unlimited":
		default:
			names = append(names, n)
		}
	}
	return names
}()

// match parses a match object: absent holds for every request, and an
// empty object is refused as the likely slip it is.
func (p *fieldParser) match(field string, raw json.RawMessage) Match {
	var m Match
	if !p.present(field, raw, "an object", false) {
		return m
	}
	members, names, err := objectMembers(raw)
	if err != nil {
		p.fail(field, err.Error())
		return m
	}
	if len(names) == 0 {
		p.fail(field, "must give at least one of path_prefix, path_exact, methods, headers; omit match to match every request")
		return m
	}
	for _, name := range names {
		sub := field + "." + name
		switch v := members[name]; name {
		case "path_prefix":
			m.PathPrefix = p.path(sub, v)
		case "path_exact":
			m.PathExact = p.path(sub, v)
		case "methods":
			m.Methods = p.methods(sub, v)
		case "headers":
			m.Headers = p.headerMatches(sub, v)
		default:
			p.fail(sub, "unknown field")
		}
	}
	return m
}

// path accepts an absolute path without a query string: matching compares
// the request path with its query string cut off.
func (p *fieldParser) path(field string, raw json.RawMessage) string {
	s, ok := p.str(field, raw, true)
	switch {
	case !ok:
	case s == "" || s[0] != '/' || len(s) > maxMatchValueBytes:
		p.fail(field, "must be a path starting with \"/\" of at most "+strconv.Itoa(maxMatchValueBytes)+" bytes, got "+strconv.Quote(s))
	case strings.ContainsAny(s, "?#"):
		p.fail(field, "must not contain \"?\" or \"#\": paths are matched without their query string, got "+strconv.Quote(s))
	default:
		return s
	}
	return ""
}

// methods accepts a non-empty list of distinct method names. Methods are
// case-sensitive (RFC 9110), and a lower-case "get" is refused rather than
// left to never match.
func (p *fieldParser) methods(field string, raw json.RawMessage) []string {
	if !p.present(field, raw, "an array", true) {
		return nil
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		p.fail(field, err.Error())
		return nil
	}
	if len(elems) == 0 {
		p.fail(field, "must list at least one method")
		return nil
	}
	out := make([]string, 0, len(elems))
	for i, e := range elems {
		sub := field + "[" + strconv.Itoa(i) + "]"
		s, ok := p.str(sub, e, true)
		if !ok {
			return nil
		}
		if s == "" || len(s) > maxMethodBytes || !isToken(s) || strings.ToUpper(s) != s {
			p.fail(sub, "must be an upper-case HTTP method of 1 to "+strconv.Itoa(maxMethodBytes)+" token characters, got "+strconv.Quote(s))
			return nil
		}
		if j := indexOf(out, s); j >= 0 {
			p.fail(sub, "duplicate of "+p.label(field)+"["+strconv.Itoa(j)+"] "+strconv.Quote(s))
			return nil
		}
		out = append(out, s)
	}
	return out
}

// headerMatches accepts an object of header name to exact value, or "*"
// for presence.
func (p *fieldParser) headerMatches(field string, raw json.RawMessage) []HeaderMatch {
	if !p.present(field, raw, "an object", true) {
		return nil
	}
	members, names, err := objectMembers(raw)
	if err != nil {
		p.fail(field, err.Error())
		return nil
	}
	if len(names) == 0 || len(names) > MaxHeaderMatches {
		p.fail(field, "must hold 1 to "+strconv.Itoa(MaxHeaderMatches)+" headers, got "+strconv.Itoa(len(names)))
		return nil
	}
	out := make([]HeaderMatch, 0, len(names))
	for _, name := range names {
		sub := field + "." + name
		lower := strings.ToLower(name)
		pseudo := lower == ":authority"
		if !pseudo && (name == "" || len(name) > maxHeaderNameLen || !isToken(name)) {
			p.fail(sub, "must be an HTTP header name of 1 to "+strconv.Itoa(maxHeaderNameLen)+" token characters, or \":authority\"")
			return nil
		}
		for _, h := range out {
			if h.Name == lower {
				p.fail(sub, "duplicate header (names are case-insensitive)")
				return nil
			}
		}
		v, ok := p.str(sub, members[name], true)
		if !ok {
			return nil
		}
		if v == "" || len(v) > maxMatchValueBytes {
			p.fail(sub, "must be \"*\" or a value of 1 to "+strconv.Itoa(maxMatchValueBytes)+" bytes")
			return nil
		}
		out = append(out, HeaderMatch{Name: lower, Value: v, Any: v == "*"})
	}
	return out
}

// String describes m for the start-up log line.
func (m *Match) String() string {
	if m.IsZero() {
		return "every request"
	}
	var parts []string
	if m.PathExact != "" {
		parts = append(parts, "path "+strconv.Quote(m.PathExact))
	}
	if m.PathPrefix != "" {
		parts = append(parts, "path prefix "+strconv.Quote(m.PathPrefix))
	}
	if len(m.Methods) > 0 {
		parts = append(parts, "methods "+strings.Join(m.Methods, ","))
	}
	for _, h := range m.Headers {
		v := strconv.Quote(h.Value)
		if h.Any {
			v = "present"
		}
		parts = append(parts, "header "+h.Name+" "+v)
	}
	return strings.Join(parts, " and ")
}
