package filter

import (
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/borrowcycle/borrowcycle/engine"
)

func TestParseClientID(t *testing.T) {
	cases := []struct {
		field string // added to base; "" for none
		want  ClientIDSpec
	}{
		{"", ClientIDSpec{From: FromHeader, Header: "x-client-id"}},
		{`"client_header": "X-Tenant"`, ClientIDSpec{From: FromHeader, Header: "x-tenant"}},
		{`"client_id": {"from": "header"}`, ClientIDSpec{From: FromHeader, Header: "x-client-id"}},
		{`"client_id": {"from": "header", "header": "X-API-Key"}`, ClientIDSpec{From: FromHeader, Header: "x-api-key"}},
		{`"client_id": {"from": "source_address"}`, ClientIDSpec{From: FromSourceAddress, Property: "source\x00address"}},
		{`"client_id": {"from": "peer_principal"}`, ClientIDSpec{From: FromPeerPrincipal, Property: "connection\x00uri_san_peer_certificate"}},
		{`"client_id": {"from": "metadata", "filter": "envoy.filters.http.jwt_authn", "path": ["payload", "sub"]}`, ClientIDSpec{
			From: FromMetadata, Filter: "envoy.filters.http.jwt_authn", Path: []string{"payload", "sub"},
			Property: "metadata\x00filter_metadata\x00envoy.filters.http.jwt_authn\x00payload\x00sub"}},
	}
	for _, c := range cases {
		config := `{` + base + `}`
		if c.field != "" {
			config = withField(c.field)
		}
		cfg, err := ParseConfig([]byte(config))
		if err != nil {
			t.Errorf("%s: %v", c.field, err)
			continue
		}
		if !reflect.DeepEqual(cfg.ClientID, c.want) {
			t.Errorf("%s:\n got  %+v\n want %+v", c.field, cfg.ClientID, c.want)
		}
		if cfg.ClientHeader != c.want.Header {
			t.Errorf("%s: ClientHeader %q, want %q", c.field, cfg.ClientHeader, c.want.Header)
		}
	}
	spec := ClientIDSpec{From: FromMetadata, Filter: "f", Path: []string{"a", "b"}, Property: "metadata\x00filter_metadata\x00f\x00a\x00b"}
	if got := spec.PropertyPath(); !reflect.DeepEqual(got, []string{"metadata", "filter_metadata", "f", "a", "b"}) {
		t.Errorf("PropertyPath = %q", got)
	}
	if got := (&ClientIDSpec{From: FromHeader, Header: "x"}).PropertyPath(); got != nil {
		t.Errorf("header source PropertyPath = %q, want nil", got)
	}
}

