#!/usr/bin/env bash
# Download the wheels of one environment (envs/<id>.txt, third-party pins only) on the host, so
# image builds install them with no network inside `docker build` (some machines reach PyPI only
# through a proxy whose CA the host trusts and a fresh image does not). Cached by the pins' hash:
#   wheels.sh ID  -> prints the wheel directory
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
id="$1"
key="$(grep -v '^-e ' "$REPO/envs/$id.txt" | sha256sum | cut -c1-12)"
dir="${TETHER_CACHE:-$HOME/.cache/tether}/e2e/wheels/$id-$key"
if [[ ! -f "$dir/.done" ]]; then
  echo "[wheels] $id: pip download (cold: a minute or two)" >&2
  mkdir -p "$dir"
  grep -v '^-e ' "$REPO/envs/$id.txt" >"$dir/pins.txt"
  # The host's Python is 3.11 on glibc Linux like the images: its wheel choice fits them.
  python3 -m pip download -q --no-deps --only-binary=:all: -r "$dir/pins.txt" -d "$dir" >&2
  # and the installer the Dockerfiles use, and the build backend of this repository's own packages
  python3 -m pip download -q --only-binary=:all: "hatchling>=1.25" "uv==0.9.30" -d "$dir" >&2
  touch "$dir/.done"
fi
echo "$dir"
