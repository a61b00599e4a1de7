package filter

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Where a limit takes its client id from (docs/contract.md, "Client id" and
// "Security"). The request header is the default and the only source a
// caller chooses freely; the others are what Envoy itself established about
// the request: the address it decided the request came from, the identity
// the peer's certificate proved, or a value another filter (jwt_authn)
// wrote after checking a token.

// IDSource is a value of client_id.from.
type IDSource uint8

// The values of client_id.from.
const (
	FromHeader IDSource = iota
	FromSourceAddress
	FromPeerPrincipal
	FromMetadata
)

var sourceNames = [...]string{"header", "source_address", "peer_principal", "metadata"}

// String is the source's name in the configuration.
func (s IDSource) String() string { return sourceNames[s] }

// Bounds of the metadata source.
const (
	maxMetadataPath    = 16
	maxMetadataKeyLen  = 256
	maxFilterNameBytes = 256
)

// The Envoy properties the property sources read (Envoy's attribute
// reference): source.address is the downstream address as host:port, after
// the connection manager applied use_remote_address and
// xff_num_trusted_hops; connection.uri_san_peer_certificate is the first
// URI SAN of the peer certificate, absent on a plaintext connection or a
// certificate without one.
var (
	sourceAddressPath = []string{"source", "address"}
	peerPrincipalPath = []string{"connection", "uri_san_peer_certificate"}
)

// ClientIDSpec is a limit's parsed client_id: where the id comes from.
type ClientIDSpec struct {
	From IDSource
	// Header is the request header of the header source, lower-cased
	// (Envoy looks headers up lower-cased); empty for the other sources.
	Header string
	// Filter and Path locate the metadata source's value in the request's
	// dynamic metadata: filter_metadata[Filter], then Path's keys.
	Filter string
	Path   []string
	// Property is the host property the property sources read, its path
	// elements joined by NUL bytes, the proxy-wasm encoding of a property
	// path; empty for the header source. Precomputed, so a request does not
	// encode it.
	Property string
}

// propertyKey encodes a property path as proxy_get_property takes it.
func propertyKey(path []string) string { return strings.Join(path, "\x00") }

// PropertyPath is the spec's property path, one element per string (for
// hosts whose API takes the elements); nil for the header source.
func (s *ClientIDSpec) PropertyPath() []string {
	if s.Property == "" {
		return nil
	}
	return strings.Split(s.Property, "\x00")
}

// String describes the source for the start-up log line.
func (s *ClientIDSpec) String() string {
	switch s.From {
	case FromHeader:
		return "header " + strconv.Quote(s.Header)
	case FromMetadata:
		return "metadata " + strconv.Quote(s.Filter) + " " + quotedPath(s.Path)
	}
	return s.From.String()
}

// quotedPath spells a metadata path as in the configuration: ["a","b"].
func quotedPath(path []string) string {
	q := make([]string, len(path))
	for i, k := range path {
		q[i] = strconv.Quote(k)
	}
	return "[" + strings.Join(q, ",") + "]"
}

// anonymousBody is the body of the anonymous reply: it says which source
// had no usable id, so that a caller knows what is missing.
func (s *ClientIDSpec) anonymousBody() string {
	switch s.From {
	case FromSourceAddress:
		return "borrowcycle: anonymous: no usable client address"
	case FromPeerPrincipal:
		return "borrowcycle: anonymous: no URI SAN in a peer certificate: the connection is not mutual TLS"
	case FromMetadata:
		return "borrowcycle: anonymous: missing or invalid client id in metadata " + strconv.Quote(s.Filter) + " " + quotedPath(s.Path)
	}
	return "borrowcycle: anonymous: missing or invalid client id header " + strconv.Quote(s.Header)
}

// Verdict is what a source made of one request's id.
type Verdict uint8

// The verdicts: an id, none (anonymous), or several (ambiguous).
const (
	IDFound Verdict = iota
	IDMissing
	IDAmbiguous
)

// ClientID turns the client header's value into the id the engine limits,
// or reports the request anonymous: header missing, nothing but spaces and
// tabs, or longer than maxBytes after trimming.
//
// Envoy rejects CR, LF and NUL in header values before the filter runs, but
// the id is only hashed and never echoed, so whatever bytes arrive are safe:
// they name a client like any other. The length bound keeps one request
// from making the plugin hash (and the guest allocate) an arbitrary amount.
func ClientID(value string, found bool, maxBytes int) (string, bool) {
	if !found {
		return "", false
	}
	id := trimSpaceTab(value)
	if id == "" || len(id) > maxBytes {
		return "", false
	}
	return id, true
}

// HeaderCopies is the first value of header name in pairs, and how many
// copies of it there are: what a host that lists the request's headers as
// pairs answers for Request.HeaderCopies.
func HeaderCopies(pairs [][2]string, name string) (string, int) {
	first, copies := "", 0
	for _, kv := range pairs {
		if kv[0] == name {
			if copies == 0 {
				first = kv[1]
			}
			copies++
		}
	}
	return first, copies
}

// HeaderID is the header source's id from the header's first value and the
// number of times the header appears in the request. A header sent more
// than once is ambiguous: which copy a proxy or an application in front of
// or behind Envoy reads differs, so a caller could be limited under one id
// and served under another. None is picked.
func HeaderID(first string, copies, maxBytes int) (string, Verdict) {
	if copies > 1 {
		return "", IDAmbiguous
	}
	if id, ok := ClientID(first, copies == 1, maxBytes); ok {
		return id, IDFound
	}
	return "", IDMissing
}

// AddressID is the source_address id: Envoy's source.address without its
// port ("10.0.0.7:51234" → "10.0.0.7", "[2001:db8::1]:443" → "2001:db8::1").
// Anything else (no port, an empty host, a pipe or internal address) has no
// usable address and is anonymous.
func AddressID(value []byte, found bool, maxBytes int) (string, bool) {
	if !found {
		return "", false
	}
	s := string(value)
	colon := strings.LastIndexByte(s, ':')
	if colon < 0 || !allDigits(s[colon+1:]) {
		return "", false
	}
	host := s[:colon]
	if len(host) >= 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
		if strings.IndexByte(host, ':') < 0 {
			return "", false // brackets hold an IPv6 address
		}
	} else if strings.IndexByte(host, ':') >= 0 || strings.IndexByte(host, '[') >= 0 {
		return "", false // an IPv6 address comes in brackets
	}
	if host == "" || len(host) > maxBytes || !isAddressText(host) {
		return "", false
	}
	return host, true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isAddressText accepts the characters of IPv4 and IPv6 text (a zone
// included): hex digits, '.', ':' and, after '%', a zone name.
func isAddressText(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F', c == '.', c == ':':
		case c == '%':
			return i+1 < len(s) && isToken(s[i+1:])
		default:
			return false
		}
	}
	return true
}

