# The Flyte e2e (sourced by tests/e2e/run.sh for its flyte-* commands, which point CLUSTER and
# KUBECONFIG at the cluster `tether-flyte`): the open-source Flyte 2 backend, its PostgreSQL, the
# S3 server and the fake provider in a kind cluster of its own, and the chart in Flyte mode. Runs
# execute in the task pods the backend makes.
#
#   flyte-build    tether-flyte/backend (the cached scripts/flyte-backend.sh binary on the e2e
#                  Python base), tether-flyte/postgres (Debian's postgresql, debootstrap rootfs),
#                  and this checkout's operator, runtime and fake provider over run.sh build's
#                  tether-e2e/* images (which must exist); flyte-install runs it (warm: seconds)
#   flyte-up       the cluster (control plane + one worker; run.sh's cmd_up and pod network)
#   flyte-install  load the images, S3 + fake provider, the backend, `helm install` (flyte mode)
#   flyte-test     tests/e2e/flyte (pytest args pass through)
#   flyte-down     delete the cluster;  flyte: up, install, test
FLYTE_E2E_IMAGES=(tether-e2e/operator:e2e tether-e2e/s3:e2e tether-e2e/examples-openai:e2e)  # run.sh build's
# the fake provider: its own small image FROM the operator's (see images/fake-provider.Dockerfile)
export FAKE_PROVIDER_IMAGE=tether-flyte/fake-provider:e2e
FLYTE_OPERATOR_IMAGE=tether-flyte/operator:e2e
FLYTE_RUNTIME_IMAGE=tether-flyte/examples-openai:e2e  # the task pods' image (tests/e2e/flyte/conftest.py)
FLYTE_IMAGES_ENV="$CACHE/flyte-images.env"

flyte_build() {
  bins; "$HERE/build/dockerd.sh" "$BIN"
  local img
  for img in "${FLYTE_E2E_IMAGES[@]}"; do
    docker image inspect "$img" >/dev/null 2>&1 || { log "missing $img: run tests/e2e/run.sh build first"; return 1; }
  done
  local fbin key pg py base ctx="$CACHE/ctx/flyte"
  fbin="$("$REPO/scripts/flyte-backend.sh" | tail -n1)"
  key="$(basename "$(dirname "$fbin")")"  # the backend's cache key: flyte + stow commits, Go version
  py="$("$HERE/build/rootfs.sh" python "$PYTHON_PACKAGES")"
  pg="$("$HERE/build/rootfs.sh" postgres "postgresql,ca-certificates")"
  mkdir -p "$ctx"
  base="tether-e2e/python-base:$(basename "$py" .tar)"
  docker image inspect "$base" >/dev/null 2>&1 || docker import "$py" "$base" >/dev/null
  local backend="tether-flyte/backend:${key,,}"
  if ! docker image inspect "$backend" >/dev/null 2>&1; then
    log "build $backend"
    cp -fL "$fbin/flyte" "$ctx/flyte"
    nice -n 10 docker build -q -t "$backend" --build-arg "BASE=$base" -f "$HERE/flyte/images/backend.Dockerfile" "$ctx" >/dev/null
    rm -f "$ctx/flyte"
  fi
  local pgbase="tether-flyte/postgres-base:$(basename "$pg" .tar)-trim" postgres
  docker image inspect "$pgbase" >/dev/null 2>&1 || python3 "$HERE/flyte/trim_rootfs.py" "$pg" | docker import - "$pgbase" >/dev/null
  postgres="tether-flyte/postgres:$(basename "$pg" .tar)-trim"
  log "build $postgres"
  nice -n 10 docker build -q -t "$postgres" --build-arg "BASE=$pgbase" -f "$HERE/flyte/images/postgres.Dockerfile" "$HERE/flyte/images" >/dev/null
  # This checkout's operator, runtime and fake provider over run.sh build's images.
  derived "$FLYTE_OPERATOR_IMAGE" tether-e2e/operator:e2e operator.Dockerfile runtime/src/tether operator/src/tether_operator
  derived "$FLYTE_RUNTIME_IMAGE" tether-e2e/examples-openai:e2e examples.Dockerfile runtime/src/tether
  derived "$FAKE_PROVIDER_IMAGE" tether-e2e/operator:e2e fake-provider.Dockerfile testing/src/tether/testing
  printf 'BACKEND_IMAGE=%s\nPOSTGRES_IMAGE=%s\nBACKEND_SRC=%s\n' "$backend" "$postgres" "$(dirname "$fbin")/src/flyte" >"$FLYTE_IMAGES_ENV"
}