func TestParseClientIDErrors(t *testing.T) {
	long := strings.Repeat("k", 257)
	path17 := `["a"` + strings.Repeat(`, "a"`, 16) + `]`
	cases := []struct{ field, want string }{
		{`"client_id": {"from": "header"}, "client_header": "x-a"`, `client_id: not allowed with client_header, its short form: give one of them`},
		{`"client_id": "header"`, `client_id: must be an object, got a string`},
		{`"client_id": null`, `client_id: must be an object, got null`},
		{`"client_id": {}`, `client_id.from: required`},
		{`"client_id": {"header": "x-a"}`, `client_id.from: required`},
		{`"client_id": {"from": "x"}`, `client_id.from: must be one of "header", "source_address", "peer_principal", "metadata", got "x"`},
		{`"client_id": {"from": "Header"}`, `client_id.from: must be one of "header", "source_address", "peer_principal", "metadata", got "Header"`},
		{`"client_id": {"from": 1}`, `client_id.from: must be a string, got a number`},
		{`"client_id": {"from": "header", "name": "x"}`, `client_id.name: unknown field`},
		{`"client_id": {"from": "header", "header": ""}`, `client_id.header: must be an HTTP header name of 1 to 256 token characters, got ""`},
		{`"client_id": {"from": "header", "header": "x id"}`, `client_id.header: must be an HTTP header name of 1 to 256 token characters, got "x id"`},
		{`"client_id": {"from": "header", "header": 3}`, `client_id.header: must be a string, got a number`},
		{`"client_id": {"from": "header", "path": ["a"]}`, `client_id.path: not allowed with from "header"`},
		{`"client_id": {"from": "source_address", "header": "x-a"}`, `client_id.header: not allowed with from "source_address"`},
		{`"client_id": {"from": "peer_principal", "filter": "f"}`, `client_id.filter: not allowed with from "peer_principal"`},
		{`"client_id": {"from": "metadata", "header": "x", "filter": "f", "path": ["a"]}`, `client_id.header: not allowed with from "metadata"`},
		{`"client_id": {"from": "metadata", "path": ["a"]}`, `client_id.filter: required`},
		{`"client_id": {"from": "metadata", "filter": "f"}`, `client_id.path: required`},
		{`"client_id": {"from": "metadata", "filter": "", "path": ["a"]}`, `client_id.filter: must be a string of 1 to 256 bytes without NUL, got ""`},
		{`"client_id": {"from": "metadata", "filter": "a\u0000b", "path": ["a"]}`, `client_id.filter: must be a string of 1 to 256 bytes without NUL, got "a\x00b"`},
		{`"client_id": {"from": "metadata", "filter": ["f"], "path": ["a"]}`, `client_id.filter: must be a string, got an array`},
		{`"client_id": {"from": "metadata", "filter": "f", "path": "a.b"}`, `client_id.path: must be an array, got a string`},
		{`"client_id": {"from": "metadata", "filter": "f", "path": []}`, `client_id.path: must hold 1 to 16 keys, got 0`},
		{`"client_id": {"from": "metadata", "filter": "f", "path": ` + path17 + `}`, `client_id.path: must hold 1 to 16 keys, got 17`},
		{`"client_id": {"from": "metadata", "filter": "f", "path": ["a", 2]}`, `client_id.path[1]: must be a string, got a number`},
		{`"client_id": {"from": "metadata", "filter": "f", "path": ["a", ""]}`, `client_id.path[1]: must be a string of 1 to 256 bytes without NUL, got ""`},
		{`"client_id": {"from": "metadata", "filter": "f", "path": ["` + long + `"]}`, `client_id.path[0]: must be a string of 1 to 256 bytes without NUL, got "` + long + `"`},
	}
	for _, c := range cases {
		_, err := ParseConfig([]byte(withField(c.field)))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s:\n got  %v\n want %s", c.field, err, c.want)
		}
	}
}

