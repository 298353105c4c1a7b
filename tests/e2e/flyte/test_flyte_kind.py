"""Tether's Flyte executor on a real kind cluster with the open-source Flyte 2 backend in it
(tests/e2e/run.sh flyte-install, flyte-test): each AgentRun is a Flyte run whose task pods the
backend makes and the cluster's kubelet runs.

An example runs to Succeeded in a Flyte task pod; the task pod killed mid-run, the next pod
replays every finished turn with zero upstream calls (the fake provider's ledger) and no finished
tool re-run; deleting the AgentRun aborts the Flyte run; an approval given with kubectl resumes
the run as its next Flyte run; a tool with its own resources runs as a child Flyte task.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.e2e.cluster import NS, apply, approve, delete_run, kubectl, poll, status, wait_phase
from tests.e2e.cluster import example as e2e_example
from tests.e2e.flyte.conftest import RUNTIME_IMAGE, Fake, FlyteAPI
from tether.testing.fake_provider import BASE_PATHS

pytestmark = pytest.mark.usefixtures("flyte_api")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def example(stem: str, name: str, fake: Fake) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The openai example `stem` as an AgentRun `name`, its model at this e2e's fake provider."""
    run, tools = e2e_example("openai", stem, name)
    run["spec"]["model"]["baseURL"] = fake.url + BASE_PATHS[run["spec"]["model"]["provider"]]
    run["spec"]["image"] = RUNTIME_IMAGE
    return run, tools


def execution(name: str) -> str:
    """The Flyte run's name, once the operator has submitted it."""
    return str(poll(f"AgentRun {name} submitted to Flyte", lambda: (status(name).get("execution") or {}).get("name"), 120))


def task_pods(run_name: str) -> list[dict[str, Any]]:
    """The task pods the Flyte backend made for the run (any namespace), oldest first."""
    out = kubectl("get", "pods", "-A", "-l", f"flyte.org/run={run_name}", "-o", "json")
    return sorted(json.loads(out)["items"], key=lambda p: p["metadata"]["creationTimestamp"])


def test_an_example_runs_to_succeeded_in_a_flyte_task_pod(flyte_api: FlyteAPI, fake: Fake) -> None:
    name = unique("weather")
    run, tools = example("weather", name, fake)
    apply(run, tools)
    try:
        final = wait_phase(name, "Succeeded", timeout=600)
        assert final["execution"]["executor"] == "flyte"
        run_name = final["execution"]["name"]
        assert flyte_api.phase(run_name) == "succeeded"
        assert final["steps"]["modelLive"] >= 2
        pods = task_pods(run_name)
        assert pods, "the backend made no task pod"
        pod = pods[-1]
        assert pod["status"]["phase"] == "Succeeded"
        assert pod["spec"]["nodeName"], "the task pod never ran on a node"
        assert pod["spec"]["containers"][0]["image"] == RUNTIME_IMAGE
    finally:
        delete_run(name)


def test_task_pod_deleted_mid_run_flyte_retries_and_replays_with_no_upstream_call(fake: Fake) -> None:
    name = unique("kill")
    run, tools = example("research", name, fake)
    fake.call("/_control/reset", "POST")
    apply(run, tools)
    try:
        run_name = execution(name)
        # After the first tool finished (turn 2 asked for): a turn and a tool are journaled.
        before = poll("a finished tool", lambda: (s := status(name).get("steps") or {}).get("toolLive", 0) >= 1 and s, 300)
        first = task_pods(run_name)[0]["metadata"]
        # Killed at once, as when its node dies (a graceful stop would let it finish the run).
        kubectl("delete", "pod", first["name"], "-n", first["namespace"], "--grace-period=0", "--force", "--wait=false")
        final = wait_phase(name, "Succeeded", timeout=600)
        # The backend counts a deleted pod as a system interruption: it makes the pod again
        # under the same name and its attempt count stays 1 (its user retries are for attempts
        # that failed). A new pod it is, and it replays; the runtime counted both starts.
        assert final["attempts"] == 2, final
        calls = [c for c in fake.ledger() if c["status"] == 200]
        # research has 3 turns: each reached the provider exactly once across both attempts.
        assert len(calls) == 3, calls
        pods = [(p["metadata"]["name"], p["metadata"]["uid"], p["status"].get("phase")) for p in task_pods(run_name)]
        assert final["steps"]["modelReplayed"] >= before["modelLive"], (before, final["steps"], first["uid"], pods)
        assert final["steps"]["toolReplayed"] >= before["toolLive"]
        # The last attempt's pod ran only the tools that never finished before the kill.
        last = task_pods(run_name)[-1]["metadata"]
        assert last["uid"] != first["uid"]
        log = kubectl("logs", "-n", last["namespace"], last["name"])
        assert log.count("[tool] search(") == 0, log
    finally:
        delete_run(name)


