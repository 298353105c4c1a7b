#!/usr/bin/env bash
# Every image the kind e2e needs, built on this machine without a registry (PyPI is the only
# network the Python images use), cached by version in the Docker daemon and under
# ${TETHER_CACHE:-~/.cache/tether}/e2e/. A warm run takes seconds.
#
#   base images      debootstrap rootfs -> docker import  (tether-e2e/node-base, tether-e2e/python)
#   control plane    registry.k8s.io/{kube-apiserver,kube-controller-manager,kube-scheduler,
#                    kube-proxy}:K8S_VERSION, etcd, coredns/coredns, pause  (from go-bins.sh)
#   node image       tether-e2e/node:<key>: tests/e2e/images/node + the control-plane images
#                    imported into its containerd (what `kind build node-image` does)
#   Tether           tether-e2e/examples-<framework>:e2e (`tether image build`, one per framework env,
#                    with the examples' tools), tether-e2e/operator:e2e (operator/Dockerfile), tether-e2e/fake-provider:e2e,
#                    tether-e2e/s3:e2e (moto server)
# Usage: images.sh [framework ...]   (default: every envs/<id>.txt but core)
# Prints "PYTHON_BASE=..." (the Python base image) and "NODE_IMAGE=..." as its last two lines.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
source "$HERE/versions.sh"
CACHE="${TETHER_CACHE:-$HOME/.cache/tether}/e2e"
log() { echo "[images] $(date +%T) $*" >&2; }
t0=$SECONDS

BIN="$("$HERE/go-bins.sh" | tail -n1)"
"$HERE/dockerd.sh" "$BIN"


import_rootfs() {  # name packages -> prints the image tag
  local tar tag
  tar="$("$HERE/rootfs.sh" "$1" "$2")"
  tag="tether-e2e/$1-base:$(basename "$tar" .tar)"
  docker image inspect "$tag" >/dev/null 2>&1 || { log "docker import $tag"; docker import "$tar" "$tag" >/dev/null; }
  echo "$tag"
}
NODE_BASE="$(import_rootfs node "$NODE_PACKAGES")"
PYTHON_BASE="$(import_rootfs python "$PYTHON_PACKAGES")"

build() {  # tag context [docker build args...]: cached by Docker's layer cache
  local tag="$1" ctx="$2"; shift 2
  log "build $tag"
  docker build -q -t "$tag" "$@" "$ctx" >/dev/null
}

# ---------------------------------------------------------------- control-plane images
PAUSE_VERSION=3.10.2        # kubeadm v1.37's PauseVersion

CP="$CACHE/ctx/control-plane"
mkdir -p "$CP"
PAUSE_BIN="$CACHE/ctx/pause-$PAUSE_VERSION"
if [[ ! -x "$PAUSE_BIN" ]]; then
  # pause.c ships in the k8s.io/kubernetes module (build/pause/linux)
  src="$(cd "$BIN/../src/kubernetes" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c"
  gcc -Os -static -DVERSION="${PAUSE_VERSION}" -o "$PAUSE_BIN.tmp" "$src" && strip "$PAUSE_BIN.tmp" && mv -f "$PAUSE_BIN.tmp" "$PAUSE_BIN"
