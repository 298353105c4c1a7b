#!/usr/bin/env bash
# End-to-end smoke test on a throw-away kind cluster. Needs Docker, kind,
# kubectl, helm (and python3); it cannot run on machines without Docker.
#
#   OPENAI_API_KEY=... tests/e2e/kind-smoke.sh
#
# Steps: create cluster -> build+load the operator image -> helm install charts/tether
# -> apply examples/openai/research.yaml (slow tools) -> once a step is done, kill the
# runtime process (the local executor runs it inside the operator pod) -> wait for
# completion -> assert status.steps.modelReplayed > 0 (the retry replayed, not re-billed).
# Knobs (env): CLUSTER, NS, IMAGE, DOCKERFILE, SKIP_BUILD=1, RELEASE, EXAMPLE,
#              TIMEOUT, KEEP=1 (keep the cluster), HELM_ARGS (extra args for helm install).
set -euo pipefail
cd "$(dirname "$0")/../.."

CLUSTER=${CLUSTER:-tether-e2e}
NS=${NS:-tether-e2e}
IMAGE=${IMAGE:-tether:e2e}
RELEASE=${RELEASE:-tether}
EXAMPLE=${EXAMPLE:-examples/openai/research.yaml}
TIMEOUT=${TIMEOUT:-300}
KCTX="kind-$CLUSTER"
k() { kubectl --context "$KCTX" "$@"; }
log() { echo "[kind-smoke] $*" >&2; }
: "${OPENAI_API_KEY:?set OPENAI_API_KEY (the weather example calls the model)}"
for t in docker kind kubectl helm python3; do
  command -v "$t" >/dev/null || { log "missing $t"; exit 2; }
done

cleanup() {
  local rc=$?
  if (( rc != 0 )); then
    log "FAILED (exit $rc); state for debugging:"
    k get all,events -n "$NS" 2>/dev/null | tail -n 60 || true
    k logs -n "$NS" -l app.kubernetes.io/name=tether --tail=100 --all-containers 2>/dev/null || true
  fi
  [[ "${KEEP:-0}" == 1 ]] || kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
}
trap cleanup EXIT

kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER" --wait 120s
[[ "${SKIP_BUILD:-0}" == 1 ]] || docker build -t "$IMAGE" -f "${DOCKERFILE:-operator/Dockerfile}" .
kind load docker-image "$IMAGE" --name "$CLUSTER"

k create namespace "$NS" --dry-run=client -o yaml | k apply -f -
k -n "$NS" create secret generic openai --from-literal=api-key="$OPENAI_API_KEY" \
  --dry-run=client -o yaml | k apply -f -
k -n "$NS" label secret openai tether.dev/usable=true --overwrite  # the operator reads only labelled Secrets
helm --kube-context "$KCTX" upgrade --install "$RELEASE" charts/tether -n "$NS" --wait \
  --timeout "${TIMEOUT}s" --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" \
  --set image.pullPolicy=IfNotPresent ${HELM_ARGS:-}

k apply -n "$NS" -f "$EXAMPLE"
# The example's object (kind/name) from the manifest itself, e.g. agentrun/weather.
OBJ=$(k get -n "$NS" -f "$EXAMPLE" -o name | head -n1)
log "started $OBJ"

# Wait until it has completed at least one step, then kill its runtime process.
status() { k get -n "$NS" "$OBJ" -o jsonpath='{.status}'; }
field() {  # a dotted path under .status, '' when absent (e.g. steps.modelLive)
  status | python3 -c 'import json,sys
d=sys.stdin.read().strip(); v=json.loads(d) if d else {}
for part in sys.argv[1].split("."): v=(v or {}).get(part, "") if isinstance(v, dict) else ""
print(v)' "$1"
}
deadline=$((SECONDS + TIMEOUT))
until [[ "$(field steps.modelLive)" =~ ^[1-9] ]]; do
  (( SECONDS < deadline )) || { log "no step completed in ${TIMEOUT}s: $(status)"; exit 1; }
  sleep 2
done
log "killing the runtime process of $OBJ mid-run"
# python:3.11-slim has no pkill: find the process by its command line.
k exec -n "$NS" "deploy/$RELEASE" -- python -c 'import os
for p in filter(str.isdigit, os.listdir("/proc")):
    if b"tether\0exec" in open(f"/proc/{p}/cmdline", "rb").read(): os.kill(int(p), 9)'

# Wait for the run to finish, then require that the status reports replayed steps.
until [[ "$(field phase)" =~ ^(Succeeded|Failed)$ ]]; do
  (( SECONDS < deadline + TIMEOUT )) || { log "run did not finish: $(status)"; exit 1; }
  sleep 2
done
log "final status: $(status)"
[[ "$(field phase)" == Succeeded ]] || { log "run did not succeed"; exit 1; }
replayed=$(field steps.modelReplayed)
[[ "$replayed" =~ ^[1-9] ]] || { log "expected status.steps.modelReplayed > 0, got '${replayed}'"; exit 1; }
log "OK: $OBJ succeeded after its runtime was killed; modelReplayed=$replayed"
