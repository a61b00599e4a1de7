package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"gopkg.in/yaml.v3"
)

// modulePath is the plugin `make build` wrote; the Makefile's
// BORROWCYCLE_WASM names another build.
func modulePath() string {
	if env := os.Getenv("BORROWCYCLE_WASM"); env != "" {
		return env
	}
	return filepath.Join("..", "..", "build", "borrowcycle.wasm")
}

// readModule fails, not skips, when the module is missing: `make test`
// builds it first.
func readModule(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(modulePath())
	if err != nil {
		t.Fatalf("%v: run make build first", err)
	}
	return b
}

// wasmPluginExample is envoy/istio/wasmplugin.yaml, parsed.
type wasmPluginExample struct {
	Spec struct {
		URL    string `yaml:"url"`
		SHA256 string `yaml:"sha256"`
	} `yaml:"spec"`
}

func loadExample(t *testing.T) wasmPluginExample {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "envoy", "istio", "wasmplugin.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ex wasmPluginExample
	if err := yaml.Unmarshal(raw, &ex); err != nil {
		t.Fatalf("wasmplugin.yaml: %v", err)
	}
	return ex
}

// printedSHA256 runs the build command as `make image` does and returns
// the module's sha256 and the value it tells the reader to put in the
// WasmPlugin's sha256 field.
func printedSHA256(t *testing.T, out string) (module, plugin string) {
	t.Helper()
	var buf bytes.Buffer
	if err := buildCmd([]string{"-wasm", modulePath(), "-out", out}, &buf); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^module .* sha256:([0-9a-f]{64})$`).FindStringSubmatch(buf.String())
	p := regexp.MustCompile(`(?m)^  sha256: ([0-9a-f]{64})$`).FindStringSubmatch(buf.String())
	if m == nil || p == nil {
		t.Fatalf("build output lacks the module sha256 or the WasmPlugin sha256 line:\n%s", buf.String())
	}
	return m[1], p[1]
}

// TestPushPullAsIstio builds both variants as `make image` does, pushes them
// as `make push` does to an in-process registry, and fills the WasmPlugin
// example in the way its comments say. Then it fetches each image the way
// Istio's agent does (pull by url, compare the manifest digest with the
// sha256 field, take the module out of whichever shape the image has) and
// checks that the module that comes back is the one built.
func TestPushPullAsIstio(t *testing.T) {
	module := readModule(t)
	moduleSum := sha256.Sum256(module)
	out := t.TempDir()
	printedModule, printedPlugin := printedSHA256(t, out)
	if printedModule != hex.EncodeToString(moduleSum[:]) {
		t.Errorf("build printed module sha256 %s, the module's is %x", printedModule, moduleSum)
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	refs, err := PushRefs(host+"/borrowcycle:test", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := refs[1].String(), host+"/borrowcycle:test-compat"; got != want {
		t.Errorf("default compat reference %s, want %s", got, want)
	}
	pushed, err := PushLayouts(out, refs)
	if err != nil {
		t.Fatal(err)
	}
	if pushed[0].Digest.Hex != printedPlugin {
		t.Errorf("pushed artifact has digest %s, but make image printed sha256 %s", pushed[0].Digest.Hex, printedPlugin)
	}
	if pushed[0].Digest == pushed[1].Digest {
		t.Fatalf("both variants pushed as %s: they should be two different images", pushed[0].Digest)
	}

	example := loadExample(t)
	if !strings.HasPrefix(example.Spec.URL, "oci://") {
		t.Errorf("wasmplugin.yaml url %q is not an oci:// reference", example.Spec.URL)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(example.Spec.SHA256) {
		t.Errorf("wasmplugin.yaml sha256 %q is not 64 hex digits", example.Spec.SHA256)
	}
	// The shipped placeholder must not verify: an unedited example has to
	// fail instead of loading whatever the tag points at.
	if _, err := istioFetch("oci://"+refs[0].String(), example.Spec.SHA256); err == nil {
		t.Errorf("the example's placeholder sha256 %s verified against the pushed image", example.Spec.SHA256)
	}

	cases := []struct {
		variant, url, sha256 string
	}{
		// The example filled in with what make image printed.
		{"wasm", "oci://" + refs[0].String(), printedPlugin},
		// The compat image, with the digest make push printed for it.
		{"compat", "oci://" + refs[1].String(), pushed[1].Digest.Hex},
	}
	for _, c := range cases {
		t.Run(c.variant, func(t *testing.T) {
			got, err := istioFetch(c.url, c.sha256)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, module) {
				t.Fatalf("pulled module differs from %s (%d bytes, want %d)", modulePath(), len(got), len(module))
			}
			if sum := sha256.Sum256(got); hex.EncodeToString(sum[:]) != printedModule {
				t.Errorf("pulled module sha256 %x, make image printed %s", sum, printedModule)
			}
		})
	}
	// A digest pins one image: the other variant's does not verify.
	if _, err := istioFetch("oci://"+refs[0].String(), pushed[1].Digest.Hex); err == nil {
		t.Error("the compat image's digest verified the artifact")
	}
}

// istioFetch pulls url and returns the module, following the rules of
// Istio's Wasm image fetcher: the manifest digest must equal sha256; an
// image with a single tar+gzip layer (OCI or Docker media type) carries
// plugin.wasm in that layer; an artifact has exactly two layers, one of the
// Wasm layer type, whose blob is the module itself.
func istioFetch(url, sha256Hex string) ([]byte, error) {
	ref, err := name.ParseReference(strings.TrimPrefix(url, "oci://"))
	if err != nil {
		return nil, err
	}
	img, err := remote.Image(ref)
	if err != nil {
		return nil, err
	}
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	if d.Hex != sha256Hex {
		return nil, fmt.Errorf("manifest digest %s does not match sha256 %s", d.Hex, sha256Hex)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	var module []byte
	switch {
	case len(layers) == 1:
		module, err = pluginFromTarGz(layers[0])
	case len(layers) == 2:
		module, err = wasmLayer(layers)
	default:
		err = fmt.Errorf("%d layers: neither shape", len(layers))
	}
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(module, []byte("\x00asm")) {
		return nil, errors.New("the extracted file is not a Wasm module")
	}
	return module, nil
}

func pluginFromTarGz(l v1.Layer) ([]byte, error) {
	mt, err := l.MediaType()
	if err != nil {
		return nil, err
	}
	if mt != types.OCILayer && mt != types.DockerLayer {
		return nil, fmt.Errorf("single layer of type %s, want a tar+gzip layer", mt)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			return nil, fmt.Errorf("no %s in the layer: %v", CompatFile, err)
		}
		if filepath.Base(h.Name) == CompatFile {
			return io.ReadAll(tr)
		}
	}
}

func wasmLayer(layers []v1.Layer) ([]byte, error) {
	for _, l := range layers {
		mt, err := l.MediaType()
		if err != nil {
			return nil, err
		}
		if mt == WasmLayerType {
			rc, err := l.Compressed()
			if err != nil {
				return nil, err
			}
			defer rc.Close()
			return io.ReadAll(rc)
		}
	}
	return nil, fmt.Errorf("no layer of type %s", WasmLayerType)
}

// TestArtifactShape checks the media types of the artifact that Istio and
// OCI tools key on.
func TestArtifactShape(t *testing.T) {
	img, err := WasmArtifact([]byte("\x00asm\x01\x00\x00\x00"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != WasmConfigType {
		t.Errorf("manifest %s with config %s, want %s with %s", m.MediaType, m.Config.MediaType, types.OCIManifestSchema1, WasmConfigType)
	}
	var got []types.MediaType
	for _, l := range m.Layers {
		got = append(got, l.MediaType)
	}
	if len(got) != 2 || got[0] != WasmLayerType || got[1] != WasmConfigType {
		t.Errorf("layers %v, want [%s %s]", got, WasmLayerType, WasmConfigType)
	}
}

// The compat image names its shape on its manifest, as the Wasm image spec
// asks; the artifact, whose media types say what it is, does not.
func TestCompatAnnotation(t *testing.T) {
	for _, v := range Variants {
		img, err := v.Build([]byte("\x00asm\x01\x00\x00\x00"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		got, want := m.Annotations[VariantAnnotation], ""
		if v.Name == "compat" {
			want = CompatVariant
		}
		if got != want {
			t.Errorf("%s: annotation %s = %q, want %q", v.Name, VariantAnnotation, got, want)
		}
	}
}

// TestReproducible checks what lets the docs quote a digest printed before
// the push: the same module gives the same manifests, and another module
// another one.
func TestReproducible(t *testing.T) {
	a := []byte("\x00asm\x01\x00\x00\x00 one")
	b := []byte("\x00asm\x01\x00\x00\x00 two")
	for _, v := range Variants {
		d := func(module []byte) v1.Hash {
			img, err := v.Build(module)
			if err != nil {
				t.Fatal(err)
			}
			h, err := img.Digest()
			if err != nil {
				t.Fatal(err)
			}
			return h
		}
		if d(a) != d(a) {
			t.Errorf("%s: two builds of one module differ", v.Name)
		}
		if d(a) == d(b) {
			t.Errorf("%s: two modules give one digest", v.Name)
		}
	}
}
