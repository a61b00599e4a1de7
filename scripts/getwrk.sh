#!/usr/bin/env bash
# getwrk.sh: make sure the wrk load generator is on PATH (make bench-envoy).
#
# wrk is a Debian/Ubuntu package; when it is missing and apt-get is usable
# (root, or sudo without a password) it is installed from there. Anything
# else fails with what to do by hand.
set -euo pipefail

die() { echo "getwrk: $*" >&2; exit 1; }

if command -v wrk >/dev/null 2>&1; then
	exit 0
fi
command -v apt-get >/dev/null 2>&1 ||
	die "wrk is not on PATH and there is no apt-get here; install wrk (https://github.com/wg/wrk) and retry"
if [ "$(id -u)" -eq 0 ]; then
	sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
	sudo=(sudo -n)
else
	die "wrk is not on PATH; install it as root: apt-get install -y wrk"
fi
echo "getwrk: installing wrk with apt-get" >&2
if ! "${sudo[@]}" apt-get install -y wrk >/dev/null; then
	# A fresh machine may have no package lists yet.
	"${sudo[@]}" apt-get update >/dev/null || die "apt-get update failed"
	"${sudo[@]}" apt-get install -y wrk >/dev/null || die "apt-get install -y wrk failed; install wrk by hand and retry"
fi
command -v wrk >/dev/null 2>&1 || die "apt-get installed wrk but it is not on PATH"
echo "getwrk: $(command -v wrk)" >&2