// PrincipalID is the peer_principal id: the URI SAN of the peer certificate
// as Envoy reports it (a SPIFFE id in Istio, spiffe://<trust domain>/ns/<ns>/sa/<sa>).
// Absent or empty (plaintext, or a certificate without a URI SAN) is
// anonymous.
func PrincipalID(value []byte, found bool, maxBytes int) (string, bool) {
	if !found || len(value) == 0 || len(value) > maxBytes {
		return "", false
	}
	return string(value), true
}

// MetadataID is the metadata id: the value at the configured path, which
// must be a non-empty string. Envoy's property ABI carries no type: a string
// comes as its bytes, while a number comes as the 8 bytes of a double, a
// boolean as one byte 0 or 1, and an object or a list as the length-prefixed
// pairs of the proxy-wasm map encoding. A value that is not valid UTF-8 or
// holds a control byte (C0 or DEL) is therefore not taken for a string:
// that refuses every boolean, object and list, every integer of magnitude
// below 2^44 (timestamps, numeric user ids: the low byte of such a double
// is 0) and most other numbers. Claims that carry ids are strings.
func MetadataID(value []byte, found bool, maxBytes int) (string, bool) {
	if !found || len(value) == 0 || len(value) > maxBytes || !utf8.Valid(value) {
		return "", false
	}
	for _, c := range value {
		if c < 0x20 || c == 0x7f {
			return "", false
		}
	}
	return string(value), true
}

// trimSpaceTab trims only what HTTP calls optional whitespace (SP, HTAB).
// strings.TrimSpace would also strip CR, LF, VT, FF and Unicode spaces, and
// the contract promises the narrower rule.
func trimSpaceTab(s string) string {
	start, end := 0, len(s)
	for start < end && (s[start] == ' ' || s[start] == '\t') {
		start++
	}
	for end > start && (s[end-1] == ' ' || s[end-1] == '\t') {
		end--
	}
	return s[start:end]
}

