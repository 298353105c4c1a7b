#!/usr/bin/env bash
# Tether's images for the e2e, from the repository's Dockerfiles FROM a local Python base image:
#   tether-e2e/runtime-<framework>:e2e   runtime/Dockerfile, ADAPTER=<framework> (image variant)
#   tether-e2e/examples-<framework>:e2e  + the examples' tool module
#   tether-e2e/operator:e2e              operator/Dockerfile (ADAPTERS="": Kubernetes executor)
#   tether-e2e/fake-provider:e2e         the operator image + tether-testing
#   tether-e2e/s3:e2e                    the operator image running moto's server
# The build context is a tar stream of the repository's packages plus the environment's wheels
# (downloaded on the host by wheels.sh) as wheels/: nothing in `docker build` uses the network.
# Usage: py-images.sh PYTHON_BASE [framework ...]  (default: every envs/<id>.txt but core)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
PYTHON_BASE="$1"; shift
log() { echo "[images] $(date +%T) $*" >&2; }

py_build() {  # tag dockerfile env-id [build args...]
  local tag="$1" dockerfile="$2" wheels; wheels="$("$HERE/wheels.sh" "$3")"; shift 3
  log "build $tag"
  tar -c --exclude=__pycache__ --exclude='*.egg-info' --exclude=.venv \
      -C "$REPO" envs runtime operator adapters testing tests/e2e/images \
      -C "$(dirname "$wheels")" --transform "s,^$(basename "$wheels"),wheels," "$(basename "$wheels")" |
    docker build -q -t "$tag" -f "$dockerfile" --build-arg "BASE=$PYTHON_BASE" "$@" - >/dev/null
}

FRAMEWORKS=("$@")
if (( ${#FRAMEWORKS[@]} == 0 )); then
  for f in "$REPO"/envs/*.txt; do f="$(basename "$f" .txt)"; [[ "$f" == core ]] || FRAMEWORKS+=("$f"); done
fi
py_build tether-e2e/operator:e2e operator/Dockerfile core --build-arg ADAPTERS=
# Both FROM the operator image: its core environment already holds their dependencies.
py_build tether-e2e/fake-provider:e2e tests/e2e/images/fake-provider.Dockerfile core --build-arg BASE=tether-e2e/operator:e2e
py_build tether-e2e/s3:e2e tests/e2e/images/s3.Dockerfile core --build-arg BASE=tether-e2e/operator:e2e
for fw in "${FRAMEWORKS[@]}"; do
  py_build "tether-e2e/runtime-$fw:e2e" runtime/Dockerfile "$fw" --build-arg "ADAPTER=$fw"
  log "build tether-e2e/examples-$fw:e2e"
  docker build -q -t "tether-e2e/examples-$fw:e2e" -f "$REPO/tests/e2e/images/examples.Dockerfile" \
    --build-arg "BASE=tether-e2e/runtime-$fw:e2e" \
    "$(dirname "$(readlink -f "$REPO/examples/$fw/example_tools.py")")" >/dev/null
done
