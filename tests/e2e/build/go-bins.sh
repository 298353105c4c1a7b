#!/usr/bin/env bash
# Build every Go binary the offline kind node image needs, from Go modules
# (the module proxy is the only network this needs), cached by version:
#   kubelet kubeadm kube-controller-manager kube-scheduler kube-proxy  k8s.io/kubernetes
#   kube-apiserver etcd kubectl                                        scripts/k8s-tools.sh (reused)
#   containerd ctr containerd-shim-runc-v2                             containerd/v2
#   crictl                                                             cri-tools
#   runc                                                               opencontainers/runc (cgo, seccomp)
#   cni/{bridge,host-local,loopback,portmap,ptp}                       CNI plugins
#   coredns                                                            coredns
#   kind                                                               sigs.k8s.io/kind
#   runc-capdrop (the SYS_RESOURCE-dropping runc wrapper)              tests/e2e/build/runc-capdrop
# Prints the bin dir as the last stdout line. Warm: well under a second.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
source "$HERE/versions.sh"

GO_VERSION="$(GOTOOLCHAIN=local go env GOVERSION)"
KEY="go-${K8S_VERSION}_ctrd-${CONTAINERD_VERSION}_cni-${CNI_VERSION}_crictl-${CRICTL_VERSION}_dns-${COREDNS_VERSION}_kind-${KIND_VERSION}_${GO_VERSION}_r${GO_RECIPE}"
ROOT="${TETHER_CACHE:-$HOME/.cache/tether}/e2e/${KEY}"
BIN="$ROOT/bin"
mkdir -p "$BIN/cni" "$ROOT/src"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
GO_P="${TETHER_E2E_GO_P:-2}"
log() { echo "[go-bins] $*" >&2; }
have() { [[ -x "$BIN/$1" ]]; }

ALL=(kubelet kubeadm kube-controller-manager kube-scheduler kube-proxy containerd ctr containerd-shim-runc-v2
     crictl coredns kind runc runc-capdrop cni/bridge cni/host-local cni/loopback cni/portmap cni/ptp)
# --check: exit 0 when everything is already built (a warm cache), 1 otherwise; builds nothing.
if [[ "${1:-}" == --check ]]; then
  for b in "${ALL[@]}"; do [[ -x "$BIN/$b" ]] || { log "not built: $b"; exit 1; }; done
  for b in kube-apiserver etcd kubectl helm; do [[ -x "$BIN/$b" ]] || { log "not built: $b"; exit 1; }; done
  echo "$BIN"; exit 0
fi

# kube-apiserver, etcd, kubectl, helm: the bare-control-plane script already builds them.
K8S_TOOLS="$("$REPO/scripts/k8s-tools.sh" | tail -n1)"
for b in kube-apiserver etcd kubectl helm; do ln -sf "$K8S_TOOLS/$b" "$BIN/$b"; done

wrapper_module() {  # dir name: a module requiring k8s.io/kubernetes with staging replaces
  local src="$1" minor patch staging gomod
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"; patch="${K8S_VERSION##*.}"
  staging="v0.${minor}.${patch}"
  mkdir -p "$src"
  gomod="$(cd "$src" && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  {
    echo "module tether.local/e2e/$2"; echo; echo "go 1.26.0"; echo
    grep -E '^godebug ' "$gomod" || true
    echo; echo "require k8s.io/kubernetes ${K8S_VERSION}"; echo; echo "replace ("
    sed -n '/^replace (/,/^)/p' "$gomod" |
      sed -nE "s#^[[:space:]]*(k8s\.io/[A-Za-z0-9._-]+)[[:space:]]+=>[[:space:]]+\./staging/.*#\t\1 => \1 ${staging}#p"
    echo ")"
  } >"$src/go.mod"
}

k8s_ldflags() {
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local ld="-s -w" kv
  for kv in "gitVersion=${K8S_VERSION}" "gitMajor=1" "gitMinor=${minor}" \
            "gitTreeState=clean" "buildDate=1970-01-01T00:00:00Z"; do
    ld+=" -X k8s.io/component-base/version.${kv} -X k8s.io/client-go/pkg/version.${kv}"
  done
  echo "$ld"
}

