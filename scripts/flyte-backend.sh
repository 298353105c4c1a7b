#!/usr/bin/env bash
# Build the open-source Flyte 2 backend (flyteorg/flyte main: one Go binary, ./manager/cmd, serving
# the Runs/Actions/Task/DataProxy services on one port and reconciling TaskAction CRs) from a
# snapshot of its repository, cached by commit:
#   $TETHER_CACHE/flyte/<flyte-commit>_<stow-commit>_<go>/bin/flyte
# The bin dir is printed as the LAST line of stdout; progress goes to stderr. Warm: well under a
# second. Cold: ~17-25 min on 2 busy cores (go build of ~190 MB binary).
#
# Sources (no network fetch of its own: the module github.com/flyteorg/flyte/v2 is not served by
# the Go module proxy, and github.com/flyteorg/stow v0.3.13 is refused by it):
#   TETHER_FLYTE_SRC  a git dir (bare or not) of flyteorg/flyte  [default /work/.mirror/flyteorg+flyte/repo]
#   TETHER_STOW_SRC   a git dir of flyteorg/stow (its HEAD = v0.3.13) [default /work/.mirror/flyteorg+stow/repo]
# When a source is missing the script says so and exits 3: callers (tests/flyte, scripts/test.sh)
# report the Flyte-backend group as NOT RUN with that reason, never as passed.
set -euo pipefail

FLYTE_SRC="${TETHER_FLYTE_SRC:-/work/.mirror/flyteorg+flyte/repo}"
STOW_SRC="${TETHER_STOW_SRC:-/work/.mirror/flyteorg+stow/repo}"
RECIPE=1
log() { echo "[flyte-backend] $*" >&2; }

rev() { git --git-dir="$1" rev-parse --verify -q "HEAD^{commit}" 2>/dev/null || git -C "$1" rev-parse --verify -q "HEAD^{commit}" 2>/dev/null; }
FLYTE_REV="$(rev "$FLYTE_SRC" || true)"
STOW_REV="$(rev "$STOW_SRC" || true)"
if [ -z "$FLYTE_REV" ] || [ -z "$STOW_REV" ]; then
  log "no Flyte backend source: need git snapshots of flyteorg/flyte (TETHER_FLYTE_SRC=$FLYTE_SRC)"
  log "and flyteorg/stow (TETHER_STOW_SRC=$STOW_SRC); neither is on the Go module proxy"
  exit 3
fi
gitdir() { if [ -d "$1/.git" ]; then echo "$1/.git"; else echo "$1"; fi; }

export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
GO_VERSION="$(go env GOVERSION)"
ROOT="${TETHER_CACHE:-$HOME/.cache/tether}/flyte/${FLYTE_REV:0:12}_stow-${STOW_REV:0:12}_${GO_VERSION}_r${RECIPE}"
mkdir -p "$ROOT/bin"
BIN="$(cd "$ROOT/bin" && pwd -P)"
exec 9>"$ROOT/.lock"
if command -v flock >/dev/null; then flock 9; fi

if [ ! -x "$BIN/flyte" ]; then
  start=$SECONDS
  src="$ROOT/src"
  rm -rf "$src" && mkdir -p "$src/flyte" "$src/stow"
  log "exporting flyteorg/flyte ${FLYTE_REV:0:12} and flyteorg/stow ${STOW_REV:0:12}"
  git --git-dir="$(gitdir "$FLYTE_SRC")" archive "$FLYTE_REV" | tar -x -C "$src/flyte"
  git --git-dir="$(gitdir "$STOW_SRC")" archive "$STOW_REV" | tar -x -C "$src/stow"
  (cd "$src/flyte" && go mod edit -replace "github.com/flyteorg/stow=$src/stow")
  log "compiling ./manager/cmd (many minutes on a cold Go cache)"
  (cd "$src/flyte" && go build -p "${TETHER_FLYTE_GO_P:-2}" -trimpath -ldflags "-s -w" \
      -o "$BIN/.flyte.tmp" ./manager/cmd >&2)
  mv -f "$BIN/.flyte.tmp" "$BIN/flyte"
  log "built in $((SECONDS - start))s"
fi
log "ready: $BIN/flyte"
echo "$BIN"
