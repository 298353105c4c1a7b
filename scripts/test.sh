#!/usr/bin/env bash
# The whole test suite, on a fresh machine or a warm one. Prints, as each phase ends, its name,
# its duration and its log file:
#   k8s-tools  kube-apiserver, etcd, kubectl and helm, built or reused (cached by version; ~10-25
#              min cold), in the background from the start;
#   health-tools  tether-health (tests/support/health: Argo CD's Lua engine and Flux's kstatus), built
#              or reused (cached by its source; 45 s of CPU cold), in the background from the start;
#   oci-registry  the OCI registry the chart's `helm push` test uses (scripts/oci-registry.sh:
#              go-containerregistry's, cached by version; a minute cold), in the background from the start;
#   otel-collector  the OpenTelemetry Collector the telemetry tests export to (scripts/otel-collector.sh:
#              an OTLP receiver and a file exporter, cached by version; a few minutes cold), in the
#              background from the start;
#   gates      ruff check, ruff format --check and mypy --strict (in the core environment: the
#              runtime, the operator and tether.testing);
#   core       runtime, fake providers, stores (tests/core): the run view in headless Chromium
#              (Debian's chromium, installed when missing), traces into the collector (waits for
#              otel-collector), MCP against the TypeScript reference server from npm
#              (scripts/mcp-everything.sh, cached); it needs no control plane, so on a cold machine
#              it runs while k8s-tools builds;
#   controller the operator on a real apiserver (tests/controller; waits for k8s-tools,
#              health-tools and oci-registry): its metrics scraped by Debian's Prometheus (installed when missing);
#   <adapter>  for each folder under adapters/: mypy --strict on the adapter's package (in its own
#              environment, against the framework's real types; langgraph's adds benchmarks/) and
#              mypy on its tests, its own tests and the shared conformance suite;
#   flyte      the Flyte executor against a real Flyte 2 backend (tests/flyte), built (from the start,
#              in the background, like k8s-tools) by
#              scripts/flyte-backend.sh from the pinned source tarballs in ../shared/sources beside
#              the checkout (or clones of the same commits; ~17-30 min cold, then cached) with
#              Debian's PostgreSQL (installed when missing, as root with apt-get). Only where
#              neither the tarballs nor clones exist (flyteorg/flyte main is not on the Go module
#              proxy) it prints NOT RUN and why; that is not a pass, and it does not fail the run.
#   e2e        the kind e2e (tests/e2e/run.sh), only when its caches are warm and Docker can run.
# Each group first builds (or reuses) its virtual environment (scripts/env.sh), then runs; up to
# $TETHER_TEST_JOBS groups (default: cores + 1) run at once, each with its own log, so an adapter
# adds its group's time to the pool rather than a turn in a queue. A failed phase prints the tail
# of its log. Ends with one line "total: N passed, N failed, N skipped" over all groups and exits
# non-zero if anything failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=$(mktemp -d "${TMPDIR:-/tmp}/tether-test.XXXXXX")
export TETHER_CACHE=${TETHER_CACHE:-$HOME/.cache/tether}
export OPENAI_AGENTS_DISABLE_TRACING=1
# One group per adapter: the folders under adapters/ are the list of frameworks (nothing else lists them).
ADAPTERS=()
for project in adapters/*/pyproject.toml; do ADAPTERS+=("$(basename "$(dirname "$project")")"); done
jobs=${TETHER_TEST_JOBS:-$(($(nproc) + 1))}
began=$SECONDS
echo "logs: $out  (groups at once: $jobs)"

# One phase: runs "$@" with output to $out/NAME.log, then reports (from the background).
phase() {
  local name=$1 start=$SECONDS rc
  shift
  "$@" >"$out/$name.log" 2>&1
  rc=$?
  echo "$rc" >"$out/$name.rc"
  if [ "$rc" = 0 ]; then
    printf '== %-12s ok      %4d s  %s\n' "$name" $((SECONDS - start)) "$out/$name.log"
  elif [ "$name" = flyte ] && [ "$rc" = 3 ]; then
    printf '== %-12s NOT RUN %4d s  %s\n' "$name" $((SECONDS - start)) "$(tail -n 3 "$out/$name.log" | tr '\n' ' ')"
    rc=0
  else
    printf '== %-12s FAILED  %4d s  %s (exit %s); its tail:\n' "$name" $((SECONDS - start)) "$out/$name.log" "$rc"
    tail -n 40 "$out/$name.log" | sed 's/^/   | /'
  fi
  return "$rc"
}

# The control-plane build runs from the start; the controller group waits for it (k8s-tools.sh holds a
# file lock, so a second call waits for the first and then reuses its result).
phase k8s-tools scripts/k8s-tools.sh &
k8s_pid=$!
# The Flyte backend's build too (its lock makes the flyte group wait for it, then reuse it): on a
# cold machine the two builds overlap the environments and the core group instead of following
# them. Its outcome is the flyte group's to report (exit 3: no sources here, NOT RUN).
scripts/flyte-backend.sh >"$out/flyte-backend.log" 2>&1 &
flyte_build_pid=$!
# The OCI registry of the chart's push/pull test (its lock makes the controller group wait for it).
scripts/oci-registry.sh >"$out/oci-registry.log" 2>&1 &
oci_pid=$!
# The Argo CD/Flux health judge the controller group's GitOps tests use (its lock makes the controller group wait for it).
scripts/health-tools.sh >"$out/health-tools.log" 2>&1 &
health_build_pid=$!

# Headless Chromium and its WebDriver for the run view's browser tests (tests/core/test_ui.py):
# Debian's chromium and chromium-driver, installed when missing (as root, with apt-get); otherwise
# the core group fails saying what to install.
browser_bins() {
  have_browser() { command -v chromium >/dev/null && { command -v chromedriver >/dev/null || [ -x /usr/lib/chromium/chromedriver ]; }; }
  have_browser && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Chromium (Debian's chromium and chromium-driver packages)"
    export DEBIAN_FRONTEND=noninteractive
    # A lock timeout: the flyte group may be installing PostgreSQL at the same moment.
    apt-get install -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends chromium chromium-driver >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null && apt-get install -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends chromium chromium-driver >/dev/null; }
  fi
  have_browser || { echo "no headless Chromium: apt-get install chromium chromium-driver (as root)"; return 2; }
}

# The OpenTelemetry Collector the telemetry tests export to (scripts/otel-collector.sh, cached
# like k8s-tools; a few minutes cold): the core group waits for it on its lock.
phase otel-collector scripts/otel-collector.sh &
otel_pid=$!

# Prometheus, which tests/controller/test_metrics.py runs as a throwaway server scraping the
# operator: Debian's package (2.42), installed when missing (as root, with apt-get; the package's
# service is not used); otherwise the group fails saying what to install.
prometheus_bin() {
  command -v prometheus >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Prometheus (Debian's prometheus package)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends prometheus >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null && apt-get install -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends prometheus >/dev/null; }
  fi
  command -v prometheus >/dev/null || { echo "no prometheus binary: apt-get install prometheus (as root)"; return 2; }
}

core() {
  local venv
  browser_bins || return
  venv=$(scripts/env.sh core) || return 2
  echo "environment: $venv ($((SECONDS - began)) s into the run)"
  TETHER_OTEL_BIN=$(scripts/otel-collector.sh 2>/dev/null | tail -n1) || { echo "collector build failed (see otel-collector.log)"; return 2; }
  export TETHER_OTEL_BIN
  # The TypeScript reference MCP server from npm (tests/core/test_mcp_everything.py; cached by version).
  TETHER_MCP_EVERYTHING=$(scripts/mcp-everything.sh | tail -n1) || { echo "installing @modelcontextprotocol/server-everything failed"; return 2; }
  export TETHER_MCP_EVERYTHING
  # tests/conformance needs an adapter's kit and env: it runs once per adapter group.
  "$venv/bin/python" -m pytest tests/core -q --durations=15 --junitxml="$out/core.xml"
}

controller() {
  local venv
  prometheus_bin || return
  venv=$(scripts/env.sh core) || return 2
  echo "environment: $venv ($((SECONDS - began)) s into the run)"
  TETHER_K8S_BIN=$(scripts/k8s-tools.sh 2>/dev/null | tail -n1) || { echo "k8s tools build failed (see k8s-tools.log)"; return 2; }
  export TETHER_K8S_BIN
  echo "kube-apiserver and etcd from $TETHER_K8S_BIN ($((SECONDS - began)) s into the run)"
  TETHER_HEALTH_BIN=$(scripts/health-tools.sh 2>/dev/null | tail -n1) || { echo "health tools build failed (see health-tools.log)"; return 2; }
  export TETHER_HEALTH_BIN
  TETHER_OCI_REGISTRY_BIN=$(scripts/oci-registry.sh 2>/dev/null | tail -n1) || { echo "OCI registry build failed (see oci-registry.log)"; return 2; }
  export TETHER_OCI_REGISTRY_BIN
  "$venv/bin/python" -m pytest tests/controller tests/test_kube_control_plane.py -q --durations=15 --junitxml="$out/controller.xml"
}

adapter() {
  local venv
  venv=$(scripts/env.sh "$1") || return 2
  echo "environment: $venv ($((SECONDS - began)) s into the run)"
  # mypy (config in pyproject.toml) on the adapter against its framework's real types; the
  # benchmarks run on LangGraph, so its group checks them too.
  local check=("adapters/$1/src")
  [ "$1" = langgraph ] && check+=(benchmarks)
  # Each environment's mypy keeps its cache beside it: groups run at once, with different mypy
  # versions, and one version's cache in the shared .mypy_cache crashed another (INTERNAL ERROR).
  export MYPY_CACHE_DIR="$venv/.mypy_cache"
  MYPYPATH="adapters/$1/src" "$venv/bin/mypy" "${check[@]}" || return
  # Then its tests, as pytest imports them (top-level modules from adapters/<id>/tests), with the
  # relaxations pyproject.toml gives tests.*: annotations optional, real type errors not.
  MYPYPATH="adapters/$1/src:adapters/$1/tests" "$venv/bin/mypy" --allow-untyped-defs --allow-incomplete-defs \
    --allow-untyped-calls --allow-any-generics "adapters/$1/tests" || return
  TETHER_KIT="adapters/$1/tests/kit.py" "$venv/bin/python" -m pytest "adapters/$1/tests" tests/conformance -q --durations=15 \
    --junitxml="$out/$1.xml" || return
  # An adapter with a second way in (Mistral: chat completions beside conversations) has a second kit.
  for kit in "adapters/$1/tests"/kit_*.py; do
    [ -f "$kit" ] || continue
    TETHER_KIT="$kit" "$venv/bin/python" -m pytest tests/conformance -q --junitxml="$out/$1-$(basename "$kit" .py).xml" || return
  done
}

# PostgreSQL's server binaries, which tests/support/flyte_backend.py runs as a throwaway cluster:
# Debian's package, installed when missing (as root, with apt-get); otherwise the group fails
# saying what to install.
postgres_bins() {
  have() { compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null; }
  have && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing PostgreSQL (Debian's postgresql package)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends postgresql >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends postgresql >/dev/null; }
  fi
  have || { echo "no PostgreSQL server binaries: apt-get install postgresql (as root)"; return 2; }
}

# Exit 3: the Flyte backend has no source here; the phase prints NOT RUN with the reason.
flyte_group() {
  local venv bin rc
  bin=$(scripts/flyte-backend.sh) || { rc=$?; [ "$rc" = 3 ] && echo "NOT RUN: no Flyte backend source on this machine (see scripts/flyte-backend.sh)"; return "$rc"; }
  postgres_bins || return
  TETHER_FLYTE_BIN=$(echo "$bin" | tail -n1) && export TETHER_FLYTE_BIN
  venv=$(scripts/env.sh core) || return 2
  TETHER_K8S_BIN=$(scripts/k8s-tools.sh 2>/dev/null | tail -n1) || { echo "k8s tools build failed (see k8s-tools.log)"; return 2; }
  export TETHER_K8S_BIN
  "$venv/bin/python" -m pytest tests/flyte -q --durations=15 --junitxml="$out/flyte.xml"
}

gates() {
  local venv
  venv=$(scripts/env.sh core) || return 2
  export MYPY_CACHE_DIR="$venv/.mypy_cache"  # as the adapters' groups (adapter())
  "$venv/bin/ruff" check . && "$venv/bin/ruff" format --check . && "$venv/bin/mypy"  # mypy: config in pyproject.toml
}

phase gates gates &
side=("$k8s_pid" "$flyte_build_pid" "$health_build_pid" "$oci_pid" "$otel_pid" "$!")  # not counted against the pool: builds, and gates take a minute
# The controller group first: it is the longest and waits for the control plane; core beside it.
for group in controller core "${ADAPTERS[@]}" flyte; do
  while [ "$(jobs -rp | grep -vxFc -f <(printf '%s\n' "${side[@]}"))" -ge "$jobs" ]; do wait -n; done
  case "$group" in
    core | controller) phase "$group" "$group" & ;;
    flyte) phase flyte flyte_group & ;;
    *) phase "$group" adapter "$group" & ;;
  esac
done
wait
# The kind e2e (tests/e2e/run.sh): only where its caches are warm and a Docker daemon can start;
# says which. Run after the groups (it takes both cores); a failure fails the suite.
e2e_groups=()
# TETHER_E2E=0 leaves it out (it says so), e.g. to check the rest while a cluster is busy.
if [ "${TETHER_E2E:-}" = 0 ]; then
  echo "== e2e: not run: TETHER_E2E=0 (run it alone with tests/e2e/run.sh)"
elif ready=$(tests/e2e/run.sh ready 2>/dev/null); then
  echo "== e2e: $ready"
  e2e() { tests/e2e/run.sh all -q --junitxml="$out/e2e.xml"; local rc=$?; tests/e2e/run.sh down; return $rc; }
  phase e2e e2e || true
  e2e_groups=(e2e)
else
  echo "== e2e: not run: ${ready:-tests/e2e/run.sh ready failed}"
fi
status=0
for group in k8s-tools otel-collector gates controller core "${ADAPTERS[@]}" flyte "${e2e_groups[@]}"; do
  rc=$(cat "$out/$group.rc" 2>/dev/null)
  [ "$rc" = 0 ] || { [ "$group" = flyte ] && [ "$rc" = 3 ]; } || status=1
done
echo "== all groups: $((SECONDS - began)) s"

python3 - "$out" <<'PY'
import sys, glob, xml.etree.ElementTree as ET
passed = failed = skipped = 0
for path in sorted(glob.glob(f"{sys.argv[1]}/*.xml")):
    for suite in ET.parse(path).getroot().iter("testsuite"):
        t, f, e, s = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        passed += t - f - e - s; failed += f + e; skipped += s
print(f"total: {passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
