package envoyrun

import (
	"strings"
	"testing"
)

// These run without Envoy: they catch a change to envoy/envoy.yaml that the
// rewriters no longer understand before any Envoy is started on it.

func TestRewriteShippedBootstrap(t *testing.T) {
	b, err := DefaultBootstrap()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetPorts(Ports{Ingress: 41001, Admin: 41002, Upstream: 41003}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetWasmFile("/tmp/x.wasm"); err != nil {
		t.Fatal(err)
	}
	if err := b.SetPluginConfig(`{"capacity": 7, "cycle": "3s"}`); err != nil {
		t.Fatal(err)
	}
	if err := b.SetMaxRequestHeadersKB(99); err != nil {
		t.Fatal(err)
	}
	raw, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	out := string(raw)
	for _, want := range []string{
		"port_value: 41001", "port_value: 41002", "port_value: 41003",
		"filename: /tmp/x.wasm", `'{"capacity": 7, "cycle": "3s"}'`, "max_request_headers_kb: 99",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered bootstrap lacks %q", want)
		}
	}
	// The upstream port appears twice: the listener and the cluster endpoint.
	if n := strings.Count(out, "port_value: 41003"); n != 2 {
		t.Errorf("upstream port appears %d times, want 2 (listener and cluster)", n)
	}
	for _, gone := range []string{"0.0.0.0", "port_value: 10000", "port_value: 9901", "/etc/envoy/borrowcycle.wasm"} {
		if strings.Contains(out, gone) {
			t.Errorf("rendered bootstrap still contains %q", gone)
		}
	}
	cfg, err := b.PluginConfig()
	if err != nil || cfg != `{"capacity": 7, "cycle": "3s"}` {
		t.Errorf("PluginConfig() = %q, %v", cfg, err)
	}
}

func TestReplaceWasmFilter(t *testing.T) {
	b, err := DefaultBootstrap()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ReplaceWasmFilter(map[string]any{"name": "envoy.filters.http.local_ratelimit"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WasmFilter(); err == nil {
		t.Error("the Wasm filter is still there after ReplaceWasmFilter")
	}
	raw, _ := b.Bytes()
	if !strings.Contains(string(raw), "envoy.filters.http.local_ratelimit") {
		t.Error("the replacement filter is missing")
	}

	b, _ = DefaultBootstrap()
	if err := b.ReplaceWasmFilter(nil); err != nil {
		t.Fatal(err)
	}
	raw, _ = b.Bytes()
	if strings.Contains(string(raw), WasmFilterName) || !strings.Contains(string(raw), "envoy.filters.http.router") {
		t.Errorf("removing the Wasm filter should leave the router alone:\n%s", raw)
	}
	if err := b.ReplaceWasmFilter(nil); err == nil {
		t.Error("removing a missing Wasm filter should fail")
	}
}

// TestIdentityEdits: the edits of e2e/identity_test.go put jwt_authn before
// the Wasm filter, set connection manager fields, and add a TLS chain that
// copies the edited plaintext one.
func TestIdentityEdits(t *testing.T) {
	b, err := DefaultBootstrap()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetIngressHCM("use_remote_address", true); err != nil {
		t.Fatal(err)
	}
	if err := b.InsertHTTPFilterBeforeWasm(map[string]any{"name": "envoy.filters.http.jwt_authn"}); err != nil {
		t.Fatal(err)
	}
	tls := map[string]any{"name": "envoy.transport_sockets.tls"}
	if err := b.AddIngressTLSChain(tls); err != nil {
		t.Fatal(err)
	}
	l, err := b.listener(IngressListener)
	if err != nil {
		t.Fatal(err)
	}
	chains := l["filter_chains"].([]any)
	if len(chains) != 2 {
		t.Fatalf("%d filter chains, want 2", len(chains))
	}
	for i, c := range chains {
		hcm, err := Leaf(c, "filters", 0, "typed_config")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range hcm.(map[string]any)["http_filters"].([]any) {
			names = append(names, f.(map[string]any)["name"].(string))
		}
		if got := strings.Join(names, " "); got != "envoy.filters.http.jwt_authn "+WasmFilterName+" envoy.filters.http.router" {
			t.Errorf("chain %d filters: %s", i, got)
		}
		if hcm.(map[string]any)["use_remote_address"] != true {
			t.Errorf("chain %d: use_remote_address not set", i)
		}
	}
	if _, ok := chains[0].(map[string]any)["transport_socket"]; ok {
		t.Error("the plaintext chain got the transport socket")
	}
	if m, _ := Leaf(chains[1], "filter_chain_match", "transport_protocol"); m != "tls" {
		t.Errorf("TLS chain match = %v", m)
	}
	if v, _ := Leaf(l, "listener_filters", 0, "name"); v != "envoy.filters.listener.tls_inspector" {
		t.Errorf("listener filter = %v", v)
	}
	// The copy is deep: editing the first chain leaves the second alone.
	if err := b.SetIngressHCM("xff_num_trusted_hops", 1); err != nil {
		t.Fatal(err)
	}
	if v, _ := Leaf(chains[1], "filters", 0, "typed_config", "xff_num_trusted_hops"); v != nil {
		t.Errorf("the TLS chain shares the first chain's maps")
	}
}

// Ports handed out to Envoys started side by side never repeat, even when
// a port closed after one choice is free again for the next. (The kernel
// hands a closed loopback port out again often: about one bind in ten of
// 2,000 in a row got a port it had given before, so 1,000 choices without
// the once-per-process rule meet a repeat.)
func TestFreePortsNeverRepeat(t *testing.T) {
	seen := map[int]bool{}
	for i := 0; i < 1000; i++ {
		ports, err := freePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
}
