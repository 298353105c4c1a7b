#!/usr/bin/env bash
# Make a Debian rootfs tarball with debootstrap (no registry needed), cached by
# suite + package list:  rootfs.sh NAME "pkg1,pkg2,..." [--check]  -> prints the tarball path
# (--check: fail instead of building when it is not cached).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/versions.sh"
name="$1" include="$2"
MIRROR="${TETHER_E2E_DEBIAN_MIRROR:-$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
key="$(printf '%s|%s' "$DEBIAN_SUITE" "$include" | sha256sum | cut -c1-12)"
CACHE="${TETHER_CACHE:-$HOME/.cache/tether}/e2e/rootfs"
out="$CACHE/${name}-${DEBIAN_SUITE}-${key}.tar"
mkdir -p "$CACHE"
if [[ ! -s "$out" && "${3:-}" == --check ]]; then echo "[rootfs] not built: $out" >&2; exit 1; fi
if [[ ! -s "$out" ]]; then
  command -v debootstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2; }
  dir="$(mktemp -d "$CACHE/.${name}.XXXX")"
  echo "[rootfs] debootstrap $name ($DEBIAN_SUITE from $MIRROR; about a minute)" >&2
  debootstrap --variant=minbase --include="$include" "$DEBIAN_SUITE" "$dir" "$MIRROR" >"$dir.log" 2>&1 ||
    { tail -20 "$dir.log" >&2; exit 1; }
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  tar -C "$dir" --numeric-owner -cf "$out.tmp" . && mv -f "$out.tmp" "$out"
  rm -rf "$dir" "$dir.log"
fi
echo "$out"
