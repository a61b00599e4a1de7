package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/borrowcycle/borrowcycle/internal/envoyrun"
)

// The identity tests run client_id's sources against a real Envoy: the
// address Envoy settles on (source_address, with and without trusted
// x-forwarded-for hops), the mTLS peer's SPIFFE id (peer_principal), and a
// JWT claim that jwt_authn verified (metadata). Each shows, by behaviour,
// that two parties are limited as two clients, that the id the plugin took
// is the expected one (through the access log, log_client_id on), and that
// the x-client-id header a caller forges changes nothing.

// identityConfig is a small, quick limit for the identity tests: two
// registered clients share 10 per 2 s window as 5 and 5.
func identityConfig(clientID map[string]any) map[string]any {
	return map[string]any{
		"capacity": 10, "cycle": "2s", "min_cycle": "100ms",
		"client_id": clientID, "log_client_id": true,
	}
}

// caller is one party of the identity tests: its own connection (source
// address, certificate) and the headers it sends with every request.
type caller struct {
	name   string
	client *http.Client
	base   string // scheme://host:port of the listener
	header http.Header
	marks  atomic.Int64
}

// newCaller returns a caller that connects from the loopback address local
// ("" for any) with tlsConf (nil for plaintext). Linux routes all of
// 127.0.0.0/8 to the loopback interface, so a test can bind 127.0.0.2,
// 127.0.0.3… and Envoy sees distinct source addresses.
func newCaller(name string, tg *target, local string, tlsConf *tls.Config, header http.Header) *caller {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	base := tg.url
	if tlsConf != nil {
		base = "https://" + strings.TrimPrefix(tg.url, "http://")
	}
	if header == nil {
		header = http.Header{}
	}
	return &caller{name: name, base: base, header: header, client: &http.Client{
		Timeout: 15 * time.Second,
		Transport: &http.Transport{
			DialContext:         d.DialContext,
			TLSClientConfig:     tlsConf,
			MaxIdleConnsPerHost: 1,
			MaxConnsPerHost:     1,
			DisableCompression:  true,
		},
	}}
}

// get sends GET path with the caller's headers.
func (c *caller) get(path string) result {
	r := result{client: c.name}
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	if err != nil {
		r.err = err
		return r
	}
	for k, vs := range c.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	return do(c.client, req, r)
}

// loggedID sends one request on a path of its own and returns the raw id
// the access-log record names ("" for none: anonymous, or no record).
func (c *caller) loggedID(t *testing.T, tg *target) (string, result) {
	t.Helper()
	path := fmt.Sprintf("/who/%s/%d", url.PathEscape(c.name), c.marks.Add(1))
	r := c.get(path)
	line := tg.accessLog(t, path, 1)[0]
	if _, id, ok := strings.Cut(line, " id="); ok {
		return id, r
	}
	return "", r
}

// wantID checks that the plugin took want as c's id.
func wantID(t *testing.T, tg *target, c *caller, want string) {
	t.Helper()
	if got, r := c.loggedID(t, tg); got != want {
		t.Errorf("%s: the access log names id %q, want %q (%v)", c.name, got, want, r)
	}
}

// registerCaller sends as c until a request is not pending (a newcomer waits
// for the re-plan that counts it).
func registerCaller(t *testing.T, c *caller) {
	t.Helper()
	for range 100 {
		r := c.get("/")
		switch {
		case r.err != nil:
			t.Fatalf("%s: %v", c.name, r.err)
		case r.status == 200:
			return
		case r.reason() != "pending":
			t.Fatalf("%s: registering: %v", c.name, r)
		}
		time.Sleep(60 * time.Millisecond)
	}
	t.Fatalf("%s: still pending", c.name)
}