fi
CP_IMAGES=()
static_image() {  # image binary [entrypoint]
  local image="$1" bin="$2" entry="${3:-}" dir="$CP/$2"
  mkdir -p "$dir"; cp -fL "${4:-$BIN/$bin}" "$dir/$bin"
  { echo "FROM scratch"; echo "COPY $bin /usr/local/bin/$bin"
    [[ -n "$entry" ]] && echo "ENTRYPOINT [\"/usr/local/bin/$bin\"]"; } >"$dir/Dockerfile"
  build "$image" "$dir"; CP_IMAGES+=("$image")
}
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  static_image "registry.k8s.io/$c:$K8S_VERSION" "$c"
done
static_image "registry.k8s.io/etcd:$ETCD_TAG" etcd
static_image "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" coredns entry
static_image "registry.k8s.io/pause:$PAUSE_VERSION" pause entry "$PAUSE_BIN"
mkdir -p "$CP/kube-proxy"; cp -fL "$BIN/kube-proxy" "$CP/kube-proxy/"
printf 'FROM %s\nCOPY kube-proxy /usr/local/bin/kube-proxy\n' "$NODE_BASE" >"$CP/kube-proxy/Dockerfile"
build "registry.k8s.io/kube-proxy:$K8S_VERSION" "$CP/kube-proxy"; CP_IMAGES+=("registry.k8s.io/kube-proxy:$K8S_VERSION")

# ---------------------------------------------------------------- node image
NODE_CTX="$CACHE/ctx/node"
rm -rf "$NODE_CTX"; mkdir -p "$NODE_CTX/bin/cni" "$NODE_CTX/kind-files"
KIND_SRC="$(cd "$BIN/../src/kind" && go list -m -f '{{.Dir}}' sigs.k8s.io/kind)/images/base/files"
cp -r "$KIND_SRC/." "$NODE_CTX/kind-files/"; chmod -R u+w "$NODE_CTX/kind-files"
rm -f "$NODE_CTX/kind-files/etc/containerd/config.toml" "$NODE_CTX/kind-files/etc/systemd/system/containerd-fuse-overlayfs.service"
for b in containerd ctr containerd-shim-runc-v2 crictl runc runc-capdrop kubelet kubeadm kubectl; do cp -fL "$BIN/$b" "$NODE_CTX/bin/"; done
cp -fL "$BIN"/cni/* "$NODE_CTX/bin/cni/"
sed "s/@PAUSE_VERSION@/$PAUSE_VERSION/" "$REPO/tests/e2e/images/node/containerd.toml" >"$NODE_CTX/containerd.toml"
cp "$REPO/tests/e2e/images/node/Dockerfile" "$NODE_CTX/"
build tether-e2e/node-stage:latest "$NODE_CTX" --build-arg "BASE=$NODE_BASE" --build-arg "K8S_VERSION=$K8S_VERSION"
ids="$(docker image inspect -f '{{.Id}}' tether-e2e/node-stage:latest "${CP_IMAGES[@]}")"
NODE_IMAGE="tether-e2e/node:${K8S_VERSION}-$(echo "$ids" | sha256sum | cut -c1-12)"
if ! docker image inspect "$NODE_IMAGE" >/dev/null 2>&1; then
  log "node image $NODE_IMAGE: importing the control-plane images into its containerd"
  tarball="$CACHE/ctx/control-plane-images.tar"
  docker save -o "$tarball" "${CP_IMAGES[@]}"
  cid="$(docker run -d --privileged -v "$tarball:/images.tar:ro" --entrypoint /bin/bash tether-e2e/node-stage:latest \
    -c 'set -e; containerd >/tmp/containerd.log 2>&1 & for i in $(seq 100); do ctr version >/dev/null 2>&1 && break; sleep 0.1; done
        ctr -n k8s.io images import --no-unpack --all-platforms --digests --label=io.cri-containerd.pinned=pinned /images.tar
        kill %1; wait || true')"
  rc="$(docker wait "$cid")"
  if [[ "$rc" != 0 ]]; then docker logs "$cid" >&2; docker rm -f "$cid" >/dev/null; exit 1; fi
  docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'CMD []' \
    "$cid" "$NODE_IMAGE" >/dev/null
  docker rm -f "$cid" >/dev/null; rm -f "$tarball"
fi

# ---------------------------------------------------------------- Tether images
"$HERE/py-images.sh" "$PYTHON_BASE" "$@"

log "ready in $((SECONDS - t0))s"
echo "PYTHON_BASE=$PYTHON_BASE"
echo "NODE_IMAGE=$NODE_IMAGE"