func TestClientIDInLimits(t *testing.T) {
	top := `"capacity": 10, "cycle": "1s", `
	// A limit that gives either spelling takes neither from the top level.
	s, err := ParseSettings([]byte(`{` + top + `"client_id": {"from": "source_address"}, "limits": [
		{"name": "a", "match": {"path_prefix": "/a"}},
		{"name": "b", "client_header": "x-tenant", "match": {"path_prefix": "/b"}},
		{"name": "c", "client_id": {"from": "peer_principal"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []IDSource{FromSourceAddress, FromHeader, FromPeerPrincipal} {
		if got := s.Limits[i].ClientID.From; got != want {
			t.Errorf("limits[%d] from %s, want %s", i, got, want)
		}
	}
	if s.Limits[1].ClientHeader != "x-tenant" {
		t.Errorf("limits[1] header %q", s.Limits[1].ClientHeader)
	}
	s, err = ParseSettings([]byte(`{` + top + `"client_header": "x-tenant", "limits": [{"name": "a", "client_id": {"from": "source_address"}}]}`))
	if err != nil || s.Limits[0].ClientID.From != FromSourceAddress {
		t.Errorf("a limit's client_id over a top-level client_header: %+v, %v", s.Limits, err)
	}
	for _, c := range []struct{ config, want string }{
		{`{` + top + `"limits": [{"name": "a", "client_id": {"from": "x"}}]}`, `limits[0].client_id.from: must be one of "header", "source_address", "peer_principal", "metadata", got "x"`},
		{`{` + top + `"limits": [{"name": "a", "client_header": "x-a", "client_id": {"from": "header"}}]}`, `limits[0].client_id: not allowed with client_header, its short form: give one of them`},
		{`{` + top + `"client_header": "x-a", "client_id": {"from": "header"}, "limits": [{"name": "a"}]}`, `client_id: not allowed with client_header, its short form: give one of them`},
		{`{` + top + `"limits": [{"name": "a", "unlimited": true, "client_id": {"from": "header"}, "match": {"path_exact": "/"}}, {"name": "b"}]}`, `limits[0].client_id: not allowed with unlimited: an unlimited rule has only name and match`},
	} {
		if _, err := ParseSettings([]byte(c.config)); err == nil || err.Error() != c.want {
			t.Errorf("%s:\n got  %v\n want %s", c.config, err, c.want)
		}
	}
}

func TestHeaderID(t *testing.T) {
	cases := []struct {
		first   string
		copies  int
		id      string
		verdict Verdict
	}{
		{"", 0, "", IDMissing},
		{"alice", 1, "alice", IDFound},
		{" alice\t", 1, "alice", IDFound},
		{" \t", 1, "", IDMissing},
		{"alice, bob", 1, "alice, bob", IDFound},
		{"alice", 2, "", IDAmbiguous},
		{"", 3, "", IDAmbiguous},
		{strings.Repeat("x", 17), 1, "", IDMissing},
	}
	for _, c := range cases {
		if id, v := HeaderID(c.first, c.copies, 16); id != c.id || v != c.verdict {
			t.Errorf("HeaderID(%q, %d) = %q, %d; want %q, %d", c.first, c.copies, id, v, c.id, c.verdict)
		}
	}
}

func TestAddressID(t *testing.T) {
	cases := []struct {
		value string
		found bool
		want  string // "" for anonymous
	}{
		{"10.0.0.7:51234", true, "10.0.0.7"},
		{"127.0.0.2:0", true, "127.0.0.2"}, // an address taken from x-forwarded-for has port 0
		{"[::1]:1234", true, "::1"},
		{"[2001:db8::1]:443", true, "2001:db8::1"},
		{"[fe80::1%eth0]:80", true, "fe80::1%eth0"},
		{"[::ffff:10.0.0.1]:80", true, "::ffff:10.0.0.1"},
		{"10.0.0.7:51234", false, ""},
		{"", true, ""},
		{"10.0.0.7", true, ""},
		{"10.0.0.7:", true, ""},
		{"10.0.0.7:port", true, ""},
		{":80", true, ""},
		{"[]:80", true, ""},
		{"[10.0.0.7]:80", true, ""},
		{"::1:80", true, ""},
		{"/var/run/envoy.sock", true, ""},
		{"envoy://internal_listener/:1", true, ""},
		{"host.example:80", true, ""},
		{"[::1:80", true, ""},
	}
	for _, c := range cases {
		got, ok := AddressID([]byte(c.value), c.found, 64)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("AddressID(%q, %t) = %q, %t; want %q", c.value, c.found, got, ok, c.want)
		}
	}
	if _, ok := AddressID([]byte("[2001:db8::1]:443"), true, 10); ok {
		t.Error("an address longer than max_client_id_bytes was taken")
	}
}

func TestPrincipalID(t *testing.T) {
	const spiffe = "spiffe://cluster.local/ns/a/sa/one"
	if id, ok := PrincipalID([]byte(spiffe), true, 256); !ok || id != spiffe {
		t.Errorf("PrincipalID(%q) = %q, %t", spiffe, id, ok)
	}
	for _, c := range []struct {
		value string
		found bool
		max   int
	}{{"", false, 256}, {"", true, 256}, {spiffe, false, 256}, {spiffe, true, len(spiffe) - 1}} {
		if id, ok := PrincipalID([]byte(c.value), c.found, c.max); ok {
			t.Errorf("PrincipalID(%q, %t, %d) = %q, want anonymous", c.value, c.found, c.max, id)
		}
	}
}

// TestMetadataID feeds MetadataID the bytes Envoy's property ABI gives for
// each kind of value (e2e/identity_test.go checks them against real
// Envoy): only strings are ids.
func TestMetadataID(t *testing.T) {
	double := func(x float64) string {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint64(b, math.Float64bits(x))
		return string(b)
	}
	// The proxy-wasm pairs encoding of {"sub": "alice"}: the count, each
	// key's and value's length, then each NUL-terminated.
	pairs := "\x01\x00\x00\x00\x03\x00\x00\x00\x05\x00\x00\x00sub\x00alice\x00"
	for _, ok := range []string{"alice", "zoë", "user@example.com", "a b", "12345", "spiffe://x/y"} {
		if id, got := MetadataID([]byte(ok), true, 256); !got || id != ok {
			t.Errorf("MetadataID(%q) = %q, %t; want the string", ok, id, got)
		}
	}
	for name, v := range map[string]string{
		"empty": "", "true": "\x01", "false": "\x00", "object": pairs, "empty object": "\x00\x00\x00\x00",
		"12345": double(12345), "a timestamp": double(1764100000), "-7": double(-7), "0.5": double(0.5), "1e13": double(1e13),
		"invalid UTF-8": "\xff\xfe", "a control byte": "a\tb", "DEL": "a\x7f",
	} {
		if id, ok := MetadataID([]byte(v), true, 256); ok {
			t.Errorf("%s (%q): taken as id %q", name, v, id)
		}
	}
	if _, ok := MetadataID([]byte("alice"), false, 256); ok {
		t.Error("a missing value was taken")
	}
	if _, ok := MetadataID([]byte("alice"), true, 4); ok {
		t.Error("a value longer than max_client_id_bytes was taken")
	}
}

// props is a request with properties, keyed by their NUL-joined path.
type props struct {
	headers
	values map[string]string
}

func (p props) Property(path string) ([]byte, bool) {
	v, ok := p.values[path]
	return []byte(v), ok
}

func TestDecideBySource(t *testing.T) {
	const jwt = "metadata\x00filter_metadata\x00envoy.filters.http.jwt_authn\x00payload\x00sub"
	cases := []struct {
		name, clientID string
		req            Request
		id             string // "" for anonymous
	}{
		{"header", `{"from": "header", "header": "x-user"}`, headers{{"x-user", "u1"}, {"x-client-id", "other"}}, "u1"},
		{"address", `{"from": "source_address"}`, props{headers{{"x-client-id", "forged"}}, map[string]string{"source\x00address": "10.1.2.3:4567"}}, "10.1.2.3"},
		{"no address", `{"from": "source_address"}`, props{headers{{"x-client-id", "forged"}}, nil}, ""},
		{"principal", `{"from": "peer_principal"}`, props{nil, map[string]string{"connection\x00uri_san_peer_certificate": "spiffe://td/ns/a/sa/b"}}, "spiffe://td/ns/a/sa/b"},
		{"plaintext", `{"from": "peer_principal"}`, props{headers{{"x-client-id", "forged"}}, nil}, ""},
		{"claim", `{"from": "metadata", "filter": "envoy.filters.http.jwt_authn", "path": ["payload", "sub"]}`, props{nil, map[string]string{jwt: "alice"}}, "alice"},
		{"number claim", `{"from": "metadata", "filter": "envoy.filters.http.jwt_authn", "path": ["payload", "sub"]}`, props{nil, map[string]string{jwt: "\x00\x00\x00\x00\x80\x1c\xc8@"}}, ""},
	}
	for _, c := range cases {
		f, clock := mustFilter(t, `{"capacity": 5, "cycle": "10s", "client_id": `+c.clientID+`}`)
		clock.Advance(0)
		o := f.Decide(c.req)
		if o.Client != c.id {
			t.Errorf("%s: client %q, want %q", c.name, o.Client, c.id)
		}
		if want := c.id != ""; o.Decision.Allowed != want || !want && o.Decision.Reason != engine.ReasonAnonymous {
			t.Errorf("%s: decision %+v", c.name, o.Decision)
		}
	}
}

func TestDecideRefusesAmbiguousHeader(t *testing.T) {
	f, _ := mustFilter(t, `{"capacity": 5, "cycle": "10s"}`)
	o := f.Decide(headers{{"x-client-id", "alice"}, {"x-client-id", "bob"}})
	if o.Client != "" || o.Decision.Allowed || o.Decision.Reason != engine.ReasonAmbiguousID {
		t.Fatalf("two headers: %+v", o)
	}
	want := Reply{Status: 429, Headers: [][2]string{{"x-borrowcycle-reason", "ambiguous_id"}},
		Body: []byte("borrowcycle: ambiguous_id: the client id header appears more than once\n")}
	if got := f.Reply(o); !reflect.DeepEqual(got, want) {
		t.Errorf("reply:\n got  %+v\n want %+v", got, want)
	}
	if got := string(f.AccessLog(o)); got != "limit=default action=rejected reason=ambiguous_id share=0 remaining=0 client=-" {
		t.Errorf("access log %q", got)
	}
	// In passthrough mode it is admitted as a would-be rejection, without
	// rate-limit headers.
	f, _ = mustFilter(t, `{"capacity": 5, "cycle": "10s", "mode": "passthrough"}`)
	o = f.Decide(headers{{"x-client-id", "alice"}, {"x-client-id", "alice"}})
	if !o.Decision.Allowed || !o.Decision.WouldReject || o.Decision.Reason != engine.ReasonAmbiguousID {
		t.Errorf("passthrough: %+v", o.Decision)
	}
	if h := f.ResponseHeaders(o); len(h) != 0 {
		t.Errorf("passthrough ambiguous_id gets headers %q", h)
	}
}

func TestAnonymousBodyNamesTheSource(t *testing.T) {
	for clientID, want := range map[string]string{
		`{"from": "header", "header": "X-User"}`:                  `borrowcycle: anonymous: missing or invalid client id header "x-user"`,
		`{"from": "source_address"}`:                              "borrowcycle: anonymous: no usable client address",
		`{"from": "peer_principal"}`:                              "borrowcycle: anonymous: no URI SAN in a peer certificate: the connection is not mutual TLS",
		`{"from": "metadata", "filter": "f", "path": ["a", "b"]}`: `borrowcycle: anonymous: missing or invalid client id in metadata "f" ["a","b"]`,
	} {
		f, _ := mustFilter(t, `{"capacity": 5, "cycle": "10s", "client_id": `+clientID+`}`)
		if got := string(f.Reply(Outcome{Decision: engine.Decision{Reason: engine.ReasonAnonymous}}).Body); got != want+"\n" {
			t.Errorf("%s: body %q, want %q", clientID, got, want)
		}
	}
}

func TestSummaryNamesTheSource(t *testing.T) {
	f, _ := mustFilter(t, `{"capacity": 5, "cycle": "10s", "client_id": {"from": "metadata", "filter": "jwt", "path": ["payload", "sub"]}}`)
	if s := f.Summary(); !strings.Contains(s, `client_id metadata "jwt" ["payload","sub"],`) {
		t.Errorf("summary %q", s)
	}
	f, _ = mustFilter(t, `{"capacity": 5, "cycle": "10s"}`)
	if s := f.Summary(); !strings.Contains(s, `client_id header "x-client-id",`) {
		t.Errorf("summary %q", s)
	}
}

// max_ids_per_peer counts the ids a peer (its source address by default,
// or its mTLS principal) uses in a window: past the bound, too_many_ids
// until the window ends. A request with no peer is not bounded.
func TestMaxIDsPerPeer(t *testing.T) {
	from := func(addr, id string) Request {
		return props{headers{{"x-client-id", id}}, map[string]string{"source\x00address": addr + ":5000"}}
	}
	f, _ := mustFilter(t, `{"capacity": 100, "cycle": "10s", "max_ids_per_peer": 1}`)
	steps := []struct {
		req  Request
		want engine.Reason
	}{
		{from("10.0.0.1", "a"), engine.ReasonOK},
		{from("10.0.0.1", "b"), engine.ReasonTooManyIDs},
		{from("10.0.0.1", "a"), engine.ReasonOK},
		{from("10.0.0.2", "b"), engine.ReasonPending},         // its own first id: a newcomer (min_cycle)
		{headers{{"x-client-id", "c"}}, engine.ReasonPending}, // no address: a newcomer like any other
	}
	for i, s := range steps {
		d := f.Decide(s.req).Decision
		if d.Reason != s.want {
			t.Fatalf("step %d: %+v, want %s", i, d, s.want)
		}
	}
	reply := f.Reply(f.Decide(from("10.0.0.1", "z")))
	if reply.Status != 429 || !strings.Contains(string(reply.Body), "too_many_ids") {
		t.Fatalf("too_many_ids reply %+v", reply)
	}

	p, _ := mustFilter(t, `{"capacity": 100, "cycle": "10s", "max_ids_per_peer": 1, "peer": "peer_principal"}`)
	principal := func(p, id string) Request {
		return props{headers{{"x-client-id", id}}, map[string]string{"connection\x00uri_san_peer_certificate": p}}
	}
	if d := p.Decide(principal("spiffe://td/a", "a")).Decision; d.Reason == engine.ReasonTooManyIDs {
		t.Fatalf("first id of a principal: %+v", d)
	}
	if d := p.Decide(principal("spiffe://td/a", "b")).Decision; d.Reason != engine.ReasonTooManyIDs {
		t.Fatalf("second id of a principal: %+v, want too_many_ids", d)
	}
	// A peer longer than max_client_id_bytes is bounded all the same: the
	// bound is on client ids, and a long address must not escape it.
	short, _ := mustFilter(t, `{"capacity": 100, "cycle": "10s", "max_ids_per_peer": 1, "max_client_id_bytes": 8}`)
	for _, addr := range []string{"192.168.100.200", "[2001:db8:85a3::8a2e:370:7334]"} {
		if d := short.Decide(from(addr, "k1")).Decision; d.Reason == engine.ReasonTooManyIDs {
			t.Fatalf("first id of %s: %+v", addr, d)
		}
		if d := short.Decide(from(addr, "k2")).Decision; d.Reason != engine.ReasonTooManyIDs {
			t.Errorf("second id of %s, longer than max_client_id_bytes: %+v, want too_many_ids", addr, d)
		}
	}
	long, _ := mustFilter(t, `{"capacity": 100, "cycle": "10s", "max_ids_per_peer": 1, "peer": "peer_principal", "max_client_id_bytes": 16}`)
	spiffe := "spiffe://cluster.local/ns/attacker/sa/default"
	if d := long.Decide(principal(spiffe, "a")).Decision; d.Reason == engine.ReasonTooManyIDs {
		t.Fatalf("first id of a long principal: %+v", d)
	}
	if d := long.Decide(principal(spiffe, "b")).Decision; d.Reason != engine.ReasonTooManyIDs {
		t.Errorf("second id of a principal longer than max_client_id_bytes: %+v, want too_many_ids", d)
	}
}
