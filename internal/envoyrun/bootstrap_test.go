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
