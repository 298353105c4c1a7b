#!/usr/bin/env bash
# End-to-end smoke test on a throw-away kind cluster. Needs Docker, kind,
# kubectl, helm (and python3); it cannot run on machines without Docker.
#
#   OPENAI_API_KEY=... tests/e2e/kind-smoke.sh
#
# Steps: create cluster -> build+load the image -> helm install charts/tether
# -> apply examples/openai/weather.yaml -> kill the runtime pod mid-run ->
# wait for completion -> assert the status reports replayed steps.
# Knobs (env): CLUSTER, NS, IMAGE, DOCKERFILE, SKIP_BUILD=1, RELEASE, EXAMPLE,
#              TIMEOUT, KEEP=1 (keep the cluster),
#              HELM_ARGS (extra args for helm install), and the status/label
#              contract checked: PHASE_FIELD, STEPS_FIELD, REPLAYED_FIELD,
#              POD_SELECTOR (default tether.dev/run=<object name>).
set -euo pipefail
cd "$(dirname "$0")/../.."

CLUSTER=${CLUSTER:-tether-e2e}
NS=${NS:-tether-e2e}
IMAGE=${IMAGE:-tether:e2e}
RELEASE=${RELEASE:-tether}
EXAMPLE=${EXAMPLE:-examples/openai/weather.yaml}
TIMEOUT=${TIMEOUT:-300}
PHASE_FIELD=${PHASE_FIELD:-phase}
STEPS_FIELD=${STEPS_FIELD:-completedSteps}
REPLAYED_FIELD=${REPLAYED_FIELD:-replayedSteps}
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
[[ "${SKIP_BUILD:-0}" == 1 ]] || docker build -t "$IMAGE" -f "${DOCKERFILE:-Dockerfile}" .
kind load docker-image "$IMAGE" --name "$CLUSTER"

k create namespace "$NS" --dry-run=client -o yaml | k apply -f -
k -n "$NS" create secret generic openai --from-literal=OPENAI_API_KEY="$OPENAI_API_KEY" \
  --dry-run=client -o yaml | k apply -f -
helm --kube-context "$KCTX" upgrade --install "$RELEASE" charts/tether -n "$NS" --wait \
  --timeout "${TIMEOUT}s" --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" \
  --set image.pullPolicy=IfNotPresent ${HELM_ARGS:-}

k apply -n "$NS" -f "$EXAMPLE"
# The example's object (kind/name) from the manifest itself, e.g. agentrun/weather.
OBJ=$(k get -n "$NS" -f "$EXAMPLE" -o name | head -n1)
log "started $OBJ"

# Wait until it has completed at least one step, then kill its runtime pod.
status() { k get -n "$NS" "$OBJ" -o jsonpath='{.status}'; }
field() {  # top-level field of .status, '' when absent
  status | python3 -c 'import json,sys; d=sys.stdin.read().strip(); print((json.loads(d) if d else {}).get(sys.argv[1], ""))' "$1"
}
deadline=$((SECONDS + TIMEOUT))
until [[ "$(field "$STEPS_FIELD")" =~ ^[1-9] ]]; do
  (( SECONDS < deadline )) || { log "no step completed in ${TIMEOUT}s: $(status)"; exit 1; }
  sleep 2
done
POD_SELECTOR=${POD_SELECTOR:-tether.dev/run=${OBJ#*/}}
POD=$(k get pods -n "$NS" -l "$POD_SELECTOR" -o name | head -n1)
[[ -n "$POD" ]] || { log "no runtime pod matches $POD_SELECTOR"; exit 1; }
log "killing $POD mid-run"
k delete -n "$NS" "$POD" --grace-period=0 --force --wait=false

# Wait for the run to finish, then require that the status reports replayed steps.
until [[ "$(field "$PHASE_FIELD")" =~ ^(Succeeded|Failed)$ ]]; do
  (( SECONDS < deadline + TIMEOUT )) || { log "run did not finish: $(status)"; exit 1; }
  sleep 2
done
log "final status: $(status)"
[[ "$(field "$PHASE_FIELD")" == Succeeded ]] || { log "run did not succeed"; exit 1; }
replayed=$(field "$REPLAYED_FIELD")
[[ "$replayed" =~ ^[1-9] ]] || { log "expected status.$REPLAYED_FIELD > 0, got '${replayed}'"; exit 1; }
log "OK: $OBJ succeeded after a pod kill, replayedSteps=$replayed"
