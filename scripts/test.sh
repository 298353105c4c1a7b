#!/usr/bin/env bash
# The whole test suite, on a fresh machine or a warm one:
#   1. builds (or reuses) kube-apiserver, etcd, kubectl and helm (cached by version, ~10 min cold),
#   2. builds (or reuses) one virtual environment per test group (uv, pinned locks),
#   3. runs the core suite (runtime, fake providers, S3 on loopback, operator on a real apiserver),
#   4. runs each adapter's own tests and the shared conformance suite in that adapter's env.
# Ends with one line "N passed, N failed" over all groups; exits non-zero if anything failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=$(mktemp -d)
export TETHER_CACHE=${TETHER_CACHE:-$HOME/.cache/tether}
export OPENAI_AGENTS_DISABLE_TRACING=1

# The control-plane build runs in the background while the environments are made; the kube
# fixture waits for it (file lock) if the operator tests get there first.
scripts/k8s-tools.sh >"$out/k8s-tools.log" 2>&1 &
k8s_pid=$!

ADAPTERS=(openai langgraph langchain pydantic-ai google-adk)
status=0
for env in core "${ADAPTERS[@]}"; do
  venv=$(scripts/env.sh "$env") || { echo "environment $env failed to build"; status=1; continue; }
  if [ "$env" = core ]; then
    wait "$k8s_pid" || { echo "k8s tools build failed:"; tail -30 "$out/k8s-tools.log"; }
    export TETHER_K8S_BIN=$(tail -n1 "$out/k8s-tools.log")
    echo "== gates: ruff check, ruff format --check"
    { "$venv/bin/ruff" check . && "$venv/bin/ruff" format --check . >/dev/null; } || { echo "lint gate failed"; status=1; }
    echo "== gates: mypy --strict (runtime, operator)"
    "$venv/bin/mypy" || { echo "type gate failed (mypy findings above; config in pyproject.toml [tool.mypy])"; status=1; }
    echo "== core: runtime, fake providers, stores, operator (kube-apiserver from $TETHER_K8S_BIN)"
    # The conformance suite needs an adapter's kit and env: it runs once per adapter below.
    "$venv/bin/python" -m pytest tests -q --ignore=tests/conformance --junitxml="$out/core.xml" || status=1
  else
    echo "== $env: adapter tests + conformance suite"
    TETHER_KIT="adapters/$env/tests/kit.py" "$venv/bin/python" -m pytest "adapters/$env/tests" tests/conformance -q --junitxml="$out/$env.xml" || status=1
  fi
done

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
