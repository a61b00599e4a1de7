#!/usr/bin/env bash
# getgubernator.sh OUT: build the Gubernator server that the fleet-mode e2e
# tests run, at the version pinned in tools/gubernator/go.mod, into OUT.
#
# tools/gubernator is a module of its own (its go.mod requires
# github.com/gubernator-io/gubernator/v2), so Gubernator's dependencies never
# enter the plugin's go.mod. Its main runs Gubernator's own daemon and adds
# static peers (see tools/gubernator/main.go for why). The binary is cached:
# OUT.version records the pin and the main's checksum it was built from, and
# a second run with both unchanged only checks them. The first build
# downloads Gubernator's modules and takes minutes.
set -euo pipefail

die() { echo "getgubernator: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 OUT"
out="$1"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
root="$(cd "$(dirname "$0")/.." && pwd)"
mod="$root/tools/gubernator"
go="${GO:-go}"

pin="$(cd "$mod" && "$go" list -m -f '{{.Version}}' github.com/gubernator-io/gubernator/v2)" ||
	die "cannot read the pinned version from $mod/go.mod"
pin="$pin $(cat "$mod/main.go" "$mod/go.sum" | cksum | cut -d' ' -f1)"
if [ -x "$out" ] && [ "$(cat "$out.version" 2>/dev/null)" = "$pin" ]; then
	echo "getgubernator: $out is gubernator $pin (cached)"
	exit 0
fi
echo "getgubernator: building gubernator $pin into $out (first time: minutes)"
mkdir -p "$(dirname "$out")"
(cd "$mod" && CGO_ENABLED=0 "$go" build -trimpath -o "$out" .) ||
	die "go build in $mod (gubernator $pin) failed"
echo "$pin" >"$out.version"
echo "getgubernator: $out is gubernator $pin"