build_k8s() {
  local src="$ROOT/src/kubernetes" cmds=() c
  for c in kubelet kubeadm kube-controller-manager kube-scheduler kube-proxy; do
    have "$c" || cmds+=("k8s.io/kubernetes/cmd/$c")
  done
  (( ${#cmds[@]} )) || return 0
  wrapper_module "$src" kubernetes
  # start from the bare control plane's resolved go.sum when there is one
  [[ -f "$K8S_TOOLS/../src/kube-apiserver/go.sum" ]] && cp "$K8S_TOOLS/../src/kube-apiserver/go.sum" "$src/go.sum"
  log "kubernetes ${K8S_VERSION}: resolving ${cmds[*]}"
  (cd "$src" && for c in "${cmds[@]}"; do go get "$c@${K8S_VERSION}" >&2; done)
  log "kubernetes: compiling (cold: many minutes)"
  mkdir -p "$src/out"
  (cd "$src" && go build -p "$GO_P" -trimpath -tags selinux,notest,grpcnotrace \
      -ldflags "$(k8s_ldflags)" -o "$src/out/" "${cmds[@]}" >&2)
  for c in "${cmds[@]}"; do mv -f "$src/out/${c##*/}" "$BIN/${c##*/}"; done
}

# A throwaway module requiring $2@$3 and building packages $4... into $BIN (names as built)
build_mod() {
  local name="$1" mod="$2" ver="$3" tags="$4" ld="$5"; shift 5
  local src="$ROOT/src/$name" p
  mkdir -p "$src/out"
  printf 'module tether.local/e2e/%s\n\ngo 1.26.0\n' "$name" >"$src/go.mod"
  rm -f "$src/go.sum"
  (cd "$src" && for p in "$@"; do go get "$p@$ver" >&2; done)
  (cd "$src" && go build -p "$GO_P" -trimpath -tags "$tags" -ldflags "-s -w $ld" -o "$src/out/" "$@" >&2)
}

build_containerd() {
  have containerd && have ctr && have containerd-shim-runc-v2 && return 0
  log "containerd ${CONTAINERD_VERSION}"
  local m=github.com/containerd/containerd/v2
  build_mod containerd "$m" "$CONTAINERD_VERSION" "no_btrfs,no_devmapper,no_zfs,no_aufs" \
    "-X $m/version.Version=${CONTAINERD_VERSION} -X $m/version.Revision=tether-e2e" \
    "$m/cmd/containerd" "$m/cmd/ctr" "$m/cmd/containerd-shim-runc-v2"
  mv -f "$ROOT/src/containerd/out/"* "$BIN/"
}

build_runc() {
  have runc && return 0
  log "runc ${RUNC_VERSION} (cgo + libseccomp: seccomp profiles need it)"
  if [[ ! -f /usr/include/seccomp.h ]]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev pkg-config >&2
  fi
  local m=github.com/opencontainers/runc
  CGO_ENABLED=1 build_mod runc "$m" "$RUNC_VERSION" "seccomp" "-X main.version=${RUNC_VERSION#v}" "$m"
  mv -f "$ROOT/src/runc/out/runc" "$BIN/"
}

build_crictl() {
  have crictl && return 0
  log "crictl ${CRICTL_VERSION}"
  build_mod crictl sigs.k8s.io/cri-tools "$CRICTL_VERSION" "" \
    "-X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION}" sigs.k8s.io/cri-tools/cmd/crictl
  mv -f "$ROOT/src/crictl/out/crictl" "$BIN/"
}

build_cni() {
  local p missing=() m=github.com/containernetworking/plugins
  for p in main/bridge main/ptp main/loopback ipam/host-local meta/portmap; do
    [[ -x "$BIN/cni/${p##*/}" ]] || missing+=("$m/plugins/$p")
  done
  (( ${#missing[@]} )) || return 0
  log "CNI plugins ${CNI_VERSION}"
  build_mod cni "$m" "$CNI_VERSION" "" "" "${missing[@]}"
  mv -f "$ROOT/src/cni/out/"* "$BIN/cni/"
}

build_coredns() {
  have coredns && return 0
  log "coredns ${COREDNS_VERSION}"
  build_mod coredns github.com/coredns/coredns "$COREDNS_VERSION" "" "" github.com/coredns/coredns
  mv -f "$ROOT/src/coredns/out/coredns" "$BIN/"
}

build_kind() {
  have kind && return 0
  log "kind ${KIND_VERSION}"
  build_mod kind sigs.k8s.io/kind "$KIND_VERSION" "" "" sigs.k8s.io/kind
  mv -f "$ROOT/src/kind/out/kind" "$BIN/"
}

build_capdrop() {
  # Always rebuilt when its source changes (cheap): keyed by the source's hash.
  local sum; sum="$(sha256sum "$HERE/runc-capdrop/main.go" | cut -c1-12)"
  [[ -x "$BIN/runc-capdrop" && -f "$BIN/.runc-capdrop.$sum" ]] && return 0
  log "runc-capdrop"
  (cd "$HERE/runc-capdrop" && go build -trimpath -ldflags "-s -w" -o "$BIN/runc-capdrop" .)
  rm -f "$BIN"/.runc-capdrop.*; touch "$BIN/.runc-capdrop.$sum"
}

start=$SECONDS
# Each step holds its own lock, so two invocations (e.g. k8s and the small ones) may run side by side.
for step in ${TETHER_E2E_GO_ONLY:-capdrop kind crictl cni runc containerd coredns k8s}; do
  ( exec 9>"$ROOT/.lock-$step"; flock 9; "build_$step" )
done
log "ready in $((SECONDS - start))s: $BIN"
echo "$BIN"