// checkSeparate shows that a and b are limited as two clients. Both are
// registered; then, in a fresh window (planned for two light clients: a
// share of half the capacity each), a asks until it is refused over_limit,
// and b must still be admitted. Were they one client, b would be refused
// too, since a's refusal means that client's share is spent.
func checkSeparate(t *testing.T, tg *target, a, b *caller) {
	t.Helper()
	registerCaller(t, a)
	registerCaller(t, b)
	untilNextWindow(tg.settings)
	capacity := int(tg.settings.Engine.Capacity)
	nA := 0
	var r result
	for range capacity + 1 {
		if r = a.get("/"); r.status != 200 {
			break
		}
		nA++
	}
	if r.reason() != "over_limit" || nA == 0 || nA >= capacity {
		t.Fatalf("%s: admitted %d of a %d capacity, then %v; want a share between", a.name, nA, capacity, r)
	}
	if r = b.get("/"); r.status != 200 {
		t.Errorf("%s refused right after %s used its share, as if they were one client: %v", b.name, a.name, r)
	}
	t.Logf("%s admitted %d then refused over_limit; %s admitted after", a.name, nA, b.name)
}

// checkForgeryIgnored: a, whose share is spent, forges x-client-id (a fresh
// id, then b's): still over_limit. Were the header read, the fresh id would
// be a newcomer (pending or admitted).
func checkForgeryIgnored(t *testing.T, a *caller, forged ...string) {
	t.Helper()
	for _, f := range forged {
		h := a.header.Clone()
		h.Set("x-client-id", f)
		forger := &caller{name: a.name + " as " + f, client: a.client, base: a.base, header: h}
		if r := forger.get("/"); r.reason() != "over_limit" {
			t.Errorf("%s: want over_limit (the header is not the id), got %v", forger.name, r)
		}
	}
}

// checkAnonymousAs checks an anonymous refusal with the source's body.
func checkAnonymousAs(t *testing.T, what string, r result, body string) {
	t.Helper()
	if r.err != nil || r.status != 429 || r.reason() != "anonymous" {
		t.Errorf("%s: want 429 anonymous, got %v", what, r)
		return
	}
	if got := bodyLine(r.body); got != body {
		t.Errorf("%s: body %q, want %q", what, got, body)
	}
	if v := r.header.Values("retry-after"); len(v) != 0 {
		t.Errorf("%s: anonymous refusal with retry-after %q", what, v)
	}
}

// TestSourceAddressIdentity runs the source_address source behind the
// three settings of the connection manager that decide the address.
func TestSourceAddressIdentity(t *testing.T) {
	cfg := identityConfig(map[string]any{"from": "source_address"})
	hcm := func(fields map[string]any) startOpts {
		return startOpts{edit: func(b *envoyrun.Bootstrap) error {
			for k, v := range fields {
				if err := b.SetIngressHCM(k, v); err != nil {
					return err
				}
			}
			return nil
		}}
	}
	xff := func(v string) http.Header { return http.Header{"X-Forwarded-For": {v}, "X-Client-Id": {"shared"}} }

	// The edge setting: the address is the connection's peer, whatever the
	// x-forwarded-for header says.
	t.Run("remote_address_hops_0", func(t *testing.T) {
		tg := configuredTarget(t, cfg, hcm(map[string]any{"use_remote_address": true, "xff_num_trusted_hops": 0}))
		a := newCaller("127.0.0.2", tg, "127.0.0.2", nil, xff("198.51.100.7"))
		b := newCaller("127.0.0.3", tg, "127.0.0.3", nil, xff("198.51.100.7"))
		wantID(t, tg, a, "127.0.0.2")
		wantID(t, tg, b, "127.0.0.3")
		checkSeparate(t, tg, a, b)
		checkForgeryIgnored(t, a, "fresh", "127.0.0.3")
		// Spoofing x-forwarded-for does not make a someone else.
		a.header.Set("X-Forwarded-For", "127.0.0.3")
		if r := a.get("/"); r.reason() != "over_limit" {
			t.Errorf("a with x-forwarded-for of b: want over_limit, got %v", r)
		}
	})

	// Behind one trusted proxy (a load balancer that appends the address
	// it saw): the last x-forwarded-for entry is the client; without the
	// header, the peer.
	t.Run("remote_address_hops_1", func(t *testing.T) {
		tg := configuredTarget(t, cfg, hcm(map[string]any{"use_remote_address": true, "xff_num_trusted_hops": 1}))
		a := newCaller("lb for 198.51.100.7", tg, "127.0.0.2", nil, xff("203.0.113.50, 198.51.100.7"))
		b := newCaller("lb for 198.51.100.8", tg, "127.0.0.2", nil, xff("198.51.100.8"))
		direct := newCaller("direct", tg, "127.0.0.2", nil, nil)
		wantID(t, tg, a, "198.51.100.7")
		wantID(t, tg, b, "198.51.100.8")
		wantID(t, tg, direct, "127.0.0.2")
		checkSeparate(t, tg, a, b)
		checkForgeryIgnored(t, a, "fresh")
	})

	// Envoy's default (use_remote_address false): the address comes from
	// x-forwarded-for, which any caller writes. Recorded here because the
	// Security section warns against it at an edge.
	t.Run("default_trusts_xff", func(t *testing.T) {
		tg := configuredTarget(t, cfg, startOpts{})
		a := newCaller("spoofer 1", tg, "127.0.0.2", nil, xff("192.0.2.1"))
		b := newCaller("spoofer 2", tg, "127.0.0.2", nil, xff("192.0.2.2"))
		wantID(t, tg, a, "192.0.2.1")
		wantID(t, tg, b, "192.0.2.2")
	})
}

