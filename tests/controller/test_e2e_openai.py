"""End to end on the real apiserver: AgentRuns of the OpenAI Agents SDK example agents, run by the
operator's local executor through the real runtime (`python -m tether exec`, Flyte local mode)
against Tether's fake OpenAI provider.

    apply -> kubectl wait --for=condition=Succeeded; status holds result, steps and usage
    runtime killed mid-run -> the retry replays; the provider saw no completed turn twice
    approvals: approve with `tether approve NS/NAME` (an AgentApproval), decline through the store,
    timeout -> default action
    a diverged run keeps updating status; unreadable progress -> condition + Event; a failed
    start shows its cause
    operator killed mid-run and restarted -> one execution, the run completes
    deleting a running AgentRun kills its process (finalizer)

The operator here serves op-b only (the session operator serves op-a) and runs agents with the
`openai` test environment's interpreter (scripts/env.sh openai).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube import ControlPlane
from tether.journal import Journal, Record, read_records
from tether.stores import LocalStore, Store, open_store
from tether.testing.fake_provider import FakeProvider
from tether_operator import execution_name

from .conftest import REPO, SERVED, Operator, Release, condition, get, wait_for

pytestmark = pytest.mark.kube

NS = SERVED[1]
EXAMPLES = REPO / "examples" / "openai"


def _agent_python() -> str:
    try:
        import agents  # noqa: F401

        import tether_openai  # noqa: F401

        return sys.executable
    except ImportError:
        venv = (
            subprocess.run([str(REPO / "scripts" / "env.sh"), "openai"], check=True, capture_output=True, text=True)
            .stdout.strip()
            .splitlines()[-1]
        )
        return f"{venv}/bin/python"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeProvider]:
    # One provider for the three examples: each script's conversation, matched on its input.
    conversations = []
    for name, match in (("weather", "weather in Paris"), ("research", "durable execution"), ("refund", "refund it")):
        for conversation in yaml.safe_load((EXAMPLES / f"{name}.script.yaml").read_text())["conversations"]:
            conversations.append({**conversation, "match": match})
    with FakeProvider({"conversations": conversations}, latency=0.2) as provider:
        yield provider


@pytest.fixture(scope="module")
def agent_operator(kube: ControlPlane, tether_release: Release, operator_kubeconfig: Path, tmp_path_factory) -> Iterator[Operator]:
    # check=False: test_approval_identity.py runs this operator too (one module after the other)
    kube.kubectl("create", "secret", "generic", "openai", "-n", NS, "--from-literal=api-key=fake-key-e2e-0123456789", check=False)
    kube.kubectl("label", "secret", "openai", "-n", NS, "tether.dev/usable=true", "--overwrite")
    op = Operator(
        operator_kubeconfig,
        tmp_path_factory.mktemp("agent-operator"),
        (NS,),
        TETHER_EXEC_PYTHON=_agent_python(),
        PYTHONPATH=str(EXAMPLES),  # the AgentTools' implementations (example_tools:...)
        TETHER_TOOL_MODULES="example_tools",  # chart value tools.allowedModules
        OPENAI_AGENTS_DISABLE_TRACING="1",
        TETHER_CONCURRENCY="4",
        TETHER_ALLOW_AUTO_APPROVE="1",  # chart value approvals.allowAutoApprove: the timeout test approves
        TETHER_EXECUTOR="local",
    )
    op.start()
    yield op
    op.stop()


def apply_example(kube: ControlPlane, fake: FakeProvider, example: str, name: str | None = None, **spec: Any) -> str:
    """Apply examples/openai/<example>.yaml pointed at the fake provider; returns the run name."""
    docs = list(yaml.safe_load_all((EXAMPLES / f"{example}.yaml").read_text()))
    run = next(d for d in docs if d["kind"] == "AgentRun")
    run["metadata"]["name"] = name or run["metadata"]["name"]
    run["spec"]["model"]["baseURL"] = fake.base_url("openai")
    run["spec"].update(spec)
    kube.kubectl("apply", "-n", NS, "-f", "-", input="\n---\n".join(json.dumps(d) for d in docs))
    return run["metadata"]["name"]


def wait_condition(kube: ControlPlane, name: str, cond: str, timeout: int = 180) -> dict[str, Any]:
    proc = kube.kubectl(
        "wait", "-n", NS, f"--for=condition={cond}", f"--timeout={timeout}s", f"agentrun/{name}", check=False, timeout=timeout + 10
    )
    obj = get(kube, "agentrun", NS, name)
    assert proc.returncode == 0, f"{name} never {cond}: {json.dumps(obj.get('status'), indent=1)}"
    return obj


def attempt_pid(op: Operator, obj: dict[str, Any]) -> int:
    folder = op.workdir / "executions" / execution_name(obj["metadata"]["uid"])
    return int(wait_for(lambda: (folder / "pid").exists() and (folder / "pid").read_text(), what="pid"))


def run_store(op: Operator) -> Store:
    """The store of this namespace's runs: the operator's store under the namespace prefix."""
    return open_store(f"{op.store_url}/{NS}")


def journaled_turns(op: Operator, obj: dict[str, Any]) -> int:
    """Model turns recorded in the run's journal (the operator's store). Read, not loaded:
    loading a journal claims an attempt."""
    return sum(1 for record in read_records(run_store(op), obj["metadata"]["uid"]) if record.kind == "model")


def live_bodies(fake: FakeProvider, since: int = 0) -> list[str]:
    return [e.body_sha256 for e in fake.ledger.snapshot()[since:] if e.live]


def test_apply_wait_succeeded_status_and_columns(kube: ControlPlane, fake: FakeProvider, agent_operator: Operator) -> None:
    name = apply_example(kube, fake, "weather")
    obj = wait_condition(kube, name, "Succeeded")
    st = obj["status"]
    assert st["phase"] == "Succeeded" and st["observedGeneration"] == 1
    assert condition(obj, "Ready")["status"] == "True"
    assert condition(obj, "Reconciling")["status"] == "False"
    assert condition(obj, "Stalled")["status"] == "False"
    assert st["result"]["output"] and st["result"]["ref"].endswith("/progress.json")
    assert st["steps"]["modelLive"] >= 2 and st["steps"]["modelReplayed"] == 0
    assert st["steps"]["toolLive"] >= 1
    assert st["usage"]["inputTokens"] > 0 and st["usage"]["outputTokens"] > 0
    assert st["attempts"] == 1 and st["startTime"] and st["completionTime"]
    assert st["execution"] == {"executor": "local", "name": execution_name(obj["metadata"]["uid"])}
    row = kube.kubectl("get", "agentruns", name, "-n", NS).stdout.splitlines()
    assert row[0].split()[:6] == ["NAME", "PHASE", "FRAMEWORK", "MODEL", "TURNS", "COST"]
    assert row[1].split()[:5] == [name, "Succeeded", "openai", "gpt-4o-mini", f"{st['steps']['modelLive']}/0"]
    reasons = {
        e["reason"]
        for e in json.loads(
            kube.kubectl("get", "events", "-n", NS, "--field-selector", f"involvedObject.name={name}", "-o", "json").stdout
        )["items"]
    }
    assert {"Accepted", "Submitted", "Running", "Succeeded"} <= reasons
    # the API key went to the runtime's environment only
    dump = kube.kubectl("get", "agentrun", name, "-n", NS, "-o", "yaml").stdout + agent_operator.logs()
    dump += "".join(p.read_text(errors="replace") for p in (agent_operator.workdir / "executions").rglob("*") if p.is_file())
    assert "fake-key-e2e-0123456789" not in dump


def test_runtime_killed_mid_run_replays(kube: ControlPlane, fake: FakeProvider, agent_operator: Operator) -> None:
    start = len(fake.ledger)
    name = apply_example(kube, fake, "research", name="research-kill")
    obj = wait_for(lambda: (o := get(kube, "agentrun", NS, name))["status"].get("execution") and o, timeout=60, what="submitted")
    # Two model turns answered: the second asked for read-source, which takes 1.5 s.
    wait_for(lambda: len(live_bodies(fake, start)) >= 2, timeout=120, what="two live turns")
    wait_for(lambda: journaled_turns(agent_operator, obj) >= 2, timeout=30, what="the second turn journaled")
    before = live_bodies(fake, start)
    pid = attempt_pid(agent_operator, obj)
    os.killpg(pid, signal.SIGKILL)

    obj = wait_condition(kube, name, "Succeeded")
    st = obj["status"]
    assert st["attempts"] == 2
    assert st["steps"]["modelReplayed"] >= 2, st["steps"]
    assert st["steps"]["toolReplayed"] >= 1, st["steps"]
    assert st["usage"]["savedUSD"] >= 0
    after = live_bodies(fake, start)
    # No completed turn was called again: every live request body is distinct.
    assert not [b for b, n in Counter(after).items() if n > 1], "a completed turn was re-billed"
    assert set(before) <= set(after) and len(after) == len(before) + 1
    reasons = [
        e["reason"]
        for e in json.loads(
            kube.kubectl("get", "events", "-n", NS, "--field-selector", f"involvedObject.name={name}", "-o", "json").stdout
        )["items"]
    ]
    assert "Retrying" in reasons


def _pending_approval(kube: ControlPlane, name: str) -> dict[str, Any]:
    obj = wait_condition(kube, name, "AwaitingApproval")
    assert obj["status"]["phase"] == "AwaitingApproval"
    assert condition(obj, "Reconciling")["status"] == "True"
    (approval,) = [a for a in obj["status"]["approvals"] if not a.get("decision")]
    assert approval["tool"] == "issue-refund" and "Refund" in approval["prompt"]
    return approval


def tether_approve(kube: ControlPlane, user: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    """`tether approve` as a person with the given user's kubeconfig (None: the admin's)."""
    kubeconfig = kube.kubeconfig if user is None else kube.kubeconfig_for(user)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return subprocess.run([sys.executable, "-m", "tether", "approve", *args], capture_output=True, text=True, env=env, timeout=120)


def test_approval_with_tether_approve(kube: ControlPlane, fake: FakeProvider, agent_operator: Operator) -> None:
    name = apply_example(kube, fake, "refund", name="refund-yes")
    approval = _pending_approval(kube, name)
    reasons = [
        e["reason"]
        for e in json.loads(
            kube.kubectl("get", "events", "-n", NS, "--field-selector", f"involvedObject.name={name}", "-o", "json").stdout
        )["items"]
    ]
    assert "AwaitingApproval" in reasons
    approved = tether_approve(kube, None, f"{NS}/{name}", approval["id"], "--yes")
    assert approved.returncode == 0 and "Applied: approval" in approved.stdout, approved.stdout + approved.stderr
    obj = wait_condition(kube, name, "Succeeded")
    (decided,) = obj["status"]["approvals"]
    assert (decided["decision"], decided["by"]) == ("approved", "tether-admin")  # who the apiserver says decided
    assert "Refunded" in obj["status"]["result"]["output"]


def test_decline_with_tether_approve(kube: ControlPlane, fake: FakeProvider, agent_operator: Operator) -> None:
    name = apply_example(kube, fake, "refund", name="refund-no")
    approval = _pending_approval(kube, name)
    uid = get(kube, "agentrun", NS, name)["metadata"]["uid"]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tether",
            "approve",
            uid,
            approval["id"],
            "--no",
            "--reason",
            "not eligible",
            "--by",
            "bob",
            "--store",
            f"{agent_operator.store_url}/{NS}",  # each namespace's runs under their own prefix
        ],
        check=True,
        capture_output=True,
    )
    obj = wait_condition(kube, name, "Succeeded")
    (decided,) = obj["status"]["approvals"]
    assert (decided["decision"], decided["by"], decided["reason"]) == ("declined", "bob", "not eligible")
    assert "Refunded" not in obj["status"]["result"]["output"]


def test_approval_timeout_applies_the_default(kube: ControlPlane, fake: FakeProvider, agent_operator: Operator) -> None:
    docs = list(yaml.safe_load_all((EXAMPLES / "refund.yaml").read_text()))
    tool = next(d for d in docs if d["metadata"]["name"] == "issue-refund")
    tool["spec"]["approval"].update(timeout="1m", defaultAction="approve")  # 1m: the shortest admission accepts
    run = next(d for d in docs if d["kind"] == "AgentRun")
    run["metadata"]["name"] = "refund-timeout"
    run["spec"]["model"]["baseURL"] = fake.base_url("openai")
    # AgentTool specs are immutable too: replace the example's tool with a 1 min timeout version.
    kube.kubectl("delete", "agenttool", "issue-refund", "-n", NS, "--ignore-not-found")
    kube.kubectl("apply", "-n", NS, "-f", "-", input="\n---\n".join(json.dumps(d) for d in docs))
    try:
        obj = wait_condition(kube, "refund-timeout", "Succeeded")
    finally:  # put the example's own tool back for the tests after this one
        kube.kubectl("delete", "agenttool", "issue-refund", "-n", NS)
        original = next(d for d in yaml.safe_load_all((EXAMPLES / "refund.yaml").read_text()) if d["metadata"]["name"] == "issue-refund")
        kube.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(original))
    (decided,) = obj["status"]["approvals"]
    assert (decided["decision"], decided["by"]) == ("approved", "timeout")


def test_a_run_that_diverges_keeps_updating_status(kube: ControlPlane, fake: FakeProvider, agent_operator: Operator) -> None:
    """The runtime's progress (firstDivergence included) is what the operator reads: status keeps
    following a diverged run to the end — steps, usage and result, not only the phase."""
    kube.kubectl("delete", "secret", "openai-later", "-n", NS, "--ignore-not-found")
    model = {"name": "gpt-4o-mini", "provider": "openai", "baseURL": fake.base_url("openai")}
    model["apiKeySecretRef"] = {"name": "openai-later", "key": "api-key"}  # missing: the run waits
    name = apply_example(kube, fake, "weather", name="weather-diverged", model=model)
    wait_for(lambda: condition(get(kube, "agentrun", NS, name), "Accepted").get("reason") == "MissingSecret", what="waiting")
    # Meanwhile an earlier attempt left a model turn this run will not ask for: its first turn diverges.
    uid = get(kube, "agentrun", NS, name)["metadata"]["uid"]
    journal = Journal(run_store(agent_operator), uid).load()
    journal.append(Record("model", "0" * 64, 1, "ok", {"model": "gpt-4o-mini", "turn": "of an earlier attempt"}, body=b"{}"))
    kube.kubectl("create", "secret", "generic", "openai-later", "-n", NS, "--from-literal=api-key=fake-key-e2e-0123456789")
    kube.kubectl("label", "secret", "openai-later", "-n", NS, "tether.dev/usable=true")

    obj = wait_condition(kube, name, "Succeeded")
    st = obj["status"]
    assert st["steps"]["firstDivergence"]["kind"] == "model" and st["steps"]["firstDivergence"]["step"] == 1
    assert st["steps"]["firstDivergence"]["attempt"] == 2
    assert st["steps"]["modelLive"] >= 2 and st["usage"]["inputTokens"] > 0
    assert "sunny" in st["result"]["output"]
    assert condition(obj, "ProgressReadable") == {}  # nothing to report


def test_unreadable_progress_is_a_condition_and_an_event(kube: ControlPlane, fake: FakeProvider, agent_operator: Operator) -> None:
    name = apply_example(kube, fake, "refund", name="refund-unreadable")
    approval = _pending_approval(kube, name)
    uid = get(kube, "agentrun", NS, name)["metadata"]["uid"]
    # Suspended: no runtime rewrites progress now. Make it a document the operator cannot read.
    run_store(agent_operator).put(f"runs/{uid}/progress.json", b'{"steps": {"modelLive": "many"}}')
    # Nothing runs, so the operator does not read progress again until the run moves (runs.follow);
    # a restarted operator reads it when it adopts the run.
    agent_operator.stop()
    agent_operator.start()
    obj = wait_for(
        lambda: condition(o := get(kube, "agentrun", NS, name), "ProgressReadable").get("status") == "False" and o, what="condition"
    )
    unreadable = condition(obj, "ProgressReadable")
    assert unreadable["reason"] == "ProgressUnreadable" and "steps.modelLive" in unreadable["message"]
    events = kube.kubectl("get", "events", "-n", NS, "--field-selector", f"involvedObject.name={name}", "-o", "json").stdout
    assert "ProgressUnreadable" in {e["reason"] for e in json.loads(events)["items"]}
    # The run goes on, and status with it.
    assert tether_approve(kube, None, f"{NS}/{name}", approval["id"], "--yes").returncode == 0
    obj = wait_condition(kube, name, "Succeeded")
    assert condition(obj, "ProgressReadable")["status"] == "True"
    assert "Refunded" in obj["status"]["result"]["output"]


def test_a_store_that_does_not_answer_is_a_condition_while_it_lasts(
    kube: ControlPlane, fake: FakeProvider, agent_operator: Operator
) -> None:
    name = apply_example(kube, fake, "refund", name="refund-store-down")
    approval = _pending_approval(kube, name)
    uid = get(kube, "agentrun", NS, name)["metadata"]["uid"]
    # Reading the progress record fails (a folder where the file is: EISDIR, as an unreachable
    # store fails), and a restarted operator reads it when it adopts the suspended run.
    store = run_store(agent_operator)
    assert isinstance(store, LocalStore)
    record = store.root / "runs" / uid / "progress.json"
    saved = record.read_bytes()
    record.unlink()
    record.mkdir()
    agent_operator.stop()
    agent_operator.start()
    obj = wait_for(
        lambda: condition(o := get(kube, "agentrun", NS, name), "ProgressReadable").get("status") == "False" and o, what="condition"
    )
    down = condition(obj, "ProgressReadable")
    assert down["reason"] == "StoreUnreachable" and "the store does not answer" in down["message"], down
    events = kube.kubectl("get", "events", "-n", NS, "--field-selector", f"involvedObject.name={name}", "-o", "json").stdout
    assert "StoreUnreachable" in {e["reason"] for e in json.loads(events)["items"]}
    # The store answers again: the run goes on to its result, and the condition says so.
    record.rmdir()
    record.write_bytes(saved)
    assert tether_approve(kube, None, f"{NS}/{name}", approval["id"], "--yes").returncode == 0
    obj = wait_condition(kube, name, "Succeeded")
    assert condition(obj, "ProgressReadable")["status"] == "True"
    assert "Refunded" in obj["status"]["result"]["output"]


def test_failed_start_shows_its_cause(kube: ControlPlane, fake: FakeProvider, agent_operator: Operator) -> None:
    docs = list(yaml.safe_load_all((EXAMPLES / "weather.yaml").read_text()))
    tool = next(d for d in docs if d["kind"] == "AgentTool")
    tool["metadata"]["name"] = "weather-missing-module"
    tool["spec"]["implementation"] = "example_tools.no_such_module:get_weather"  # allowed, not importable
    run = next(d for d in docs if d["kind"] == "AgentRun")
    run["metadata"]["name"] = "weather-broken"
    run["spec"].update(tools=["weather-missing-module"])
    run["spec"]["model"]["baseURL"] = fake.base_url("openai")
    kube.kubectl("apply", "-n", NS, "-f", "-", input="\n---\n".join(json.dumps(d) for d in docs))
    obj = wait_condition(kube, "weather-broken", "Stalled")
    cause = "AgentTool weather-missing-module: cannot import example_tools.no_such_module:get_weather"
    assert cause in condition(obj, "Failed")["message"], condition(obj, "Failed")
    events = kube.kubectl("get", "events", "-n", NS, "--field-selector", "involvedObject.name=weather-broken", "-o", "json").stdout
    assert any(cause in e["message"] for e in json.loads(events)["items"] if e["type"] == "Warning")


def test_operator_restart_mid_run_one_execution(kube: ControlPlane, fake: FakeProvider, agent_operator: Operator) -> None:
    start = len(fake.ledger)
    name = apply_example(kube, fake, "research", name="research-restart")
    obj = wait_for(lambda: (o := get(kube, "agentrun", NS, name))["status"].get("execution") and o, timeout=60, what="submitted")
    exec_name = obj["status"]["execution"]["name"]
    wait_for(lambda: len(live_bodies(fake, start)) >= 1, timeout=120, what="a live turn")
    wait_for(lambda: journaled_turns(agent_operator, obj) >= 1, timeout=30, what="the turn journaled")  # search (1.5 s) runs
    pid = attempt_pid(agent_operator, obj)
    agent_operator.kill()  # SIGKILL: no cleanup; the runtime dies with it (PR_SET_PDEATHSIG)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=10, what="runtime gone with the operator")
    agent_operator.start()

    obj = wait_condition(kube, name, "Succeeded")
    st = obj["status"]
    assert st["execution"]["name"] == exec_name
    assert st["attempts"] == 2
    runs = [
        p.name
        for p in (agent_operator.workdir / "executions").iterdir()
        if p.name == exec_name or ((p / "request.json").exists() and json.loads((p / "request.json").read_text())["name"] == name)
    ]
    assert runs == [exec_name], "exactly one execution for the run"
    after = live_bodies(fake, start)
    assert not [b for b, n in Counter(after).items() if n > 1], "a completed turn was re-billed"
    assert st["steps"]["modelReplayed"] >= 1


def test_deleting_a_running_run_kills_it(kube: ControlPlane, fake: FakeProvider, agent_operator: Operator) -> None:
    start = len(fake.ledger)
    name = apply_example(kube, fake, "research", name="research-delete")
    obj = wait_for(lambda: (o := get(kube, "agentrun", NS, name))["status"].get("phase") == "Running" and o, timeout=60, what="running")
    pid = attempt_pid(agent_operator, obj)
    wait_for(lambda: len(live_bodies(fake, start)) >= 1, timeout=120, what="a live turn")
    kube.kubectl("delete", "agentrun", name, "-n", NS, "--timeout=60s")
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=15, what="runtime killed")
    assert kube.kubectl("get", "agentrun", name, "-n", NS, check=False).returncode != 0


def test_agent_operator_never_crashed(agent_operator: Operator) -> None:
    assert agent_operator.alive()
    assert "Traceback" not in agent_operator.logs(), agent_operator.logs()[-4000:]
