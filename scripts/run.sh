#!/usr/bin/env bash
# run.sh: serve the demo (envoy/envoy.yaml) on :10000 with the admin on :9901.
#
# make run builds the module and links build/envoy first. With a Docker
# engine (docker info succeeds) the official Envoy image runs it through
# docker-compose.yaml; otherwise the local build/envoy runs it in the
# foreground. Ctrl-C stops either.
#
# Envoy logs at warn, with the plugin's own log (the wasm component) at
# info, so the demo's usage text is not buried under Envoy's start-up
# report; the text comes last, once the listener answers.
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

# The ports envoy/envoy.yaml binds: the listener, the admin interface, the
# demo upstream. Checked first, so that a second `make run` (or anything
# else on those ports) gets one line instead of Envoy's bind errors.
ports=(10000 9901 10080)

# in_use PORT succeeds when something accepts connections on it.
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# answers PORT succeeds when an HTTP server answers on it: a bound socket is
# not enough, since the kernel accepts before Envoy's workers serve. The
# probe is not HTTP, so Envoy's codec answers 400 itself and the plugin
# never sees it: the demo's counters stay at zero.
answers() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1"
		printf 'probe\r\n\r\n' >&3
		read -r -t 2 line <&3
		[[ $line == HTTP/* ]]
	) 2>/dev/null
}

for p in "${ports[@]}"; do
	if in_use "$p"; then
		die "port $p is already in use on 127.0.0.1 (another make run or docker compose up?); stop that process and retry"
	fi
done

# serve CMD...: runs CMD in the background, prints the usage text once
# :10000 answers HTTP, and waits for CMD. A script's background job ignores
# SIGINT, so Ctrl-C (and TERM) is passed on to CMD as TERM here.
serve() {
	"$@" &
	local pid=$! i rc=0 ready=0
	trap 'kill -TERM "$pid" 2>/dev/null' INT TERM
	for ((i = 0; i < 600; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		if answers 10000; then
			ready=1
			usage
			break
		fi
		sleep 0.1
	done
	if ! kill -0 "$pid" 2>/dev/null; then
		wait "$pid" || rc=$?
		die "Envoy exited (status $rc) before it answered on :10000; its log is above"
	fi
	[ "$ready" = 1 ] || echo "run: Envoy runs but has not answered on :10000 yet; the usage text is skipped (see the log above)" >&2
	# wait returns early when a trapped signal arrives: wait again until
	# CMD has really exited.
	wait "$pid" || rc=$?
	while kill -0 "$pid" 2>/dev/null; do
		wait "$pid" || rc=$?
	done
	return "$rc"
}

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
	docker compose version >/dev/null 2>&1 || die "a Docker engine answers but the compose plugin is missing (docker compose version failed)"
	echo "run: Docker engine found: starting envoyproxy/envoy with docker-compose.yaml"
	serve docker compose -f "$root/docker-compose.yaml" up
	exit
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
# --use-dynamic-base-id: another Envoy (an e2e run, say) may hold the default
# hot-restart base id.
serve "$envoy_bin" -c "$cfg" --concurrency 2 --use-dynamic-base-id \
	--log-level warn --component-log-level wasm:info