def test_deleting_the_agentrun_aborts_the_flyte_run(flyte_api: FlyteAPI, fake: Fake) -> None:
    name = unique("abort")
    run, tools = example("research", name, fake)
    apply(run, tools)
    run_name = execution(name)
    poll("the task pod running", lambda: any(p["status"].get("phase") == "Running" for p in task_pods(run_name)), 300)
    delete_run(name)
    poll(f"Flyte run {run_name} aborted", lambda: flyte_api.phase(run_name) == "aborted", 120)
    poll("the task pod gone or stopped", lambda: all(p["status"].get("phase") != "Running" for p in task_pods(run_name)), 120)


def test_an_approval_given_with_kubectl_resumes_the_run_as_its_next_flyte_run(flyte_api: FlyteAPI, fake: Fake) -> None:
    name = unique("refund")
    run, tools = example("refund", name, fake)
    apply(run, tools)
    try:
        waiting = wait_phase(name, "AwaitingApproval", timeout=600)
        pending = [a for a in waiting.get("approvals") or [] if not a.get("decision")]
        assert len(pending) == 1, waiting  # issue-refund asks once
        first = waiting["execution"]["name"]
        # The suspended segment ended: its Flyte run finished, and nothing runs while a human decides.
        poll(f"Flyte run {first} finished", lambda: flyte_api.phase(first) == "succeeded", 120)
        assert all(p["status"].get("phase") != "Running" for p in task_pods(first))
        approve(name, pending[0]["id"])
        wait_phase(name, "Succeeded", timeout=600)
        second = f"{first}-2"  # the decision started the next segment, which replayed to the approval
        assert flyte_api.phase(second) == "succeeded"
        pods = task_pods(second)
        assert pods and pods[-1]["status"]["phase"] == "Succeeded"
    finally:
        delete_run(name)


def test_a_tool_with_its_own_resources_runs_as_a_child_flyte_task(flyte_api: FlyteAPI, fake: Fake) -> None:
    name = unique("child")
    run, tools = example("weather", name, fake)
    (tool,) = tools
    original = json.loads(json.dumps(tool))
    tool["spec"]["resources"] = {"cpu": "150m", "memory": "300Mi"}  # its own: a child task of tether-tool
    tool["spec"]["cache"] = "off"  # else the earlier weather runs' cached result answers the call
    # An AgentTool's spec is immutable: this test's variant replaces it, and the original comes back.
    kubectl("delete", "agenttool", tool["metadata"]["name"], "-n", NS, "--ignore-not-found")
    apply(run, tools)
    try:
        final = wait_phase(name, "Succeeded", timeout=600)
        run_name = final["execution"]["name"]
        pods = task_pods(run_name)
        child = [p for p in pods if p["spec"]["containers"][0]["resources"].get("requests", {}).get("cpu") == "150m"]
        assert child, [(p["metadata"]["name"], p["spec"]["containers"][0]["resources"]) for p in pods]
        assert child[0]["status"]["phase"] == "Succeeded" and child[0]["spec"]["nodeName"]
        # The tool ran there (its pod ends Succeeded even when the call raised: read its log),
        # and not in the agent's pod.
        meta = child[0]["metadata"]
        log = kubectl("logs", "-n", meta["namespace"], meta["name"])
        assert "[tool] get_weather('Paris') running" in log and "Error" not in log, log[-3000:]
        agent = [p["metadata"] for p in pods if p not in child]
        assert all("[tool] get_weather(" not in kubectl("logs", "-n", m["namespace"], m["name"]) for m in agent)
        assert len(pods) >= 2  # the agent's pod and the tool's
    finally:
        delete_run(name)
        kubectl("delete", "agenttool", tool["metadata"]["name"], "-n", NS)
        kubectl("apply", "-f", "-", input=json.dumps(original))
