package e2e

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"testing"

	"github.com/borrowcycle/borrowcycle/internal/envoyrun"
	"gopkg.in/yaml.v3"
)

// How the Istio configs are checked: the plugin's parser lives in package
// main (plugin/), which cannot be imported, so the plugin configuration in
// each YAML is run through the compiled plugin itself. `envoy --mode
// validate` builds the Wasm filter, which loads the module and runs its
// configure callback once; TestBadConfigRefusesToStart shows that validate
// rejects the configurations the plugin rejects, so a pass here means the
// real parser accepted the configuration.

func loadIstioYAML(t *testing.T, name string) map[string]any {
	t.Helper()
	root, err := envoyrun.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "envoy", "istio", name))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return doc
}

// field is envoyrun.Leaf, failing the test when the path is missing.
func field(t *testing.T, doc any, steps ...any) any {
	t.Helper()
	v, err := envoyrun.Leaf(doc, steps...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wantField(t *testing.T, doc any, want any, steps ...any) {
	t.Helper()
	if got := field(t, doc, steps...); got != want {
		t.Errorf("%v = %v, want %v", steps, got, want)
	}
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestIstioWasmPlugin(t *testing.T) {
	doc := loadIstioYAML(t, "wasmplugin.yaml")
	wantField(t, doc, "extensions.istio.io/v1alpha1", "apiVersion")
	wantField(t, doc, "WasmPlugin", "kind")
	wantField(t, doc, "HTTP", "spec", "type")
	if url, _ := field(t, doc, "spec", "url").(string); !regexp.MustCompile(`^oci://[^:]+:[\w.-]+$`).MatchString(url) {
		t.Errorf("spec.url = %q, want oci://<image>:<tag>", url)
	}
	if sum, _ := field(t, doc, "spec", "sha256").(string); !sha256Hex.MatchString(sum) {
		t.Errorf("spec.sha256 = %q, want 64 lower-case hex digits", sum)
	}
	if p, _ := field(t, doc, "spec", "phase").(string); !slices.Contains([]string{"AUTHN", "AUTHZ", "STATS"}, p) {
		t.Errorf("spec.phase = %q", p)
	}
	if f, _ := field(t, doc, "spec", "failStrategy").(string); !slices.Contains([]string{"FAIL_CLOSE", "FAIL_OPEN", "FAIL_RELOAD"}, f) {
		t.Errorf("spec.failStrategy = %q", f)
	}
	cfg, ok := field(t, doc, "spec", "pluginConfig").(map[string]any)
	if !ok {
		t.Fatal("spec.pluginConfig is not an object")
	}
	// Istio passes pluginConfig to the plugin as JSON.
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := localBootstrap(t, string(raw))
	validateOK(t, b, "wasmplugin")
}

// TestIstioWasmPluginMTLS checks the sidecar example that limits callers
// by their SPIFFE id: a WasmPlugin on the inbound side with client_id from
// peer_principal, and the STRICT PeerAuthentication beside it. Its
// pluginConfig goes through the compiled plugin like wasmplugin.yaml's.
func TestIstioWasmPluginMTLS(t *testing.T) {
	docs := loadIstioDocs(t, "wasmplugin-mtls.yaml")
	if len(docs) != 2 {
		t.Fatalf("%d documents, want the WasmPlugin and the PeerAuthentication", len(docs))
	}
	plugin, auth := docs[0], docs[1]
	wantField(t, plugin, "WasmPlugin", "kind")
	wantField(t, plugin, "HTTP", "spec", "type")
	wantField(t, plugin, "SERVER", "spec", "match", 0, "mode")
	wantField(t, plugin, "peer_principal", "spec", "pluginConfig", "client_id", "from")
	if sum, _ := field(t, plugin, "spec", "sha256").(string); !sha256Hex.MatchString(sum) {
		t.Errorf("spec.sha256 = %q, want 64 lower-case hex digits", sum)
	}
	wantField(t, auth, "PeerAuthentication", "kind")
	wantField(t, auth, "STRICT", "spec", "mtls", "mode")
	if !reflect.DeepEqual(field(t, plugin, "spec", "selector"), field(t, auth, "spec", "selector")) {
		t.Error("the WasmPlugin and the PeerAuthentication select different workloads")
	}
	raw, err := json.Marshal(field(t, plugin, "spec", "pluginConfig"))
	if err != nil {
		t.Fatal(err)
	}
	validateOK(t, localBootstrap(t, string(raw)), "wasmplugin-mtls")
}

// loadIstioDocs reads every YAML document of a file under envoy/istio.
func loadIstioDocs(t *testing.T, name string) []map[string]any {
	t.Helper()
	root, err := envoyrun.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "envoy", "istio", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var docs []map[string]any
	dec := yaml.NewDecoder(f)
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err == io.EOF {
			return docs
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		docs = append(docs, doc)
	}
}

func TestIstioEnvoyFilter(t *testing.T) {
	doc := loadIstioYAML(t, "envoyfilter.yaml")
	wantField(t, doc, "networking.istio.io/v1alpha3", "apiVersion")
	wantField(t, doc, "EnvoyFilter", "kind")
	patch := field(t, doc, "spec", "configPatches", 0)
	wantField(t, patch, "HTTP_FILTER", "applyTo")
	wantField(t, patch, "INSERT_BEFORE", "patch", "operation")
	wantField(t, patch, "envoy.filters.http.router", "match", "listener", "filterChain", "filter", "subFilter", "name")
	value, ok := field(t, patch, "patch", "value").(map[string]any)
	if !ok {
		t.Fatal("patch.value is not an object")
	}
	wantField(t, value, envoyrun.WasmFilterName, "name")
	config := field(t, value, "typed_config", "config")
	wantField(t, config, "borrowcycle", "vm_config", "vm_id")
	if _, set := config.(map[string]any)["fail_open"]; set {
		t.Error("the legacy fail_open is set; failure_policy replaces it")
	}
	if _, err := envoyrun.Leaf(config, "failure_policy"); err != nil {
		t.Errorf("failure_policy is not set: %v", err)
	}

	// Put the patched filter in place of the Wasm filter of the shipped
	// bootstrap, with the module path pointed at the build, and validate.
	needLocalEnvoy(t)
	field(t, config, "vm_config", "code").(map[string]any)["local"] = map[string]any{"filename": setup.wasm}
	b, err := envoyrun.DefaultBootstrap()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ReplaceWasmFilter(value); err != nil {
		t.Fatal(err)
	}
	validateOK(t, b, "envoyfilter")
}