// testPKI is a CA, a server certificate for the ingress and client
// certificates carrying SPIFFE URI SANs, written as PEM files for Envoy.
type testPKI struct {
	ca                 *x509.Certificate
	caKey              *ecdsa.PrivateKey
	pool               *x509.CertPool
	caFile             string
	certFile, keyFile  string // the server's
	serial             int64
	dir                string
	clientCertificates map[string]tls.Certificate // by URI SAN
}

func newPKI(t *testing.T, dir string) *testPKI {
	t.Helper()
	p := &testPKI{dir: dir, clientCertificates: map[string]tls.Certificate{}}
	p.caKey = newKey(t)
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "borrowcycle e2e CA"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der := p.sign(t, tmpl, &p.caKey.PublicKey, nil, nil)
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, p.pool = ca, x509.NewCertPool()
	p.pool.AddCert(ca)
	p.caFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", der)
	key := newKey(t)
	der = p.sign(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "borrowcycle.test"},
		DNSNames:    []string{"borrowcycle.test"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, &key.PublicKey, p.ca, p.caKey)
	p.certFile = writePEM(t, dir, "server.pem", "CERTIFICATE", der)
	p.keyFile = writePEM(t, dir, "server-key.pem", "PRIVATE KEY", marshalKey(t, key))
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func marshalKey(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// sign issues tmpl for pub, self-signed when parent is nil.
func (p *testPKI) sign(t *testing.T, tmpl *x509.Certificate, pub *ecdsa.PublicKey, parent *x509.Certificate, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	p.serial++
	tmpl.SerialNumber = big.NewInt(p.serial)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	if parent == nil {
		parent, key = tmpl, p.caKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t *testing.T, dir, name, kind string, der []byte) string {
	t.Helper()
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// client returns the TLS configuration of a client whose certificate
// carries the URI SAN spiffeID ("" for a TLS client without a certificate).
func (p *testPKI) client(t *testing.T, spiffeID string) *tls.Config {
	t.Helper()
	conf := &tls.Config{RootCAs: p.pool, ServerName: "borrowcycle.test", MinVersion: tls.VersionTLS12}
	if spiffeID == "" {
		return conf
	}
	u, err := url.Parse(spiffeID)
	if err != nil {
		t.Fatal(err)
	}
	key := newKey(t)
	der := p.sign(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "workload"},
		URIs:        []*url.URL{u},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, &key.PublicKey, p.ca, p.caKey)
	conf.Certificates = []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}
	return conf
}

// transportSocket is the ingress's TLS: the server certificate, client
// certificates verified against the CA when sent, and not required, so
// that a TLS client without one reaches the plugin too.
func (p *testPKI) transportSocket() map[string]any {
	return map[string]any{
		"name": "envoy.transport_sockets.tls",
		"typed_config": map[string]any{
			"@type":                      "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
			"require_client_certificate": false,
			"common_tls_context": map[string]any{
				"tls_certificates": []any{map[string]any{
					"certificate_chain": map[string]any{"filename": p.certFile},
					"private_key":       map[string]any{"filename": p.keyFile},
				}},
				"validation_context": map[string]any{"trusted_ca": map[string]any{"filename": p.caFile}},
			},
		},
	}
}

// TestPeerPrincipalIdentity: two workloads with their own SPIFFE ids are
// limited separately over mTLS; the listener also takes plaintext (as a
// permissive Istio sidecar does), where there is no principal, so those
// requests are anonymous, as are TLS requests without a client certificate.
func TestPeerPrincipalIdentity(t *testing.T) {
	needLocalEnvoy(t)
	pki := newPKI(t, logDir(t))
	tg := configuredTarget(t, identityConfig(map[string]any{"from": "peer_principal"}), startOpts{
		edit: func(b *envoyrun.Bootstrap) error { return b.AddIngressTLSChain(pki.transportSocket()) },
	})
	const one, two = "spiffe://cluster.local/ns/a/sa/one", "spiffe://cluster.local/ns/b/sa/two"
	a := newCaller("sa/one", tg, "", pki.client(t, one), http.Header{"X-Client-Id": {two}})
	b := newCaller("sa/two", tg, "", pki.client(t, two), nil)
	wantID(t, tg, a, one)
	wantID(t, tg, b, two)
	checkSeparate(t, tg, a, b)
	checkForgeryIgnored(t, a, "fresh", two)

	const body = "borrowcycle: anonymous: no URI SAN in a peer certificate: the connection is not mutual TLS"
	plain := newCaller("plaintext", tg, "", nil, http.Header{"X-Client-Id": {one}})
	checkAnonymousAs(t, "plaintext with a forged header", plain.get("/"), body)
	noCert := newCaller("TLS without a client certificate", tg, "", pki.client(t, ""), http.Header{"X-Client-Id": {one}})
	checkAnonymousAs(t, noCert.name, noCert.get("/"), body)
}

// jwtIssuer signs ES256 tokens and publishes its key as a JWKS.
type jwtIssuer struct {
	key *ecdsa.PrivateKey
	kid string
}

const jwtIssuerName = "https://issuer.borrowcycle.test"

var b64 = base64.RawURLEncoding

func newIssuer(t *testing.T, kid string) *jwtIssuer { return &jwtIssuer{key: newKey(t), kid: kid} }

// jwks is the issuer's public key as a JSON Web Key Set (RFC 7517, 7518:
// an EC key is its curve and its coordinates, 32 bytes each for P-256).
func (j *jwtIssuer) jwks(t *testing.T) string {
	t.Helper()
	coord := func(n *big.Int) string { return b64.EncodeToString(n.FillBytes(make([]byte, 32))) }
	raw, err := json.Marshal(map[string]any{"keys": []any{map[string]any{
		"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": j.kid,
		"x": coord(j.key.X), "y": coord(j.key.Y),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// token signs claims (with iss, aud and exp added) as a compact JWS: the
// ES256 signature is r and s, 32 bytes each, over SHA-256 of
// header.payload (RFC 7515, 7518).
func (j *jwtIssuer) token(t *testing.T, claims map[string]any) string {
	t.Helper()
	all := map[string]any{"iss": jwtIssuerName, "aud": "borrowcycle", "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range claims {
		all[k] = v
	}
	head, err := json.Marshal(map[string]any{"alg": "ES256", "typ": "JWT", "kid": j.kid})
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	input := b64.EncodeToString(head) + "." + b64.EncodeToString(body)
	sum := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, j.key, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	return input + "." + b64.EncodeToString(sig)
}

// jwtFilter is jwt_authn checking the issuer's tokens, writing each valid
// token's payload to the dynamic metadata as "payload", and letting a
// request without a token through (an invalid one is refused 401).
func jwtFilter(t *testing.T, j *jwtIssuer) map[string]any {
	return map[string]any{
		"name": "envoy.filters.http.jwt_authn",
		"typed_config": map[string]any{
			"@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
			"providers": map[string]any{"e2e": map[string]any{
				"issuer":              jwtIssuerName,
				"audiences":           []any{"borrowcycle"},
				"local_jwks":          map[string]any{"inline_string": j.jwks(t)},
				"payload_in_metadata": "payload",
			}},
			"rules": []any{map[string]any{
				"match": map[string]any{"prefix": "/"},
				"requires": map[string]any{"requires_any": map[string]any{"requirements": []any{
					map[string]any{"provider_name": "e2e"},
					map[string]any{"allow_missing": map[string]any{}},
				}}},
			}},
		},
	}
}

func bearer(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

// TestJWTClaimIdentity: the metadata source on jwt_authn's payload.sub
// limits two subjects separately, whatever header they forge. A request
// without a token passes jwt_authn and is anonymous; a token jwt_authn
// refuses never reaches the plugin. Claims that are not strings (the
// payload object, a number, a boolean, each read by a limit of its own)
// are not ids: the request is anonymous.
func TestJWTClaimIdentity(t *testing.T) {
	iss := newIssuer(t, "k1")
	cfg := identityConfig(nil)
	delete(cfg, "client_id")
	const jwtFilterName = "envoy.filters.http.jwt_authn"
	claim := func(name, prefix string, path ...any) map[string]any {
		l := map[string]any{"name": name, "client_id": map[string]any{"from": "metadata", "filter": jwtFilterName, "path": path}}
		if prefix != "" {
			l["match"] = map[string]any{"path_prefix": prefix}
		}
		return l
	}
	// Limits on claims that are not strings, to see what the plugin makes
	// of Envoy's encodings of an object, a number and a boolean; then the
	// limit under test.
	cfg["limits"] = []any{
		claim("whole_payload", "/whole", "payload"),
		claim("by_uid", "/uid", "payload", "uid"),
		claim("by_admin", "/admin", "payload", "admin"),
		claim("by_sub", "", "payload", "sub"),
	}
	tg := configuredTarget(t, cfg, startOpts{
		edit: func(b *envoyrun.Bootstrap) error { return b.InsertHTTPFilterBeforeWasm(jwtFilter(t, iss)) },
	})
	alice := newCaller("alice", tg, "", nil, bearer(iss.token(t, map[string]any{"sub": "alice", "uid": 12345, "admin": true})))
	alice.header.Set("X-Client-Id", "bob")
	bob := newCaller("bob", tg, "", nil, bearer(iss.token(t, map[string]any{"sub": "bob"})))
	wantID(t, tg, alice, "alice")
	wantID(t, tg, bob, "bob")
	checkSeparate(t, tg, alice, bob)
	checkForgeryIgnored(t, alice, "fresh", "bob")

	body := `borrowcycle: anonymous: missing or invalid client id in metadata "envoy.filters.http.jwt_authn" ["payload","sub"]`
	anon := newCaller("no token", tg, "", nil, http.Header{"X-Client-Id": {"alice"}})
	checkAnonymousAs(t, anon.name, anon.get("/"), body)
	for _, c := range []struct{ what, path, spelled string }{
		{"the payload object", "/whole", `["payload"]`},
		{"a number claim", "/uid", `["payload","uid"]`},
		{"a boolean claim", "/admin", `["payload","admin"]`},
	} {
		want := `borrowcycle: anonymous: missing or invalid client id in metadata "envoy.filters.http.jwt_authn" ` + c.spelled
		checkAnonymousAs(t, c.what, alice.get(c.path), want)
	}
	// jwt_authn itself refuses a token whose sub is not a string.
	numeric := newCaller("numeric sub", tg, "", nil, bearer(iss.token(t, map[string]any{"sub": 12345})))
	if r := numeric.get("/"); r.status != http.StatusUnauthorized {
		t.Errorf("%s: want jwt_authn's 401, got %v", numeric.name, r)
	}

	forger := newIssuer(t, "k1")
	bad := newCaller("token of another key", tg, "", nil, bearer(forger.token(t, map[string]any{"sub": "alice"})))
	if r := bad.get("/"); r.status != http.StatusUnauthorized || r.reason() != "" {
		t.Errorf("%s: want jwt_authn's 401 before the plugin, got %v", bad.name, r)
	}
}

// TestDuplicateClientIDHeaderIsAmbiguous: a request naming its client twice
// is refused ambiguous_id, on the raw wire and through net/http, and
// counted; one header whose value holds a comma is one id.
func TestDuplicateClientIDHeaderIsAmbiguous(t *testing.T) {
	tg := configuredTarget(t, map[string]any{"capacity": 100, "cycle": "10s", "name": "dup"}, startOpts{})
	const body = "borrowcycle: ambiguous_id: the client id header appears more than once"
	check := func(what string, status int, h http.Header, got string) {
		t.Helper()
		if status != 429 || h.Get("x-borrowcycle-reason") != "ambiguous_id" || bodyLine(got) != body {
			t.Errorf("%s: want 429 ambiguous_id %q, got %d %q %q", what, body, status, h.Get("x-borrowcycle-reason"), got)
		}
		for _, name := range []string{"retry-after", "x-envoy-ratelimited", "x-ratelimit-limit"} {
			if v := h.Values(name); len(v) != 0 {
				t.Errorf("%s: ambiguous_id refusal carries %s %q", what, name, v)
			}
		}
	}
	resp, raw, err := rawGet(tg.url, "x-client-id: alice\r\nX-Client-ID: bob")
	if err != nil {
		t.Fatal(err)
	}
	check("two header lines", resp.StatusCode, resp.Header, raw)
	resp, raw, err = rawGet(tg.url, "x-client-id: alice\r\nx-client-id: alice")
	if err != nil {
		t.Fatal(err)
	}
	check("the same value twice", resp.StatusCode, resp.Header, raw)
	twice := newCaller("net/http, Add twice", tg, "", nil, http.Header{"X-Client-Id": {"alice", "bob"}})
	r := twice.get("/")
	check(twice.name, r.status, r.header, r.body)

	comma := newCaller("one header, a comma", tg, "", nil, http.Header{"X-Client-Id": {"alice, bob"}})
	if r := comma.get("/"); r.status != 200 {
		t.Errorf("%s: want admitted as one id, got %v", comma.name, r)
	}
	st, err := tg.flushedStats()
	if err != nil {
		t.Fatal(err)
	}
	if n := st["wasmcustom.borrowcycle.dup.requests_rejected.ambiguous_id"]; n != 3 {
		t.Errorf("requests_rejected.ambiguous_id = %d, want 3", n)
	}
	if n := st["wasmcustom.borrowcycle.dup.requests_rejected.anonymous"]; n != 0 {
		t.Errorf("requests_rejected.anonymous = %d, want 0", n)
	}
}

// TestRotationMeasurement measures, without asserting more than the
// promise to honest clients, what rotating ids buys an attacker. Capacity
// 30 per 10 s; two honest clients send 3 requests/s each under one id from
// their own source address; an attacker on a third address sends 3/s
// rotating 10 ids for two windows, then 30/s rotating 100 ids for two
// windows. With client_id from source_address the attacker is one client
// whatever ids it sends; with the header source (run beside it on a second
// Envoy, for comparison) each id is a client; with the header source and
// max_ids_per_peer 1 (the peer: the source address), the attacker's ids
// past its first are refused too_many_ids. Each party's admitted count per
// window is logged.
func TestRotationMeasurement(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of wall time")
	}
	needLocalEnvoy(t)
	// The parties' credentials for the trusted sources: a certificate or a
	// token each, the attacker's one of them whatever ids it sends.
	pki := newPKI(t, logDir(t))
	iss := newIssuer(t, "rotation")
	spiffe := [3]string{"spiffe://cluster.local/ns/a/sa/honest-1", "spiffe://cluster.local/ns/b/sa/honest-2", "spiffe://cluster.local/ns/c/sa/attacker"}
	byAddress := func(addrs [3]string) func(*testing.T, *target, int) *caller {
		return func(_ *testing.T, tg *target, i int) *caller { return newCaller(addrs[i], tg, addrs[i], nil, nil) }
	}
	runs := []struct {
		name   string
		source map[string]any
		opts   startOpts
		caller func(t *testing.T, tg *target, party int) *caller
	}{
		{"source_address", map[string]any{"from": "source_address"}, startOpts{}, byAddress([3]string{"127.0.0.2", "127.0.0.3", "127.0.0.4"})},
		{"header", map[string]any{"from": "header"}, startOpts{}, byAddress([3]string{"127.0.0.5", "127.0.0.6", "127.0.0.7"})},
		{"header+max_ids_per_peer", map[string]any{"from": "header"}, startOpts{}, byAddress([3]string{"127.0.0.8", "127.0.0.9", "127.0.0.10"})},
		{"peer_principal", map[string]any{"from": "peer_principal"},
			startOpts{edit: func(b *envoyrun.Bootstrap) error { return b.AddIngressTLSChain(pki.transportSocket()) }},
			func(t *testing.T, tg *target, i int) *caller {
				return newCaller(spiffe[i], tg, "", pki.client(t, spiffe[i]), nil)
			}},
		{"metadata", map[string]any{"from": "metadata", "filter": "envoy.filters.http.jwt_authn", "path": []any{"payload", "sub"}},
			startOpts{edit: func(b *envoyrun.Bootstrap) error { return b.InsertHTTPFilterBeforeWasm(jwtFilter(t, iss)) }},
			func(t *testing.T, tg *target, i int) *caller {
				sub := []string{"honest-1", "honest-2", "attacker"}[i]
				return newCaller(sub, tg, "", nil, bearer(iss.token(t, map[string]any{"sub": sub})))
			}},
	}
	for _, run := range runs {
		t.Run(run.name, func(t *testing.T) {
			t.Parallel()
			settings := map[string]any{"capacity": 30, "cycle": "10s", "client_id": run.source}
			bounded := run.name == "header+max_ids_per_peer"
			if bounded {
				settings["max_ids_per_peer"] = 1
			}
			tg := configuredTarget(t, settings, run.opts)
			table := measureRotation(t, tg, func(i int) *caller { return run.caller(t, tg, i) })
			cycle := tg.settings.Engine.Cycle
			var lines []string
			for _, w := range table.windows() {
				c := table.counts[w]
				lines = append(lines, fmt.Sprintf("window %d (%s): honest-1 %d/%d, honest-2 %d/%d, attacker %d/%d (%d ids seen admitted)",
					w-table.first, table.phase(w), c[0].admitted, c[0].sent, c[1].admitted, c[1].sent, c[2].admitted, c[2].sent, len(c[2].ids)))
			}
			t.Logf("client_id from %s, capacity 30 per %s:\n%s", run.name, cycle, strings.Join(lines, "\n"))
			if bounded {
				// The target: at most a third of the capacity, + 5%, for
				// the rotating caller, in every window.
				for _, w := range table.windows() {
					if a := table.counts[w][2].admitted; float64(a) > 30*(1.0/3+0.05) {
						t.Errorf("window %d: the rotating caller admitted %d of 30, want at most a third + 5%%", w-table.first, a)
					}
				}
			}
			if run.name == "header" {
				return
			}
			// What holds: the attacker is one of three clients, so in the
			// second window of each phase (all three registered a window
			// ago and asking for more than a third) each honest client
			// gets close to its third, 10.
			for _, w := range []int64{table.first + 1, table.first + 3} {
				for i, c := range table.counts[w][:2] {
					if c.admitted < 8 {
						t.Errorf("window %d: honest-%d admitted %d, want about 10 (a third of 30)", w-table.first, i+1, c.admitted)
					}
				}
			}
		})
	}
}

// rotationTable counts each party's requests per aligned window.
type rotationTable struct {
	mu     sync.Mutex
	first  int64 // the first window of the measurement
	counts map[int64]*[3]partyCount
}

type partyCount struct {
	sent, admitted int
	ids            map[string]bool // the attacker's ids that were admitted
}

func (rt *rotationTable) add(party int, window int64, id string, admitted bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	c := rt.counts[window]
	if c == nil {
		c = &[3]partyCount{}
		rt.counts[window] = c
	}
	p := &c[party]
	p.sent++
	if admitted {
		p.admitted++
		if party == 2 {
			if p.ids == nil {
				p.ids = map[string]bool{}
			}
			p.ids[id] = true
		}
	}
}

func (rt *rotationTable) windows() []int64 {
	var ws []int64
	for w := rt.first; w < rt.first+4; w++ {
		if rt.counts[w] == nil {
			rt.counts[w] = &[3]partyCount{}
		}
		ws = append(ws, w)
	}
	return ws
}

func (rt *rotationTable) phase(w int64) string {
	if w-rt.first < 2 {
		return "attacker 3/s over 10 ids"
	}
	return "attacker 30/s over 100 ids"
}

// measureRotation runs the four windows of TestRotationMeasurement from the
// start of an aligned window, with callers made by newParty (honest 1,
// honest 2, attacker), and returns the counts.
func measureRotation(t *testing.T, tg *target, newParty func(i int) *caller) *rotationTable {
	cycle := tg.settings.Engine.Cycle
	start := untilNextWindow(tg.settings)
	first, _, _ := engine.WindowAt(start.Add(time.Millisecond), cycle, 0)
	rt := &rotationTable{first: first, counts: map[int64]*[3]partyCount{}}
	end := start.Add(4 * cycle)
	var wg sync.WaitGroup
	party := func(i int, rate func(time.Time) time.Duration, id func(n int, at time.Time) string) {
		defer wg.Done()
		c := newParty(i)
		for n := 0; ; n++ {
			at := time.Now()
			if !at.Before(end) {
				return
			}
			c.header.Set("X-Client-Id", id(n, at))
			r := c.get("/")
			if r.err != nil {
				t.Errorf("party %d: %v", i, r.err)
				return
			}
			w, _, _ := engine.WindowAt(r.sent.Add(r.recv.Sub(r.sent)/2), cycle, 0)
			rt.add(i, w, c.header.Get("X-Client-Id"), r.status == 200)
			time.Sleep(time.Until(at.Add(rate(at))))
		}
	}
	honest := func(name string) func(int, time.Time) string { return func(int, time.Time) string { return name } }
	slow := func(time.Time) time.Duration { return time.Second / 3 }
	wg.Add(3)
	go party(0, slow, honest("honest-1"))
	go party(1, slow, honest("honest-2"))
	phase2 := start.Add(2 * cycle)
	go party(2, func(at time.Time) time.Duration {
		if at.Before(phase2) {
			return time.Second / 3
		}
		return time.Second / 30
	}, func(n int, at time.Time) string {
		if at.Before(phase2) {
			return "rotating-" + strconv.Itoa(n%10)
		}
		return "flood-" + strconv.Itoa(n%100)
	})
	wg.Wait()
	return rt
}
