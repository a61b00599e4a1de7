// Package envoyrun renders envoy/envoy.yaml for a test or benchmark run and
// runs a real Envoy process on it. It is shared by the end-to-end tests and
// tools/benchenvoy, so both exercise the very file users deploy.
package envoyrun

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"
)

// Names in envoy/envoy.yaml that the rewriters look for.
const (
	IngressListener  = "ingress"
	UpstreamListener = "demo_upstream"
	UpstreamCluster  = "demo_upstream"
	WasmFilterName   = "envoy.filters.http.wasm"
)

// Bootstrap is a parsed Envoy bootstrap that can be edited and written back.
// It is kept as generic maps: the edits touch a handful of fields, and typed
// structs would have to mirror Envoy's whole schema.
type Bootstrap struct {
	root map[string]any
}

// LoadBootstrap parses the bootstrap at path.
func LoadBootstrap(path string) (*Bootstrap, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseBootstrap(raw)
}

// ParseBootstrap parses a bootstrap from YAML.
func ParseBootstrap(raw []byte) (*Bootstrap, error) {
	var root map[string]any
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, fmt.Errorf("parse bootstrap: %w", err)
	}
	if root == nil {
		return nil, errors.New("parse bootstrap: empty document")
	}
	return &Bootstrap{root: root}, nil
}

// DefaultBootstrap loads envoy/envoy.yaml from the repository.
func DefaultBootstrap() (*Bootstrap, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	return LoadBootstrap(filepath.Join(root, "envoy", "envoy.yaml"))
}

// Bytes renders the bootstrap as YAML.
func (b *Bootstrap) Bytes() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(b.root); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

// Ports are the three TCP ports of the demo bootstrap.
type Ports struct {
	Ingress, Admin, Upstream int
}

// SetPorts moves every socket to 127.0.0.1 and the given ports: tests and
// benchmarks run several Envoys side by side and must stay on loopback.
func (b *Bootstrap) SetPorts(p Ports) error {
	admin, err := path(b.root, "admin", "address", "socket_address")
	if err != nil {
		return err
	}
	setSocket(admin, p.Admin)
	for name, port := range map[string]int{IngressListener: p.Ingress, UpstreamListener: p.Upstream} {
		l, err := b.listener(name)
		if err != nil {
			return err
		}
		sa, err := path(l, "address", "socket_address")
		if err != nil {
			return err
		}
		setSocket(sa, port)
	}
	c, err := named(b.root, UpstreamCluster, "static_resources", "clusters")
	if err != nil {
		return err
	}
	sa, err := path(c, "load_assignment", "endpoints", 0, "lb_endpoints", 0, "endpoint", "address", "socket_address")
	if err != nil {
		return err
	}
	setSocket(sa, p.Upstream)
	return nil
}

func setSocket(sa any, port int) {
	m := sa.(map[string]any)
	m["address"] = "127.0.0.1"
	m["port_value"] = port
}

// SetWasmFile points the filter at a module on disk.
func (b *Bootstrap) SetWasmFile(file string) error {
	cfg, err := b.wasmPluginConfig()
	if err != nil {
		return err
	}
	code, err := path(cfg, "vm_config", "code")
	if err != nil {
		return err
	}
	code.(map[string]any)["local"] = map[string]any{"filename": file}
	return nil
}

// PluginConfig returns the plugin configuration string of the Wasm filter.
func (b *Bootstrap) PluginConfig() (string, error) {
	cfg, err := b.wasmPluginConfig()
	if err != nil {
		return "", err
	}
	v, err := Leaf(cfg, "configuration", "value")
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("wasm configuration value is %T, want a string", v)
	}
	return s, nil
}

// SetPluginConfig replaces the plugin configuration string (JSON, see
// docs/contract.md) of the Wasm filter.
func (b *Bootstrap) SetPluginConfig(config string) error {
	cfg, err := b.wasmPluginConfig()
	if err != nil {
		return err
	}
	setConfiguration(cfg, config)
	return nil
}

// setConfiguration sets a Wasm plugin config's configuration string.
func setConfiguration(cfg map[string]any, config string) {
	cfg["configuration"] = map[string]any{
		"@type": "type.googleapis.com/google.protobuf.StringValue",
		"value": config,
	}
}

// ReplaceWasmFilter swaps the Wasm filter for another HTTP filter (its
// name/typed_config map), or removes it when filter is nil. The load
// comparison uses it to build its baselines from the same file.
func (b *Bootstrap) ReplaceWasmFilter(filter map[string]any) error {
	return b.editAtWasmFilter(func(filters []any, i int) []any {
		if filter == nil {
			return append(filters[:i:i], filters[i+1:]...)
		}
		filters[i] = filter
		return filters
	})
}

