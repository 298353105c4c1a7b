#!/usr/bin/env bash
# The kind e2e, offline: build every image here, create a 3-node kind cluster (control plane, CPU
# worker, "A100" worker), helm install charts/tether, run the e2e pytest suite against it.
#
#   tests/e2e/run.sh            build + up + install + test (the cluster is kept; `down` deletes it)
#   tests/e2e/run.sh build|up|install|test|down|status|ready
#   tests/e2e/run.sh load "NODE..." IMAGE...   (streams Docker images into kind nodes)
#   tests/e2e/run.sh test -k gpu     (extra args go to pytest)
#
# Needs root for apt/dockerd where Docker is missing (it installs Debian's docker.io and starts
# dockerd itself), Go (binaries are built from Go modules) and debootstrap (base images).
# Env: TETHER_E2E_FRAMEWORKS="openai langgraph" (default: every envs/<id>.txt but core),
#      TETHER_CACHE (default ~/.cache/tether; e2e caches under $TETHER_CACHE/e2e),
#      TETHER_E2E_CLUSTER / TETHER_E2E_KIND_CONFIG / TETHER_E2E_KUBECONFIG: another cluster
#      (the flyte-* commands set them: their own cluster `tether-flyte`, see flyte/flyte.sh).
#
#   tests/e2e/run.sh flyte-up|flyte-install|flyte-test|flyte-down|flyte   the Flyte 2 backend e2e
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
source "$HERE/build/versions.sh"
CACHE="${TETHER_CACHE:-$HOME/.cache/tether}/e2e"
if [[ "${1:-}" == flyte* ]]; then  # the Flyte e2e: its own cluster and kubeconfig
  TETHER_E2E_CLUSTER=tether-flyte TETHER_E2E_KIND_CONFIG="$HERE/flyte/kind-config.yaml"
  TETHER_E2E_KUBECONFIG="$CACHE/kubeconfig-flyte"
fi
CLUSTER="${TETHER_E2E_CLUSTER:-tether-e2e}"
KIND_CONFIG="${TETHER_E2E_KIND_CONFIG:-$HERE/kind-config.yaml}"
export KUBECONFIG="${TETHER_E2E_KUBECONFIG:-$CACHE/kubeconfig}"
NS=tether-e2e INFRA=tether-e2e-infra RELEASE=tether
log() { echo "[e2e] $(date +%T) $*" >&2; }
mkdir -p "$CACHE"
read -r -a FRAMEWORKS <<<"${TETHER_E2E_FRAMEWORKS:-}"

bins() { BIN="$("$HERE/build/go-bins.sh" | tail -n1)"; export PATH="$BIN:$PATH"; }

cmd_build() {
  local out; out="$("$HERE/build/images.sh" "${FRAMEWORKS[@]}")"
  echo "$out" | tail -n2 >"$CACHE/node-image.env"  # PYTHON_BASE= and NODE_IMAGE=
}

node_image() { sed -n 's/^NODE_IMAGE=//p' "$CACHE/node-image.env"; }

cmd_up() {
  bins; "$HERE/build/dockerd.sh" "$BIN"
  if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    local config="$CACHE/kind-config-$CLUSTER.yaml"
    sed -e "s/@ETCD_TAG@/$ETCD_TAG/" -e "s/@COREDNS_VERSION@/$COREDNS_VERSION/" "$KIND_CONFIG" >"$config"
    log "kind create cluster $CLUSTER ($(node_image))"
    kind create cluster --name "$CLUSTER" --image "$(node_image)" --config "$config" --retain
  fi
  kind export kubeconfig --name "$CLUSTER" >/dev/null 2>&1
  network
  # The "A100" worker advertises 8 GPUs: an extended resource in the node status is all the
  # scheduler needs (no device plugin, no GPU).
  local gpu; gpu="$(kubectl get nodes -l cloud.google.com/gke-accelerator=nvidia-tesla-a100 -o name)"
  [[ -z "$gpu" ]] || kubectl patch "$gpu" --subresource=status --type=json \
    -p '[{"op":"add","path":"/status/capacity/nvidia.com~1gpu","value":"8"}]' >/dev/null
  kubectl wait --for=condition=Ready nodes --all --timeout=180s
  kubectl -n kube-system rollout status deploy/coredns --timeout=180s
}

