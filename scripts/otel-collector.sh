#!/usr/bin/env bash
# Build the smallest real OpenTelemetry Collector the telemetry tests export to, cached:
#   otelcol-tether  the Collector (go.opentelemetry.io/collector/otelcol) with one receiver, OTLP
#                   (otlpreceiver), and one exporter, file (the contrib fileexporter: OTLP JSON
#                   lines), every collector module at one release (OTELCOL_VERSION; the stable
#                   v1 modules at the release's STABLE_VERSION, as the release's builder pins them)
#
# Output: $TETHER_CACHE/otel/<version-key>/bin/  (TETHER_CACHE defaults to ~/.cache/tether). The
# bin dir is printed as the LAST line of stdout; progress goes to stderr. Idempotent: a binary
# already built is reused at once; a second caller waits on the lock and reuses the first's.
# Cold: a few minutes on 2 cores (the module downloads and one go build).
set -euo pipefail

OTELCOL_VERSION=v0.165.0      # go.opentelemetry.io/collector/* and collector-contrib/* (beta modules)
STABLE_VERSION=v1.71.0        # the same release's stable modules (confmap, its providers, ...)
RECIPE=2                      # bump when the build recipe itself changes

GO_VERSION="$(GOTOOLCHAIN=local go env GOVERSION)"
KEY="otelcol-${OTELCOL_VERSION}_${GO_VERSION}_r${RECIPE}"
ROOT="${TETHER_CACHE:-$HOME/.cache/tether}/otel/${KEY}"
mkdir -p "$ROOT/bin" "$ROOT/src"
ROOT="$(cd "$ROOT" && pwd -P)"
BIN="$ROOT/bin"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0

log() { echo "[otel-collector] $*" >&2; }

exec 9>"$ROOT/.lock"
if command -v flock >/dev/null; then flock 9; fi

build() {
  local src="$ROOT/src/otelcol"
  rm -rf "$src" && mkdir -p "$src"
  cat >"$src/go.mod" <<EOF
module tether.local/otel-build/otelcol

go 1.26.0
EOF
  # What the release's builder (go.opentelemetry.io/collector/cmd/builder) generates for this
  # component list, written out: no builder binary to fetch and run.
  cat >"$src/main.go" <<'EOF'
// Command otelcol-tether: an OpenTelemetry Collector with an OTLP receiver and a file exporter.
package main

import (
	"os"

	fileexporter "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

func components() (otelcol.Factories, error) {
	var err error
	factories := otelcol.Factories{Telemetry: otelconftelemetry.NewFactory()}
	if factories.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	if factories.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](fileexporter.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	return factories, nil
}

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{Command: "otelcol-tether", Description: "OTLP in, OTLP JSON files out", Version: "tether"},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			// ${VAR} in a config is read from the environment (the collector's default scheme).
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{envprovider.NewFactory(), fileprovider.NewFactory()},
				DefaultScheme:     "env",
			},
		},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		os.Exit(1)
	}
}
EOF
  log "resolving collector ${OTELCOL_VERSION} modules"
  (cd "$src" && go get \
    "go.opentelemetry.io/collector/otelcol@${OTELCOL_VERSION}" \
    "go.opentelemetry.io/collector/receiver/otlpreceiver@${OTELCOL_VERSION}" \
    "go.opentelemetry.io/collector/service@${OTELCOL_VERSION}" \
    "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter@${OTELCOL_VERSION}" \
    "go.opentelemetry.io/collector/confmap/provider/envprovider@${STABLE_VERSION}" \
    "go.opentelemetry.io/collector/confmap/provider/fileprovider@${STABLE_VERSION}" >&2)
  # No `go mod tidy`: it would resolve the test imports of the dependencies too, and the module
  # proxy refuses some of those (otlpencodingextension v0.165.0: 403). `go get` above resolved what
  # the build needs; -mod=mod lets the build record the go.sum lines of packages it reaches.
  log "compiling"
  (cd "$src" && go build -mod=mod -p "${TETHER_OTEL_GO_P:-2}" -trimpath -ldflags "-s -w" -o "$BIN/.otelcol-tether.tmp" . >&2)
  mv -f "$BIN/.otelcol-tether.tmp" "$BIN/otelcol-tether"
}

start=$SECONDS
[ -x "$BIN/otelcol-tether" ] || build
log "ready in $((SECONDS - start))s: $BIN"
echo "$BIN"