// editAtWasmFilter replaces the ingress HTTP filter list by what edit makes
// of it, given the index of the Wasm filter in it.
func (b *Bootstrap) editAtWasmFilter(edit func(filters []any, wasm int) []any) error {
	hcm, err := b.ingressHCM()
	if err != nil {
		return err
	}
	filters, ok := hcm["http_filters"].([]any)
	if !ok {
		return errors.New("ingress has no http_filters list")
	}
	for i, f := range filters {
		if m, ok := f.(map[string]any); ok && m["name"] == WasmFilterName {
			hcm["http_filters"] = edit(filters, i)
			return nil
		}
	}
	return fmt.Errorf("ingress has no %s filter", WasmFilterName)
}

// WasmFilter returns the ingress Wasm filter entry (name and typed_config).
func (b *Bootstrap) WasmFilter() (map[string]any, error) {
	hcm, err := b.ingressHCM()
	if err != nil {
		return nil, err
	}
	return named(hcm, WasmFilterName, "http_filters")
}

// SetMaxRequestHeadersKB raises the ingress limit on request header size.
// Envoy's default (60 KiB) answers larger headers with 431 before any filter
// runs; tests that want the plugin itself to see a huge header raise it.
func (b *Bootstrap) SetMaxRequestHeadersKB(kb int) error {
	return b.SetIngressHCM("max_request_headers_kb", kb)
}

// SetIngressHCM sets one field of the ingress HTTP connection manager
// (e.g. use_remote_address, xff_num_trusted_hops). Like the other edits of
// the ingress, it changes its first filter chain: call AddIngressTLSChain
// last, so that the TLS chain copies the edited one.
func (b *Bootstrap) SetIngressHCM(field string, value any) error {
	hcm, err := b.ingressHCM()
	if err != nil {
		return err
	}
	hcm[field] = value
	return nil
}

// InsertHTTPFilterBeforeWasm puts filter (its name/typed_config map) in the
// ingress filter chain just before the Wasm filter, where a filter whose
// results the plugin reads (jwt_authn's dynamic metadata) must run.
func (b *Bootstrap) InsertHTTPFilterBeforeWasm(filter map[string]any) error {
	return b.editAtWasmFilter(func(filters []any, i int) []any {
		return append(append(append([]any{}, filters[:i]...), filter), filters[i:]...)
	})
}

// AddIngressTLSChain makes the ingress listener serve TLS beside plaintext,
// as an Istio sidecar in permissive mode does: a TLS inspector tells the
// two apart, and a second filter chain, a copy of the first with
// transportSocket (an envoy.transport_sockets.tls entry), takes the TLS
// connections. Both chains run the same filters, so one limit sees both.
func (b *Bootstrap) AddIngressTLSChain(transportSocket map[string]any) error {
	l, err := b.listener(IngressListener)
	if err != nil {
		return err
	}
	chains, ok := l["filter_chains"].([]any)
	if !ok || len(chains) == 0 {
		return errors.New("ingress has no filter chain")
	}
	tlsChain, ok := clone(chains[0]).(map[string]any)
	if !ok {
		return errors.New("ingress filter chain is not a map")
	}
	tlsChain["filter_chain_match"] = map[string]any{"transport_protocol": "tls"}
	tlsChain["transport_socket"] = transportSocket
	l["filter_chains"] = append(chains, tlsChain)
	inspector := map[string]any{
		"name": "envoy.filters.listener.tls_inspector",
		"typed_config": map[string]any{
			"@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector",
		},
	}
	lf, _ := l["listener_filters"].([]any)
	l["listener_filters"] = append(lf, inspector)
	return nil
}

// clone deep-copies a decoded YAML document.
func clone(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = clone(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = clone(e)
		}
		return out
	}
	return v
}

func (b *Bootstrap) listener(name string) (map[string]any, error) {
	return named(b.root, name, "static_resources", "listeners")
}

func (b *Bootstrap) ingressHCM() (map[string]any, error) {
	l, err := b.listener(IngressListener)
	if err != nil {
		return nil, err
	}
	v, err := path(l, "filter_chains", 0, "filters", 0, "typed_config")
	if err != nil {
		return nil, err
	}
	return v.(map[string]any), nil
}

// wasmPluginConfig returns the PluginConfig (typed_config.config) of the
// ingress Wasm filter.
func (b *Bootstrap) wasmPluginConfig() (map[string]any, error) {
	l, err := b.listener(IngressListener)
	if err != nil {
		return nil, err
	}
	return listenerPluginConfig(l)
}

