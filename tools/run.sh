#!/usr/bin/env bash
# run.sh: serve the demo (envoy/envoy.yaml) on :10000 with the admin on :9901.
#
# make run builds the module and links build/envoy first. With a Docker
# engine (docker info succeeds) the official Envoy image runs it through
# docker-compose.yaml; otherwise the local build/envoy runs it in the
# foreground. Ctrl-C stops either.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

wasm="${BORROWCYCLE_WASM:-$root/build/borrowcycle.wasm}"
envoy_bin="${BORROWCYCLE_ENVOY:-$root/build/envoy}"

die() { echo "run: $*" >&2; exit 1; }

[ -f "$wasm" ] || die "$wasm is missing: run make build (or make run, which builds it)"

usage() {
	cat <<'TXT'

  Borrowcycle demo: capacity 10 requests per 10 s cycle, clients named by x-client-id.

    curl -i localhost:10000/                           # no client id: 429, reason anonymous
    curl -i -H 'x-client-id: alice' localhost:10000/   # 200, with x-ratelimit-* headers
    for i in $(seq 12); do
      curl -s -o /dev/null -w '%{http_code} ' -H 'x-client-id: alice' localhost:10000/
    done; echo                                          # alice's 11th request gets 429

    curl -s localhost:9901/stats/prometheus | grep ^borrowcycle   # metrics (admin on :9901)

TXT
}

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
	docker compose version >/dev/null 2>&1 || die "a Docker engine answers but the compose plugin is missing (docker compose version failed)"
	echo "run: Docker engine found: starting envoyproxy/envoy with docker-compose.yaml"
	usage
	exec docker compose -f "$root/docker-compose.yaml" up
fi

[ -x "$envoy_bin" ] || die "no Docker engine, and $envoy_bin is not an executable Envoy: run make envoy (or make run)"

# The shipped file is written for the container: the module at
# /etc/envoy/borrowcycle.wasm and sockets on 0.0.0.0. Locally the module is
# the build output and everything stays on loopback.
cfg="$root/build/envoy-run.yaml"
sed -e "s#/etc/envoy/borrowcycle.wasm#$wasm#" \
	-e 's/address: 0\.0\.0\.0/address: 127.0.0.1/' \
	"$root/envoy/envoy.yaml" >"$cfg"
grep -q "filename: $wasm" "$cfg" || die "could not point $cfg at $wasm (did envoy/envoy.yaml change its module path?)"

echo "run: no Docker engine: starting $("$envoy_bin" --version 2>/dev/null | sed -n 's/.*version: [0-9a-f]*\/\([^/]*\)\/.*/envoy \1/p') from $envoy_bin (config $cfg)"
usage
# --use-dynamic-base-id: another Envoy (an e2e run, say) may hold the default
# hot-restart base id.
exec "$envoy_bin" -c "$cfg" --concurrency 2 --use-dynamic-base-id --log-level info
