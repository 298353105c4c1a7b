#!/usr/bin/env bash
# Build the program that says what Argo CD and Flux conclude about Tether's objects, cached:
#   tether-health   tests/support/health (gopher-lua, the Lua engine Argo CD runs health checks
#                   with, and sigs.k8s.io/cli-utils kstatus, which Flux's health checks use)
#
# Output: $TETHER_CACHE/health/<version-key>/bin/ (TETHER_CACHE defaults to ~/.cache/tether). The
# bin dir is printed as the LAST line of stdout; progress goes to stderr. The key is the hash of
# the program's go.mod, go.sum and source plus the Go version: a change rebuilds into a new
# directory, an unchanged one returns at once (0.04 s). Cold (empty Go build cache, modules
# downloaded): 45 s of CPU, 3 min wall on the shared 2-core machine at load 12, 172 MB of build
# cache; k8s.io/apimachinery and k8s.io/api/core/v1 (which kstatus imports) dominate.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/tests/support/health"
RECIPE=1                      # bump when the build recipe itself changes
GO_VERSION="$(GOTOOLCHAIN=local go env GOVERSION)"
HASH="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -c1-16)"
ROOT="${TETHER_CACHE:-$HOME/.cache/tether}/health/${HASH}_${GO_VERSION}_r${RECIPE}"
mkdir -p "$ROOT/bin"
ROOT="$(cd "$ROOT" && pwd -P)"
BIN="$ROOT/bin"

export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0

log() { echo "[health-tools] $*" >&2; }

# Serialise concurrent runs (parallel test sessions) on the same key.
exec 9>"$ROOT/.lock"
if command -v flock >/dev/null; then flock 9; fi

start=$SECONDS
if [[ ! -x "$BIN/tether-health" ]]; then
  log "tether-health: compiling (go build -p ${TETHER_HEALTH_GO_P:-2})"
  # Into a temp name, then rename: an interrupted build never leaves a binary a later run takes as done.
  (cd "$src" && go build -p "${TETHER_HEALTH_GO_P:-2}" -mod=readonly -trimpath -ldflags "-s -w" \
     -o "$BIN/.tether-health.tmp" . >&2)
  chmod +x "$BIN/.tether-health.tmp" && mv -f "$BIN/.tether-health.tmp" "$BIN/tether-health"
fi
log "ready in $((SECONDS - start))s: $BIN"
echo "$BIN"