// listenerPluginConfig returns the PluginConfig of the Wasm filter of a
// listener shaped like the ingress one.
func listenerPluginConfig(l map[string]any) (map[string]any, error) {
	hcm, err := path(l, "filter_chains", 0, "filters", 0, "typed_config")
	if err != nil {
		return nil, err
	}
	f, err := named(hcm, WasmFilterName, "http_filters")
	if err != nil {
		return nil, err
	}
	v, err := path(f, "typed_config", "config")
	if err != nil {
		return nil, err
	}
	return v.(map[string]any), nil
}

// IngressToLDS moves the ingress listener from static_resources to a
// file-based LDS source at file (an absolute path), which Envoy watches:
// replacing the file by a rename pushes an update. It returns the listener,
// for the caller to write with WriteLDS and change later.
func (b *Bootstrap) IngressToLDS(file string) (map[string]any, error) {
	l, err := b.listener(IngressListener)
	if err != nil {
		return nil, err
	}
	sr := b.root["static_resources"].(map[string]any)
	var kept []any
	for _, e := range sr["listeners"].([]any) {
		if m, ok := e.(map[string]any); !ok || m["name"] != IngressListener {
			kept = append(kept, e)
		}
	}
	sr["listeners"] = kept
	// Envoy requires a node identity for any xDS source, files included.
	if _, ok := b.root["node"]; !ok {
		b.root["node"] = map[string]any{"id": "borrowcycle", "cluster": "borrowcycle"}
	}
	b.root["dynamic_resources"] = map[string]any{"lds_config": map[string]any{
		"resource_api_version": "V3",
		"path_config_source":   map[string]any{"path": file},
	}}
	return l, nil
}

// SetListenerPluginConfig replaces the plugin configuration of the Wasm
// filter of a listener shaped like the ingress one (see IngressToLDS).
func SetListenerPluginConfig(l map[string]any, config string) error {
	cfg, err := listenerPluginConfig(l)
	if err != nil {
		return err
	}
	setConfiguration(cfg, config)
	return nil
}

// WriteLDS writes listeners as an LDS discovery response to file, by
// writing a temporary file beside it and renaming it over file: Envoy
// watches for the rename and never reads a half-written file.
func WriteLDS(file string, listeners ...map[string]any) error {
	res := make([]any, len(listeners))
	for i, l := range listeners {
		typed := map[string]any{"@type": "type.googleapis.com/envoy.config.listener.v3.Listener"}
		for k, v := range l {
			typed[k] = v
		}
		res[i] = typed
	}
	raw, err := yaml.Marshal(map[string]any{"resources": res})
	if err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// path walks maps by string keys and lists by int indexes to a map (the
// callers edit one).
func path(node any, steps ...any) (any, error) {
	cur, err := Leaf(node, steps...)
	if err != nil {
		return nil, err
	}
	if _, ok := cur.(map[string]any); !ok {
		return nil, fmt.Errorf("%v: %T, want a map", steps, cur)
	}
	return cur, nil
}

// Leaf walks a decoded YAML or JSON document: maps by string keys and
// lists by int indexes.
func Leaf(node any, steps ...any) (any, error) {
	cur := node
	for i, s := range steps {
		switch k := s.(type) {
		case string:
			m, ok := cur.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%v: not a map at %q", steps[:i], k)
			}
			if cur, ok = m[k]; !ok {
				return nil, fmt.Errorf("%v: no key %q", steps[:i], k)
			}
		case int:
			l, ok := cur.([]any)
			if !ok || k >= len(l) {
				return nil, fmt.Errorf("%v: no list element %d", steps[:i], k)
			}
			cur = l[k]
		}
	}
	return cur, nil
}

// named finds the element called name in the list at steps.
func named(node any, name string, steps ...any) (map[string]any, error) {
	parent, err := path(node, steps[:len(steps)-1]...)
	if err != nil {
		return nil, err
	}
	last := steps[len(steps)-1].(string)
	list, ok := parent.(map[string]any)[last].([]any)
	if !ok {
		return nil, fmt.Errorf("%v is not a list", steps)
	}
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			return m, nil
		}
	}
	return nil, fmt.Errorf("%v has no element named %q", steps, name)
}

// RepoRoot finds the repository root: the nearest directory upwards from
// the working directory whose go.mod declares this module. Tests run in
// their package directory and tools from the root, so both find it.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		raw, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(raw, []byte("module github.com/borrowcycle/borrowcycle\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.mod of github.com/borrowcycle/borrowcycle) not found above the working directory")
		}
		dir = parent
	}
}
