#!/usr/bin/env bash
# Build the OCI registry the chart's `helm push` / `helm pull` test talks to, cached:
#   oci-registry  go-containerregistry's in-memory registry (pkg/registry: the OCI distribution API,
#                 what `crane registry serve` runs), behind a main that listens where it is told
#                 (default 127.0.0.1 on a free port) and prints "READY host:port"
#
# Output: $TETHER_CACHE/oci-registry/<version-key>/bin/  (TETHER_CACHE defaults to ~/.cache/tether).
# The bin dir is printed as the LAST line of stdout; progress goes to stderr. Idempotent: a binary
# already built is reused at once; a second caller waits on the lock and reuses the first's.
set -euo pipefail

GGCR_VERSION=v0.22.1          # github.com/google/go-containerregistry
RECIPE=1                      # bump when the build recipe itself changes

GO_VERSION="$(GOTOOLCHAIN=local go env GOVERSION)"
KEY="ggcr-${GGCR_VERSION}_${GO_VERSION}_r${RECIPE}"
ROOT="${TETHER_CACHE:-$HOME/.cache/tether}/oci-registry/${KEY}"
mkdir -p "$ROOT/bin" "$ROOT/src"
ROOT="$(cd "$ROOT" && pwd -P)"
BIN="$ROOT/bin"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0

log() { echo "[oci-registry] $*" >&2; }

exec 9>"$ROOT/.lock"
if command -v flock >/dev/null; then flock 9; fi

build() {
  local src="$ROOT/src/oci-registry"
  rm -rf "$src" && mkdir -p "$src"
  printf 'module tether.local/oci-registry\n\ngo 1.26.0\n' >"$src/go.mod"
  cat >"$src/main.go" <<'GO'
// Command oci-registry: an in-memory OCI registry on one address, for tests.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on (port 0: a free one)")
	flag.Parse()
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("READY %s\n", l.Addr())
	log.Fatal(http.Serve(l, registry.New()))
}
GO
  log "resolving github.com/google/go-containerregistry ${GGCR_VERSION}"
  (cd "$src" && go get "github.com/google/go-containerregistry@${GGCR_VERSION}" >&2)
  log "compiling"
  (cd "$src" && go build -mod=mod -trimpath -ldflags "-s -w" -o "$BIN/.oci-registry.tmp" . >&2)
  mv -f "$BIN/.oci-registry.tmp" "$BIN/oci-registry"
}

start=$SECONDS
[ -x "$BIN/oci-registry" ] || build
log "ready in $((SECONDS - start))s: $BIN"
echo "$BIN"
