#!/usr/bin/env bash
# Build the open-source Flyte 2 backend (flyteorg/flyte main: one Go binary, ./manager/cmd, serving
# the Runs/Actions/Task/DataProxy services on one port and reconciling TaskAction CRs) from pinned
# sources, cached by their commits:
#   $TETHER_CACHE/flyte/<flyte-commit>_stow-<stow-commit>_<go>_r<recipe>/bin/flyte
# The bin dir is printed as the LAST line of stdout; progress goes to stderr. Warm: well under a
# second. Cold: ~17-30 min on 2 busy cores (go build of a ~190 MB binary; TETHER_FLYTE_GO_P=1 leaves
# a core to others).
#
# Sources (no network fetch of its own: the module github.com/flyteorg/flyte/v2 is not served by
# the Go module proxy, and github.com/flyteorg/stow v0.3.13 is refused by it). The commits are
# pinned below; each source is either
#   - the pinned tarball from the shared sources folder beside the checkout
#     ($TETHER_SOURCES, default <repo>/../shared/sources; its README lists files, commits, sha256),
#     checked against the sha256 pinned here, or
#   - TETHER_FLYTE_SRC / TETHER_STOW_SRC: a git dir (bare or not) holding the pinned commit (a clone
#     of flyteorg/flyte, of flyteorg/stow), or a tarball with the pinned sha256.
# Every other dependency comes from the Go module proxy.
# When a source is missing the script says so and exits 3: callers (tests/flyte, scripts/test.sh)
# report the Flyte-backend group as NOT RUN with that reason, never as passed.
set -euo pipefail

FLYTE_REV=6fadb90d65af26f4db908ec1c5f5af546a3e4299
FLYTE_TGZ=flyteorg-flyte-6fadb90d65af.tar.gz
FLYTE_SHA=fd4737456a56e1aa7e9897119dc1a5e0c710dd7f9347b0b973a61e713cd4b34d
STOW_REV=fcb9bf9eb5e7f5d6bd66795976ab71a33653cad7 # v0.3.13, required by flyte's go.mod
STOW_TGZ=flyteorg-stow-fcb9bf9eb5e7.tar.gz
STOW_SHA=df76022b8e86c03a937fc74700b03b3d4b0ec41640fa094005f127f97eb22f19
RECIPE=1

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SOURCES="${TETHER_SOURCES:-$REPO/../shared/sources}"
FLYTE_SRC="${TETHER_FLYTE_SRC:-$SOURCES/$FLYTE_TGZ}"
STOW_SRC="${TETHER_STOW_SRC:-$SOURCES/$STOW_TGZ}"
log() { echo "[flyte-backend] $*" >&2; }

# src_kind SRC REV SHA -> "git", "tar" or "" (unusable, with the reason logged). A tarball with another
# checksum is refused (exit 2): it is not the pinned source, and a cache keyed by commit would lie.
gitdir() { if [ -d "$1/.git" ]; then echo "$1/.git"; else echo "$1"; fi; }
src_kind() {
  if [ -f "$1" ]; then
    local sum
    sum="$(sha256sum "$1" | cut -d' ' -f1)"
    if [ "$sum" != "$3" ]; then
      log "$1: sha256 $sum, expected $3 (the pinned ${2:0:12})"
      exit 2
    fi
    echo tar
  elif [ -d "$1" ] && git --git-dir="$(gitdir "$1")" cat-file -e "$2^{commit}" 2>/dev/null; then
    echo git
  elif [ -d "$1" ]; then
    log "$1: a git dir without the pinned commit $2"
  fi
}
FLYTE_KIND="$(src_kind "$FLYTE_SRC" "$FLYTE_REV" "$FLYTE_SHA")"
STOW_KIND="$(src_kind "$STOW_SRC" "$STOW_REV" "$STOW_SHA")"
if [ -z "$FLYTE_KIND" ] || [ -z "$STOW_KIND" ]; then
  log "no Flyte backend source: need $FLYTE_TGZ and $STOW_TGZ in $SOURCES (TETHER_SOURCES),"
  log "or clones holding flyteorg/flyte ${FLYTE_REV:0:12} (TETHER_FLYTE_SRC=$FLYTE_SRC)"
  log "and flyteorg/stow ${STOW_REV:0:12} (TETHER_STOW_SRC=$STOW_SRC); neither is on the Go module proxy"
  exit 3
fi
# unpack SRC KIND REV DEST: the same tree either way (the tarballs are `git archive --prefix=NAME/`).
unpack() {
  mkdir -p "$4"
  if [ "$2" = tar ]; then
    tar -xzf "$1" -C "$4" --strip-components=1
  else
    git --git-dir="$(gitdir "$1")" archive "$3" | tar -x -C "$4"
  fi
}

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
  rm -rf "$src"
  log "unpacking flyteorg/flyte ${FLYTE_REV:0:12} ($FLYTE_KIND) and flyteorg/stow ${STOW_REV:0:12} ($STOW_KIND)"
  unpack "$FLYTE_SRC" "$FLYTE_KIND" "$FLYTE_REV" "$src/flyte"
  unpack "$STOW_SRC" "$STOW_KIND" "$STOW_REV" "$src/stow"
  (cd "$src/flyte" && go mod edit -replace "github.com/flyteorg/stow=$src/stow")
  log "compiling ./manager/cmd (many minutes on a cold Go cache)"
  (cd "$src/flyte" && go build -p "${TETHER_FLYTE_GO_P:-2}" -trimpath -ldflags "-s -w" \
      -o "$BIN/.flyte.tmp" ./manager/cmd >&2)
  mv -f "$BIN/.flyte.tmp" "$BIN/flyte"
  log "built in $((SECONDS - start))s"
fi
log "ready: $BIN/flyte"
echo "$BIN"
