// Command ociimage packages the plugin module as an OCI image for Istio's
// WasmPlugin (url: oci://...), without a Docker daemon, and pushes it.
//
// It owns the two image shapes Istio accepts and their on-disk form:
//
//	wasm    the Wasm OCI artifact: the module as a layer of type
//	        application/vnd.module.wasm.content.layer.v1+wasm, config of type
//	        application/vnd.module.wasm.config.v1+json
//	compat  a container image: one tar+gzip layer with plugin.wasm at its root,
//	        for registries that refuse artifacts with unknown media types
//
// Usage (make image, make push IMAGE=...):
//
//	ociimage build [-wasm build/borrowcycle.wasm] [-out build/image]
//	ociimage push  -image REGISTRY/REPO:TAG [-compat-image REF] [-out build/image]
//
// build writes one OCI image layout per shape under -out (-out/wasm,
// -out/compat) and prints each manifest digest: the hex part is what a
// WasmPlugin's sha256 field must hold, because Istio compares it with the
// digest of the manifest it pulls. The images have no timestamps, so the same
// module always gives the same digests. push sends the wasm shape to -image
// and the compat shape to -compat-image (default: -image's tag plus
// "-compat"), with the credentials of ~/.docker/config.json, and prints the
// pushed digests and the url/sha256 pair for the WasmPlugin.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = buildCmd(os.Args[2:], os.Stdout)
	case "push":
		err = pushCmd(os.Args[2:], os.Stdout)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: ociimage build [-wasm FILE] [-out DIR]\n       ociimage push -image REF [-compat-image REF] [-out DIR]")
	os.Exit(2)
}

func buildCmd(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	wasm := fs.String("wasm", "build/borrowcycle.wasm", "the plugin module")
	out := fs.String("out", "build/image", "directory for the OCI image layouts")
	if err := fs.Parse(args); err != nil {
		return err
	}
	module, err := os.ReadFile(*wasm)
	if err != nil {
		return fmt.Errorf("%w (run make build)", err)
	}
	built, err := WriteLayouts(module, *out)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(module)
	fmt.Fprintf(w, "module  %s  %d bytes  sha256:%s\n", *wasm, len(module), hex.EncodeToString(sum[:]))
	for _, b := range built {
		fmt.Fprintf(w, "%-7s %s  manifest %s\n", b.Variant, b.Dir, b.Digest)
	}
	fmt.Fprintf(w, "WasmPlugin (envoy/istio/wasmplugin.yaml), once pushed with make push IMAGE=REF:\n  url: oci://REF\n  sha256: %s\n", built[0].Digest.Hex)
	return nil
}

func pushCmd(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	img := fs.String("image", "", "where the Wasm artifact goes, e.g. ghcr.io/you/borrowcycle:v0.1.0")
	compat := fs.String("compat-image", "", "where the compat image goes (default: -image's tag plus -compat)")
	out := fs.String("out", "build/image", "directory make image wrote the layouts to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *img == "" {
		return errors.New("push needs -image (make push IMAGE=registry/repo:tag)")
	}
	refs, err := PushRefs(*img, *compat)
	if err != nil {
		return err
	}
	pushed, err := PushLayouts(*out, refs, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		return err
	}
	for _, p := range pushed {
		fmt.Fprintf(w, "%-7s pushed %s@%s\n", p.Variant, p.Ref, p.Digest)
	}
	fmt.Fprintf(w, "WasmPlugin (envoy/istio/wasmplugin.yaml):\n  url: oci://%s\n  sha256: %s\n", pushed[0].Ref, pushed[0].Digest.Hex)
	return nil
}

// Built is one image layout on disk.
type Built struct {
	Variant string
	Dir     string
	Digest  v1.Hash // of the manifest
}

// WriteLayouts builds every variant of module and writes each as an OCI
// image layout in out/<variant>, replacing what an earlier build left
// there (a layout's index.json only grows otherwise).
func WriteLayouts(module []byte, out string) ([]Built, error) {
	var built []Built
	for _, v := range Variants {
		img, err := v.Build(module)
		if err != nil {
			return nil, fmt.Errorf("%s image: %w", v.Name, err)
		}
		dir := filepath.Join(out, v.Name)
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
		p, err := layout.Write(dir, empty.Index)
		if err != nil {
			return nil, err
		}
		if err := p.AppendImage(img); err != nil {
			return nil, fmt.Errorf("%s image: writing %s: %w", v.Name, dir, err)
		}
		d, err := img.Digest()
		if err != nil {
			return nil, err
		}
		built = append(built, Built{Variant: v.Name, Dir: dir, Digest: d})
	}
	return built, nil
}

// PushRefs names where each variant goes, in the order of Variants: the
// artifact at image, the compat image at compat or, when that is empty, at
// image's repository with the tag suffixed "-compat".
func PushRefs(image, compat string) ([]name.Reference, error) {
	art, err := name.NewTag(image)
	if err != nil {
		return nil, fmt.Errorf("IMAGE=%s: %w (want registry/repo:tag)", image, err)
	}
	var c name.Reference
	if compat != "" {
		c, err = name.ParseReference(compat)
		if err != nil {
			return nil, fmt.Errorf("compat image %s: %w", compat, err)
		}
	} else {
		c = art.Context().Tag(art.TagStr() + "-compat")
	}
	return []name.Reference{art, c}, nil
}

// Pushed is one image in a registry.
type Pushed struct {
	Variant string
	Ref     name.Reference
	Digest  v1.Hash
}

// PushLayouts pushes the image of each layout under out to the reference
// of the same position (see PushRefs).
func PushLayouts(out string, refs []name.Reference, opts ...remote.Option) ([]Pushed, error) {
	if len(refs) != len(Variants) {
		return nil, fmt.Errorf("%d references for %d variants", len(refs), len(Variants))
	}
	var pushed []Pushed
	for i, v := range Variants {
		img, err := readLayout(filepath.Join(out, v.Name))
		if err != nil {
			return nil, fmt.Errorf("%s image: %w (run make image)", v.Name, err)
		}
		if err := remote.Write(refs[i], img, opts...); err != nil {
			return nil, fmt.Errorf("pushing %s: %w", refs[i], err)
		}
		d, err := img.Digest()
		if err != nil {
			return nil, err
		}
		pushed = append(pushed, Pushed{Variant: v.Name, Ref: refs[i], Digest: d})
	}
	return pushed, nil
}

// readLayout returns the only image of the layout at dir.
func readLayout(dir string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the layout at %s: %w", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading the index of %s: %w", dir, err)
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("%s holds %d images, want 1", dir, len(m.Manifests))
	}
	return idx.Image(m.Manifests[0].Digest)
}