// clientID parses a limit's client identity: client_id, or its short form
// client_header (the header source with that header), or neither (the
// header source with x-client-id). Giving both is an error naming
// client_id.
func (p *fieldParser) clientID(raw *rawConfig) ClientIDSpec {
	const field = "client_id"
	if raw.ClientID == nil {
		return ClientIDSpec{From: FromHeader, Header: p.headerName("client_header", raw.ClientHeader, DefaultClientHeader)}
	}
	if raw.ClientHeader != nil {
		p.fail(field, "not allowed with client_header, its short form: give one of them")
		return ClientIDSpec{}
	}
	if !p.present(field, raw.ClientID, "an object", false) {
		return ClientIDSpec{}
	}
	members, names, err := objectMembers(raw.ClientID)
	if err != nil {
		p.fail(field, err.Error())
		return ClientIDSpec{}
	}
	for _, name := range names {
		switch name {
		case "from", "header", "filter", "path":
		default:
			p.fail(field+"."+name, "unknown field")
			return ClientIDSpec{}
		}
	}
	if members["from"] == nil {
		p.fail(field+".from", "required")
		return ClientIDSpec{}
	}
	from := p.enum(field+".from", members["from"], "", sourceNames[:]...)
	if p.err != nil {
		return ClientIDSpec{}
	}
	spec := ClientIDSpec{From: IDSource(indexOf(sourceNames[:], from))}
	// Each source takes only its own fields: a field another source reads
	// is most likely a source set wrong.
	own := map[IDSource][]string{FromHeader: {"header"}, FromMetadata: {"filter", "path"}}[spec.From]
	for _, name := range names {
		if name != "from" && indexOf(own, name) < 0 {
			p.fail(field+"."+name, "not allowed with from "+strconv.Quote(from))
			return ClientIDSpec{}
		}
	}
	switch spec.From {
	case FromHeader:
		spec.Header = p.headerName(field+".header", members["header"], DefaultClientHeader)
	case FromSourceAddress:
		spec.Property = propertyKey(sourceAddressPath)
	case FromPeerPrincipal:
		spec.Property = propertyKey(peerPrincipalPath)
	case FromMetadata:
		spec.Filter = p.metadataKey(field+".filter", members["filter"], maxFilterNameBytes)
		spec.Path = p.metadataPath(field+".path", members["path"])
		if p.err == nil {
			spec.Property = propertyKey(append([]string{"metadata", "filter_metadata", spec.Filter}, spec.Path...))
		}
	}
	return spec
}

// peerNames are the values of peer: what max_ids_per_peer counts client
// ids per. Only what the caller cannot choose.
var peerNames = []string{"source_address", "peer_principal"}

// peer parses peer (default source_address): the property source whose
// value names the peer.
func (p *fieldParser) peer(field string, raw json.RawMessage) ClientIDSpec {
	if p.enum(field, raw, peerNames[0], peerNames...) == "peer_principal" {
		return ClientIDSpec{From: FromPeerPrincipal, Property: propertyKey(peerPrincipalPath)}
	}
	return ClientIDSpec{From: FromSourceAddress, Property: propertyKey(sourceAddressPath)}
}

// RequestPeer is the peer of req under spec (source address or principal),
// empty when the request has none: then no per-peer bound applies. A peer
// of any length is bounded (the engine keeps its hash): max_client_id_bytes
// bounds client ids, and a peer past it must not escape the bound.
func RequestPeer(spec *ClientIDSpec, req Request) string {
	value, found := req.Property(spec.Property)
	var id string
	var ok bool
	if spec.From == FromPeerPrincipal {
		id, ok = PrincipalID(value, found, math.MaxInt)
	} else {
		id, ok = AddressID(value, found, math.MaxInt)
	}
	if !ok {
		return ""
	}
	return id
}

// metadataKey accepts a required string of 1 to maxLen bytes without NUL,
// which separates the elements of a property path.
func (p *fieldParser) metadataKey(field string, raw json.RawMessage, maxLen int) string {
	s, ok := p.str(field, raw, true)
	if !ok {
		return ""
	}
	if s == "" || len(s) > maxLen || strings.IndexByte(s, 0) >= 0 {
		p.fail(field, "must be a string of 1 to "+strconv.Itoa(maxLen)+" bytes without NUL, got "+strconv.Quote(s))
		return ""
	}
	return s
}

// metadataPath accepts a list of 1 to maxMetadataPath keys.
func (p *fieldParser) metadataPath(field string, raw json.RawMessage) []string {
	if !p.present(field, raw, "an array", true) {
		return nil
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		p.fail(field, err.Error())
		return nil
	}
	if len(elems) == 0 || len(elems) > maxMetadataPath {
		p.fail(field, "must hold 1 to "+strconv.Itoa(maxMetadataPath)+" keys, got "+strconv.Itoa(len(elems)))
		return nil
	}
	out := make([]string, 0, len(elems))
	for i, e := range elems {
		k := p.metadataKey(field+"["+strconv.Itoa(i)+"]", e, maxMetadataKeyLen)
		if p.err != nil {
			return nil
		}
		out = append(out, k)
	}
	return out
}
