package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Media types of the Wasm OCI artifact, the image format Istio's Wasm
// fetcher calls the "oci" variant. The module is stored as is, uncompressed.
const (
	WasmLayerType  types.MediaType = "application/vnd.module.wasm.content.layer.v1+wasm"
	WasmConfigType types.MediaType = "application/vnd.module.wasm.config.v1+json"
)

// CompatFile is the name the "compat" variant gives the module: Istio reads
// the file of that name from the image's only layer.
const CompatFile = "plugin.wasm"

// The annotation that names an image's shape in the Wasm image spec; the
// compat image carries it on its manifest, as buildah's
// `--annotation module.wasm.image/variant=compat` would.
const (
	VariantAnnotation = "module.wasm.image/variant"
	CompatVariant     = "compat"
)

// Variant is one of the two image shapes Istio's WasmPlugin accepts.
type Variant struct {
	Name  string // directory under the output, and what the tool prints
	Build func(module []byte) (v1.Image, error)
}

// Variants lists both shapes, the artifact first: it is the one the
// WasmPlugin example points at.
var Variants = []Variant{
	{Name: "wasm", Build: WasmArtifact},
	{Name: "compat", Build: CompatImage},
}

// runtimeConfig is the config blob of the Wasm artifact: what kind of host
// the module is for. Istio does not read it; registries and tools that list
// artifacts show it.
// The ABI version is the one the proxy-wasm Go SDK exports
// (proxy_abi_version_0_2_0).
type runtimeConfig struct {
	Type        string   `json:"type"`
	ABIVersions []string `json:"abiVersions"`
}

// WasmArtifact builds the Wasm OCI artifact: a manifest whose config has the
// Wasm config media type and whose layers are the module (Wasm layer type)
// and the same config again. The second layer is not decoration: Istio's
// fetcher takes an artifact only when it has exactly two layers, one of them
// of the Wasm layer type.
//
// Nothing in it depends on the time or the machine, so the same module
// always gives the same manifest digest: the digest printed by `make image`
// is the one the registry serves after `make push`.
func WasmArtifact(module []byte) (v1.Image, error) {
	cfg, err := json.Marshal(runtimeConfig{Type: "envoy_proxy", ABIVersions: []string{"0.2.0"}})
	if err != nil {
		return nil, err
	}
	return newImage(types.OCIManifestSchema1, WasmConfigType, cfg, nil,
		static.NewLayer(module, WasmLayerType),
		static.NewLayer(cfg, WasmConfigType))
}

// CompatImage builds the container-image shape: one gzipped tar layer that
// holds the module as plugin.wasm at the root, like `FROM scratch` plus
// `COPY borrowcycle.wasm plugin.wasm` (envoy/Dockerfile) would, but with no
// Docker daemon and with fixed file times, so that it is reproducible too.
func CompatImage(module []byte) (v1.Image, error) {
	var tarred bytes.Buffer
	tw := tar.NewWriter(&tarred)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg,
		Name:     CompatFile,
		Size:     int64(len(module)),
		Mode:     0o444,
		ModTime:  time.Unix(0, 0),
		Format:   tar.FormatPAX,
	}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(module); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	var zipped bytes.Buffer
	zw, err := gzip.NewWriterLevel(&zipped, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(tarred.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	diffID := sha256.Sum256(tarred.Bytes())
	cfg, err := json.Marshal(v1.ConfigFile{
		Architecture: "wasm",
		OS:           "wasip1",
		RootFS: v1.RootFS{
			Type:    "layers",
			DiffIDs: []v1.Hash{{Algorithm: "sha256", Hex: hex.EncodeToString(diffID[:])}},
		},
	})
	if err != nil {
		return nil, err
	}
	return newImage(types.OCIManifestSchema1, types.OCIConfigJSON, cfg,
		map[string]string{VariantAnnotation: CompatVariant},
		static.NewLayer(zipped.Bytes(), types.OCILayer))
}

// image is a manifest written out by hand, with its config and layer blobs
// in memory. go-containerregistry's mutate package would add fields of its
// own to the config (and a config of the Wasm type must be ours), so the
// manifest is assembled here and partial turns it into a v1.Image.
type image struct {
	mediaType  types.MediaType
	manifest   []byte
	config     []byte
	configType types.MediaType
	layers     map[v1.Hash]v1.Layer
}

func newImage(mt, configType types.MediaType, config []byte, annotations map[string]string, layers ...v1.Layer) (v1.Image, error) {
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     mt,
		Annotations:   annotations,
		Config: v1.Descriptor{
			MediaType: configType,
			Size:      int64(len(config)),
			Digest:    sha256Hash(config),
		},
	}
	im := &image{mediaType: mt, config: config, configType: configType, layers: map[v1.Hash]v1.Layer{}}
	for _, l := range layers {
		d, err := partial.Descriptor(l)
		if err != nil {
			return nil, err
		}
		m.Layers = append(m.Layers, *d)
		im.layers[d.Digest] = l
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	im.manifest = raw
	return partial.CompressedToImage(im)
}

func sha256Hash(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

func (im *image) MediaType() (types.MediaType, error) { return im.mediaType, nil }
func (im *image) RawManifest() ([]byte, error)        { return im.manifest, nil }
func (im *image) RawConfigFile() ([]byte, error)      { return im.config, nil }

func (im *image) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if l, ok := im.layers[h]; ok {
		return l, nil
	}
	if h == sha256Hash(im.config) {
		return static.NewLayer(im.config, im.configType), nil
	}
	return nil, fmt.Errorf("no blob %s in this image", h)
}