# Pod networking without kindnetd (not buildable offline: its module is not served): each node
# gets the CNI bridge plugin on its own podCIDR and a route to every other node's podCIDR over the
# kind Docker network (all nodes share one L2 segment).
network() {
  local nodes n cidr ip other ocidr oip deadline=$((SECONDS + 120))
  until (( $(kubectl get nodes -o jsonpath='{.items[*].spec.podCIDR}' | wc -w) == $(kubectl get nodes -o name | wc -l) )); do
    (( SECONDS < deadline )) || { log "nodes without a podCIDR after 120s"; return 1; }
    sleep 1
  done
  nodes="$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')"
  while read -r n cidr ip; do
    docker exec -i "$n" sh -c 'cat > /etc/cni/net.d/10-tether-e2e.conflist' <<JSON
{"cniVersion": "1.0.0", "name": "tether-e2e", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
    while read -r other ocidr oip; do
      [[ "$other" == "$n" ]] || docker exec "$n" ip route replace "$ocidr" via "$oip"
    done <<<"$nodes"
  done <<<"$nodes"
}

cmd_install() {
  bins
  local images=(tether-e2e/operator:e2e tether-e2e/fake-provider:e2e tether-e2e/s3:e2e)
  # The openai examples image is the chart's runtime image (GPU, kill and wait tests use it). The
  # other frameworks' images are loaded onto the CPU worker one at a time by the tests
  # (cluster.framework_image): ten ~1.3 GB images unpacked on every node would not fit on disk.
  images+=("tether-e2e/examples-openai:e2e")
  load_images "$(workers)" "${images[@]}"  # onto the workers only: the control plane runs no Tether pod
  infra tether-e2e
  helm_install --set executor.runtimeImage.repository=tether-e2e/examples-openai --set executor.runtimeImage.tag=e2e
}

# load_images "NODE..." IMAGE...: each image streamed into each node's containerd
# (`docker save | ctr import --discard-unpacked-layers`: no temporary archive, unlike `kind load`,
# and the layer blobs left to the garbage collector once unpacked, as the node's containerd does
# for pulled images; the snapshots are what containers run from): half the disk of `kind load`,
# on a disk this machine shares with every build. An image a node already holds (same id) is
# skipped. Largest first: the peak is one image's blobs. A failure says why and how full the disks are.
load_images() {
  local nodes="$1" node img id; shift
  for img in $(for i in "$@"; do echo "$(docker image inspect -f '{{.Size}}' "$i") $i"; done | sort -rn | cut -d' ' -f2); do
    id="$(docker image inspect -f '{{.Id}}' "$img")"
    for node in $nodes; do
      [[ "$(docker exec "$node" crictl inspecti -o go-template --template '{{.status.id}}' "$img" 2>/dev/null)" != "$id" ]] || continue
      log "load $img onto $node"
      if ! docker save "$img" | docker exec -i "$node" ctr -n k8s.io images import --local --digests \
        --discard-unpacked-layers --snapshotter=overlayfs - >/dev/null; then
        log "loading $img onto $node failed; disk: $(df -h --output=avail,pcent / | tail -n1) free on the host," \
          "node $(docker exec "$node" df -h --output=avail,pcent /var | tail -n1)"
        return 1
      fi
    done
  done
}

workers() { kubectl get nodes -l '!node-role.kubernetes.io/control-plane' -o jsonpath='{.items[*].metadata.name}'; }

infra() {  # S3 (with these buckets) and the fake provider, in $INFRA
  sed "s|image: tether-e2e/fake-provider:e2e|image: ${FAKE_PROVIDER_IMAGE:-tether-e2e/fake-provider:e2e}|" "$HERE/manifests/infra.yaml" |
    kubectl apply -f - >/dev/null
  python3 "$HERE/fake_script.py" "$REPO/examples" | kubectl -n "$INFRA" create configmap fake-provider-script \
    --from-file=script.yaml=/dev/stdin --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl -n "$INFRA" rollout restart deploy/fake-provider >/dev/null
  kubectl -n "$INFRA" rollout status deploy/s3 --timeout=180s
  kubectl -n "$INFRA" rollout status deploy/fake-provider --timeout=180s
  kubectl -n "$INFRA" exec deploy/s3 -- python -c '
import sys, boto3
s3 = boto3.client("s3", endpoint_url="http://127.0.0.1:5000", region_name="us-east-1",
                  aws_access_key_id="e2e", aws_secret_access_key="e2e")
for bucket in set(sys.argv[1:]) - {b["Name"] for b in s3.list_buckets()["Buckets"]}:
    s3.create_bucket(Bucket=bucket)' "$@"
}

helm_install() {  # the chart with values.yaml, the e2e images and these extra helm args
  kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  local s
  for s in "$NS/tether-store" "$NS/tether-operator-store"; do
    kubectl -n "${s%/*}" create secret generic "${s#*/}" --from-literal=AWS_ACCESS_KEY_ID=e2e \
      --from-literal=AWS_SECRET_ACCESS_KEY=e2e --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  done
  log "helm install $RELEASE charts/tether"
  helm upgrade --install "$RELEASE" "$REPO/charts/tether" -n "$NS" -f "$HERE/values.yaml" \
    --set image.repository=tether-e2e/operator --set image.tag=e2e "$@" --wait --timeout 300s
  kubectl -n "$NS" rollout status "deploy/$RELEASE" --timeout=180s
}

cmd_test() {
  cd "$REPO"
  bins
  local v; v="$("$REPO/scripts/env.sh" core)"
  TETHER_E2E=1 TETHER_E2E_FRAMEWORKS="${FRAMEWORKS[*]}" KUBECONFIG="$KUBECONFIG" \
    "$v/bin/python" -m pytest tests/e2e -p no:cacheprovider "$@"
}

# Exit 0 when the e2e can run quickly here: every build cache warm (Go binaries, base rootfs, the
# node image in the Docker daemon) and a Docker daemon that answers (started if need be). Says
# which it is either way (scripts/test.sh runs the e2e only then).
cmd_ready() {
  local bin
  bin="$("$HERE/build/go-bins.sh" --check 2>&1 | tail -n1)" || { echo "e2e not ready: Go binaries not built ($bin)"; return 1; }
  "$HERE/build/rootfs.sh" node "$NODE_PACKAGES" --check >/dev/null 2>&1 &&
    "$HERE/build/rootfs.sh" python "$PYTHON_PACKAGES" --check >/dev/null 2>&1 || { echo "e2e not ready: base rootfs not built"; return 1; }
  "$HERE/build/dockerd.sh" "$bin" 2>/dev/null || { echo "e2e not ready: no Docker daemon can start here"; return 1; }
  [[ -s "$CACHE/node-image.env" ]] && docker image inspect "$(node_image)" >/dev/null 2>&1 ||
    { echo "e2e not ready: the node image is not built"; return 1; }
  local fw
  if (( ${#FRAMEWORKS[@]} == 0 )); then
    for fw in "$REPO"/envs/*.txt; do fw="$(basename "$fw" .txt)"; [[ "$fw" == core ]] || FRAMEWORKS+=("$fw"); done
  fi
  for fw in "${FRAMEWORKS[@]}"; do
    docker image inspect "tether-e2e/examples-$fw:e2e" >/dev/null 2>&1 ||
      { echo "e2e not ready: no runtime image for $fw (tests/e2e/run.sh build; TETHER_E2E_FRAMEWORKS picks fewer)"; return 1; }
  done
  echo "e2e ready: caches warm, Docker $(docker version --format '{{.Server.Version}}')"
}

cmd_down() { bins; kind delete cluster --name "$CLUSTER"; }

cmd_status() { bins; kubectl get nodes -o wide; kubectl get pods -A -o wide; }

case "${1:-all}" in
  build) cmd_build ;;
  up) cmd_up ;;
  install) cmd_install ;;
  test) shift; cmd_test "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  ready) cmd_ready ;;
  load) shift; load_images "$1" "${@:2}" ;;  # load "NODE..." IMAGE... (tests/e2e/cluster.py)
  all) shift || true; cmd_build; cmd_up; cmd_install; cmd_test "$@" ;;
  flyte*) source "$HERE/flyte/flyte.sh"
    case "$1" in
      flyte-build) flyte_build ;;
      flyte-up) cmd_up ;;
      flyte-install) flyte_install ;;
      flyte-test) shift; flyte_test "$@" ;;
      flyte-down) cmd_down ;;
      flyte-status) cmd_status ;;
      flyte) shift; cmd_up; flyte_install; flyte_test "$@" ;;
      *) echo "usage: $0 flyte[-build|-up|-install|-test|-down|-status] [pytest args]" >&2; exit 2 ;;
    esac ;;
  *) echo "usage: $0 [all|build|up|install|test|down|status|flyte-*] [pytest args]" >&2; exit 2 ;;
esac
