#!/usr/bin/env bash
# guestprofile.sh: where the compiled module's own code spends its time,
# function by function. Envoy's wheel is stripped and V8 writes no symbols
# for Wasm, so `bench-envoy -profile` can split Envoy's CPU only by place;
# this runs the same module in the multi-VM wazero host (tools/wasmhost),
# whose compiler writes a perf map when built with the `perfmap` tag, and
# sums `perf record` samples per guest function.
#
#   scripts/guestprofile.sh [variant] [requests]
#
# variant is one of BenchmarkPluginOverNoop's (default, no_headers,
# reject); the no-op module runs beside it, and its functions (the no-op
# is stripped, so they have no names) are left out. Needs perf (Debian's
# linux-perf). The shares are of the guest's time, not of Envoy's: wazero
# and V8 compile the same code, but their host calls cost differently.
set -euo pipefail
variant=${1:-default}
requests=${2:-500000}
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/build/guestprofile
mkdir -p "$out"
command -v perf >/dev/null || { echo "guestprofile: perf is missing (apt-get install linux-perf)" >&2; exit 1; }
cd "$root"
make -s build >/dev/null
# The plugin as shipped, but with its name section (no -s -w).
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$out/borrowcycle.wasm" ./plugin
go test -tags perfmap -c -o "$out/wasmhost.test" ./tools/wasmhost
cd tools/wasmhost
# A fresh compilation cache: code loaded from the cache gets no perf map.
rm -rf "$out/cache"
XDG_CACHE_HOME=$out/cache BORROWCYCLE_WASM=$out/borrowcycle.wasm \
	perf record -q -e cpu-clock -F 4000 -o "$out/perf.data" \
	"$out/wasmhost.test" -test.run '^$' -test.bench "PluginOverNoop/$variant/1vm" -test.benchtime "${requests}x" >&2
perf report -i "$out/perf.data" --no-children --sort sym 2>/dev/null |
	awk '
	# A guest sample reads "[local/total].<function>:::::<label>".
	match($0, /\[[0-9]+\/[0-9]+\]\.[^ ]*:::::/) {
		name = substr($0, RSTART, RLENGTH - 5)
		sub(/^\[[0-9]+\/[0-9]+\]\./, "", name)
		if (name ~ /^\$/) next # the stripped no-op module
		pct = $1; sub(/%/, "", pct)
		share[name] += pct; total += pct
	}
	END {
		for (name in share) printf "%8.1f  %s\n", 100 * share[name] / total, name
		printf "%8.1f  all guest functions (%.1f%% of every sample; the rest is the host)\n", 100, total
	}' | sort -rn | head -41
