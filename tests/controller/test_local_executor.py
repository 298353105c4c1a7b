"""LocalExecutor: exit-code contract, retries on death, suspension/resume, abort, concurrency.

The executor's own contract is driven with a small stand-in process (it exits with the codes a
test scripts); the real runtime (`python -m tether exec`) is exercised by the kube tests.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.support.wait import wait_for_async
from tether.api import AgentRunSpec
from tether.contract import ExecRequest
from tether.secrets import Secrets
from tether_operator import ExecutionState, LocalExecutor, Submission, execution_name

# Exits with the n-th code of $CODES on the n-th attempt ("kill" = SIGKILL itself, "sleep" hangs).
STAND_IN = r"""
import json, os, signal, sys, time
request, store = sys.argv[1], sys.argv[3]
folder = os.path.dirname(request)
n = len([f for f in os.listdir(folder) if f.startswith("seen-")]) + 1
open(os.path.join(folder, f"seen-{n}"), "w").write(json.dumps({
    "secrets": os.environ.get("TETHER_SECRETS"), "env": dict(os.environ),
    "request": json.load(open(request))}))
codes = os.environ["CODES"].split(",")
code = codes[min(n, len(codes)) - 1]
if code == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if code == "sleep":
    time.sleep(60)
sys.exit(int(code))
"""


def _submission(name: str = "t1", retries: int = 2, **kw) -> Submission:
    spec = AgentRunSpec.model_validate({"framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hi"})
    request = ExecRequest(run_id="uid-" + name, namespace="ns", name=name, spec=spec)
    secrets = Secrets(model_key="sk-secret", tools={"crm": {"CRM_TOKEN": "crm-secret"}})
    return Submission(name=name, request=request, secrets=secrets, retries=retries, **kw)


@pytest.fixture
def make(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    # The operator's own environment: none of it may reach the runtime, except the store's keys.
    monkeypatch.setenv("KUBECONFIG", "/should/not/leak")
    monkeypatch.setenv("OPERATOR_DB_PASSWORD", "operator-only-secret")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "store-key")

    def make(codes: str, concurrency: int = 4) -> LocalExecutor:
        monkeypatch.setenv("CODES", codes)
        return LocalExecutor(
            f"file://{tmp_path}/store",
            tmp_path / "work",
            concurrency=concurrency,
            retry_backoff=0.01,
            command=[sys.executable, str(script)],
            passed_env=("CODES",),  # the stand-in's script: named, as the chart's executor.runtimeEnv does
        )

    return make


async def _until_finished(ex: LocalExecutor, name: str, states=None) -> ExecutionState:
    states = states or (ExecutionState.SUCCEEDED, ExecutionState.FAILED, ExecutionState.SUSPENDED)
    for _ in range(400):
        st = await ex.status(name)
        if st and st.state in states:
            return st.state
        await ex.wait(name, 0.05)
    raise AssertionError(f"{name} did not finish: {await ex.status(name)}")


async def test_success_passes_key_only_through_env(make, tmp_path: Path) -> None:
    ex = make("0")
    await ex.submit(_submission())
    assert await _until_finished(ex, "t1") is ExecutionState.SUCCEEDED
    seen = json.loads((tmp_path / "work/t1/seen-1").read_text())
    assert json.loads(seen["secrets"]) == {"model": {"apiKey": "sk-secret"}, "tools": {"crm": {"CRM_TOKEN": "crm-secret"}}}
    env = seen["env"]
    assert "KUBECONFIG" not in env and "KUBERNETES_SERVICE_HOST" not in env
    assert "operator-only-secret" not in json.dumps(env)
    assert "OPENAI_API_KEY" not in env  # the key travels in TETHER_SECRETS only; the runtime places it
    assert env["AWS_SECRET_ACCESS_KEY"] == "store-key" and env["PATH"] == os.environ["PATH"]  # the store's credentials pass
    assert seen["request"]["runId"] == "uid-t1" and seen["request"]["spec"]["framework"] == "openai"
    on_disk = (tmp_path / "work/t1/request.json").read_text()
    assert "sk-secret" not in on_disk
    assert oct((tmp_path / "work/t1/request.json").stat().st_mode & 0o777) == "0o600"


async def test_death_is_retried_and_counted(make) -> None:
    ex = make("kill,1,0")
    await ex.submit(_submission(retries=2))
    assert await _until_finished(ex, "t1") is ExecutionState.SUCCEEDED
    st = await ex.status("t1")
    assert (st.attempts, st.failures) == (3, 2)


async def test_retries_exhausted_and_terminal_not_retried(make) -> None:
    ex = make("kill")
    await ex.submit(_submission(retries=1))
    assert await _until_finished(ex, "t1") is ExecutionState.FAILED
    st = await ex.status("t1")
    assert st.attempts == 2 and "retries exhausted" in st.message and "signal 9" in st.message

    ex = make("2")
    await ex.submit(_submission("t2", retries=5))
    assert await _until_finished(ex, "t2") is ExecutionState.FAILED
    assert (await ex.status("t2")).attempts == 1


async def test_interrupted_and_unknown_exit_codes_are_retried(make) -> None:
    """130 (the runtime stopped by a signal it was not sent by the run) and a code outside the
    contract are recoverable (contract.attempt_end): counted, and the next attempt runs."""
    ex = make("130,5,0")
    await ex.submit(_submission(retries=2))
    assert await _until_finished(ex, "t1") is ExecutionState.SUCCEEDED
    st = await ex.status("t1")
    assert (st.attempts, st.failures) == (3, 2)


async def test_store_unreachable_is_not_counted_against_retries_and_is_bounded(make) -> None:
    """Exit code 4 (the store did not answer for longer than the attempt waited) starts the next
    attempt without counting it against `retries`; past STORE_OUTAGE_ATTEMPTS such attempts the
    run fails, reason StoreUnreachable, saying why (a dead store never loops for ever)."""
    from tether_operator.executors.base import STORE_OUTAGE_ATTEMPTS

    ex = make("4,4,0")
    await ex.submit(_submission(retries=0))
    assert await _until_finished(ex, "t1") is ExecutionState.SUCCEEDED
    st = await ex.status("t1")
    assert (st.attempts, st.failures, st.retried) == (3, 0, (4, 4))

    ex = make("4")
    await ex.submit(_submission("t2", retries=5))
    assert await _until_finished(ex, "t2") is ExecutionState.FAILED
    st = await ex.status("t2")
    assert (st.attempts, st.failures, st.reason) == (STORE_OUTAGE_ATTEMPTS + 1, 0, "StoreUnreachable")
    assert "the store did not answer in" in st.message and "TETHER_STORE_OUTAGE_SECONDS" in st.message


async def test_suspend_then_resume_is_not_a_failure(make) -> None:
    ex = make("3,0")
    await ex.submit(_submission(retries=0))
    assert await _until_finished(ex, "t1") is ExecutionState.SUSPENDED
    await ex.resume("t1")
    assert await _until_finished(ex, "t1", (ExecutionState.SUCCEEDED,)) is ExecutionState.SUCCEEDED
    st = await ex.status("t1")
    assert (st.attempts, st.failures) == (2, 0)


async def test_submit_is_idempotent_and_adopts(make) -> None:
    ex = make("sleep")
    first = await ex.submit(_submission())
    again = await ex.submit(_submission())
    assert first.name == again.name and (await ex.status("t1")).attempts <= 1
    await ex.abort("t1")
    assert await ex.status("t1") is None
    # After an operator restart a run last seen suspended is adopted without a process.
    adopted = await ex.submit(_submission("t3", attempts=4, suspended=True))
    assert adopted.state is ExecutionState.SUSPENDED and adopted.attempts == 4


async def test_abort_kills_the_process(make, tmp_path: Path) -> None:
    ex = make("sleep")
    await ex.submit(_submission())
    await _until_finished(ex, "t1", (ExecutionState.RUNNING,))
    await wait_for_async(lambda: (tmp_path / "work/t1/pid").exists(), timeout=10, what="the attempt's pid file")
    pid = int((tmp_path / "work/t1/pid").read_text())
    await ex.abort("t1")
    await wait_for_async(lambda: not _alive(pid), timeout=10, what=f"process {pid} to be gone")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_concurrency_limit_queues(make, tmp_path: Path) -> None:
    ex = make("sleep", concurrency=1)
    await ex.submit(_submission("a"))
    await ex.submit(_submission("b"))
    await _until_finished(ex, "a", (ExecutionState.RUNNING,))
    # a's process is up and holds the only slot; b has had its chance to start and must not have.
    await wait_for_async(lambda: (tmp_path / "work/a/pid").exists(), timeout=10, what="a's pid file")
    assert (await ex.status("b")).state is ExecutionState.QUEUED
    assert not (tmp_path / "work/b/pid").exists()
    await ex.close()


async def test_timeout_is_a_recoverable_failure(make) -> None:
    ex = make("sleep")
    await ex.submit(_submission(retries=0, timeout_seconds=0.3))
    assert await _until_finished(ex, "t1") is ExecutionState.FAILED
    assert "timed out" in (await ex.status("t1")).message


def test_execution_name_is_deterministic() -> None:
    a = execution_name("0b5e3c1e-8a4e-4c55-9b8f-0a1b2c3d4e5f")
    assert a == execution_name("0b5e3c1e-8a4e-4c55-9b8f-0a1b2c3d4e5f")
    assert a != execution_name("another") and len(a) == 20 and a[0].isalpha() and a.islower()


async def test_tool_probe_imports_where_the_runtime_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "probe_shop.py").write_text("def lookup():\n    return 1\n")
    (mods / "probe_broken.py").write_text("raise RuntimeError('broken at import')\n")
    monkeypatch.setenv("PYTHONPATH", str(mods))
    monkeypatch.setenv("TETHER_TOOL_MODULES", "probe_shop,probe_broken,probe_missing")
    ex = LocalExecutor(f"file://{tmp_path}/store", tmp_path / "work")
    assert await ex.probe_tool("probe_shop:lookup") is None
    assert "probe_shop" not in sys.modules  # imported in a child process, never in the operator
    assert "is in the Python standard library" in (await ex.probe_tool("subprocess:getoutput") or "")
    assert "not an allowed tool module" in (await ex.probe_tool("elsewhere:f") or "")
    assert "RuntimeError: broken at import" in (await ex.probe_tool("probe_broken:f") or "")
    assert "cannot import probe_missing:f: ModuleNotFoundError" in (await ex.probe_tool("probe_missing:f") or "")
    assert "has no attribute" in (await ex.probe_tool("probe_shop:nope") or "")
