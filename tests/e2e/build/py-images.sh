#!/usr/bin/env bash
# Tether's images for the e2e, FROM a local Python base image:
#   tether-e2e/examples-<framework>:e2e  `tether image build --framework <framework> --tools-from
#                                        examples/<framework>` (docs/images.md): the runtime image
#                                        a user builds, with the examples' tool module
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
# The runtime images as docs/images.md builds them, with the wheels downloaded on the host.
python="$("$REPO/scripts/env.sh" core | tail -n1)/bin/python"
for fw in "${FRAMEWORKS[@]}"; do
  log "build tether-e2e/examples-$fw:e2e"
  "$python" -m tether image build --framework "$fw" --tools-from "$REPO/examples/$fw" --checkout "$REPO" \
    --base-image "$PYTHON_BASE" --wheels "$("$HERE/wheels.sh" "$fw")" --tag "tether-e2e/examples-$fw:e2e" --quiet >/dev/null
done