# derived TAG BASE DOCKERFILE PATH...: an image FROM BASE with these repository paths (the
# Dockerfile in flyte/images), rebuilt only when BASE or the sources changed (a label holds their
# digest): an unchanged image keeps its id, so load_images does not load it again.
derived() {
  local tag="$1" base="$2" file="tests/e2e/flyte/images/$3" key; shift 3
  src() { tar -c -C "$REPO" --exclude=__pycache__ --sort=name --mtime=@0 --owner=0 --group=0 "$file" "$@"; }
  key="$({ docker image inspect -f '{{.Id}}' "$base"; src "$@" | sha256sum; } | sha256sum | cut -c1-16)"
  [[ "$(docker image inspect -f '{{index .Config.Labels "tether.e2e.key"}}' "$tag" 2>/dev/null)" == "$key" ]] && return
  log "build $tag"
  src "$@" | nice -n 10 docker build -q -t "$tag" --label "tether.e2e.key=$key" --build-arg "BASE=$base" -f "$file" - >/dev/null
}

flyte_env() { sed -n "s/^$1=//p" "$FLYTE_IMAGES_ENV"; }

FLYTE_ENDPOINT=flyte-binary-http.flyte.svc.cluster.local:8090

flyte_install() {
  bins
  flyte_build  # warm: seconds; the operator image follows this checkout
  load_images "$(workers)" "$(flyte_env BACKEND_IMAGE)" "$(flyte_env POSTGRES_IMAGE)" tether-e2e/s3:e2e "$FAKE_PROVIDER_IMAGE" "$FLYTE_OPERATOR_IMAGE" "$FLYTE_RUNTIME_IMAGE"
  infra tether-e2e flyte-data
  kubectl apply --server-side -f "$(flyte_env BACKEND_SRC)/executor/config/crd/bases/flyte.org_taskactions.yaml" >/dev/null
  sed -e "s|@BACKEND_IMAGE@|$(flyte_env BACKEND_IMAGE)|" -e "s|@POSTGRES_IMAGE@|$(flyte_env POSTGRES_IMAGE)|" \
    "$HERE/flyte/backend.yaml" | kubectl apply -f - >/dev/null
  kubectl -n flyte rollout status deploy/postgres --timeout=180s
  kubectl -n flyte rollout status deploy/flyte-binary --timeout=300s
  helm_install --set image.repository="${FLYTE_OPERATOR_IMAGE%:*}" --set image.tag="${FLYTE_OPERATOR_IMAGE#*:}" --set executor.kind=flyte --set executor.flyte.endpoint="$FLYTE_ENDPOINT" --set executor.flyte.insecure=true \
    --set executor.runtimeImage.repository="${FLYTE_RUNTIME_IMAGE%:*}" --set executor.runtimeImage.tag="${FLYTE_RUNTIME_IMAGE#*:}"
}

flyte_test() {
  cd "$REPO"
  bins
  kind get clusters 2>/dev/null | grep -qx "$CLUSTER" ||
    { echo "Flyte e2e NOT RUN: no kind cluster $CLUSTER (tests/e2e/run.sh flyte-up flyte-install)"; return 1; }
  local v; v="$("$REPO/scripts/env.sh" core)"
  TETHER_E2E_FLYTE=1 TETHER_E2E_FRAMEWORKS=openai KUBECONFIG="$KUBECONFIG" \
    "$v/bin/python" -m pytest tests/e2e/flyte -p no:cacheprovider "$@"
}
