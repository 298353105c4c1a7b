"""Small pure pieces of the operator: conditions (kstatus), placement, GitOps metadata, metrics, settings."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tether.api import Resources, Toleration
from tether_operator import conditions as C
from tether_operator import metrics
from tether_operator.images import repository
from tether_operator.placement import placement, propagated
from tether_operator.settings import Settings


def test_set_condition_moves_transition_time_only_on_change() -> None:
    first = C.set_condition([], C.READY, False, "Waiting", "x", generation=1)
    first[0]["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    same = C.set_condition(first, C.READY, False, "StillWaiting", "y", generation=2)
    assert same[0]["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert (same[0]["reason"], same[0]["observedGeneration"]) == ("StillWaiting", 2)
    flipped = C.set_condition(same, C.READY, True, "Done")
    assert flipped[0]["lastTransitionTime"] != "2020-01-01T00:00:00Z"
    assert first[0]["reason"] == "Waiting", "the input list is not modified"


def test_kstatus_never_reconciling_and_stalled_together() -> None:
    conds = C.kstatus([], reconciling=("Running", "attempt 1"))
    assert C.is_true(conds, C.RECONCILING) and not C.is_true(conds, C.STALLED)
    conds = C.kstatus(conds, stalled=("Failed", "boom"))
    assert C.is_true(conds, C.STALLED) and not C.is_true(conds, C.RECONCILING)
    assert not C.is_true(conds, C.READY)
    conds = C.kstatus([], ready=("Succeeded", "done"))
    assert C.is_true(conds, C.READY) and not C.is_true(conds, C.RECONCILING)


def test_gpu_pool_is_merged_into_placement() -> None:
    pools = {"A100": {"nodeSelector": {"pool": "a100"}, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}
    where = placement(
        Resources.model_validate({"gpu": {"type": "A100", "count": 1}}),
        {"zone": "b"},
        [Toleration(key="spot", operator="Exists")],
        pools,
    )
    assert where.node_selector == {"zone": "b", "pool": "a100"}
    assert [t["key"] for t in where.tolerations] == ["spot", "nvidia.com/gpu"]
    assert placement(None, None, None, pools).node_selector == {}


def test_gitops_tracking_metadata_is_not_propagated() -> None:
    labels = {
        "app.kubernetes.io/instance": "shop",
        "app.kubernetes.io/managed-by": "Helm",
        "argocd.argoproj.io/instance": "shop",
        "kustomize.toolkit.fluxcd.io/name": "shop",
        "helm.toolkit.fluxcd.io/name": "shop",
        "team": "payments",
        "app.kubernetes.io/name": "refunds",
    }
    # even where the allowlist names them (every key here)
    assert propagated(labels, tuple(labels)) == {"team": "payments", "app.kubernetes.io/name": "refunds"}
    gitops = {"argocd.argoproj.io/tracking-id": "x", "kubectl.kubernetes.io/last-applied-configuration": "{}"}
    assert propagated(gitops, ("argocd.argoproj.io/", "kubectl.kubernetes.io/")) == {}


def test_metrics_text_format() -> None:
    metrics.SUBMISSIONS.inc()
    text = metrics.render(lambda: ["Running", "Running", "Queued"])
    assert "# TYPE tether_operator_submissions_total counter" in text
    assert 'tether_operator_executions{state="Running"} 2' in text
    assert "tether_operator_submit_seconds_count" in text


def test_each_namespace_has_its_own_store_prefix() -> None:
    from tether_operator.settings import StoreSettings

    s3 = StoreSettings(url="s3://runs/tether?endpoint_url=http://minio:9000&region=eu-west-1")
    assert s3.for_namespace("team-a") == "s3://runs/tether/team-a?endpoint_url=http://minio:9000&region=eu-west-1"
    assert StoreSettings(url="file:///var/lib/tether/store/").for_namespace("team-b") == "file:///var/lib/tether/store/team-b"


def test_capabilities_name_every_unsupported_field() -> None:
    from tether.api import AgentRunSpec, AgentToolSpec
    from tether_operator.executors.base import unsupported
    from tether_operator.executors.flyte import FlyteExecutor
    from tether_operator.executors.kubernetes import KubernetesExecutor
    from tether_operator.executors.local import LocalExecutor

    spec = AgentRunSpec.model_validate(
        {
            "framework": "openai",
            "model": {"name": "gpt-4.1"},
            "input": "hi",
            "image": "x:1",
            "resources": {"cpu": "1"},
            "nodeSelector": {"a": "b"},
            "tolerations": [{"key": "spot", "operator": "Exists"}],
        }
    )
    tools = {
        "embed": AgentToolSpec.model_validate({"description": "d", "implementation": "m:f", "resources": {"memory": "1Gi"}}),
        "plain": AgentToolSpec.model_validate({"description": "d", "implementation": "m:f"}),
    }
    assert unsupported(spec, tools, LocalExecutor.supports) == [
        "spec.image",
        "spec.resources",
        "spec.nodeSelector",
        "spec.tolerations",
        "spec.resources of AgentTool embed",
    ]
    # a tool's own resources run in its own container; a GPU tool in a pod of its own (tool_pods)
    assert unsupported(spec, tools, KubernetesExecutor.supports) == []
    gpu = AgentToolSpec.model_validate({"description": "d", "implementation": "m:f", "resources": {"gpu": {"type": "A100", "count": 1}}})
    assert unsupported(spec, {"gpu": gpu}, KubernetesExecutor.supports) == []
    assert unsupported(spec, {"gpu": gpu}, FlyteExecutor.supports) == ["spec.nodeSelector", "spec.tolerations"]
    assert unsupported(spec, {"gpu": gpu}, LocalExecutor.supports)[-1] == "spec.resources of AgentTool gpu"  # said once
    # An MCP server's client runs in its tool runner (kubernetes) or in the one process (local); the
    # flyte executor has no tool runner, so it refuses rather than run the client in the agent's task.
    hotel = AgentToolSpec.model_validate({"description": "d", "mcp": {"url": "https://mcp.example/mcp", "tools": ["book"]}})
    assert unsupported(spec, {"hotel": hotel}, KubernetesExecutor.supports) == []
    assert "spec.mcp of AgentTool hotel" not in unsupported(spec, {"hotel": hotel}, LocalExecutor.supports)
    assert unsupported(spec, {"hotel": hotel}, FlyteExecutor.supports) == [
        "spec.nodeSelector",
        "spec.tolerations",
        "spec.mcp of AgentTool hotel",
    ]
    # spec.standby: a pod waiting beside the running one, the kubernetes executor's alone; never
    # with a GPU tool (its tool pods are per attempt: a standby would hold them too)
    standby = spec.model_copy(update={"standby": True})
    assert unsupported(standby, tools, KubernetesExecutor.supports) == []
    assert unsupported(standby, {"gpu": gpu}, KubernetesExecutor.supports) == [
        "spec.standby with AgentTool gpu's GPU (a standby would hold its GPU pod too)"
    ]
    assert "spec.standby" in unsupported(standby, {}, FlyteExecutor.supports)
    assert "spec.standby" in unsupported(standby, {}, LocalExecutor.supports)


def test_pod_outcomes_map_to_the_exit_code_contract() -> None:
    from tether_operator.executors.pods import pod_outcome

    def pod(phase: str, code: int | None = None, reason: str = "", pod_reason: str = "") -> dict:
        status: dict = {"phase": phase, "reason": pod_reason}
        if code is not None:
            status["containerStatuses"] = [{"name": "runtime", "state": {"terminated": {"exitCode": code, "reason": reason}}}]
        return {"status": status}

    assert pod_outcome(pod("Running"), 60) is None and pod_outcome(pod("Pending"), 60) is None
    assert pod_outcome(pod("Succeeded", 0), 60) == (0, "the runtime finished")
    assert pod_outcome(pod("Failed", 2), 60) == (2, "exit code 2")
    assert pod_outcome(pod("Failed", 3), 60) == (3, "exit code 3")
    assert pod_outcome(pod("Failed", 137, "OOMKilled"), 60) == (137, "exit code 137 (OOMKilled)")
    assert pod_outcome(pod("Failed", pod_reason="Evicted"), 60) == (-1, "pod Evicted")
    assert pod_outcome(pod("Failed", 137, pod_reason="DeadlineExceeded"), 90) == (-1, "timed out after 90s")


def test_a_pod_taken_away_is_retried_without_the_backoff() -> None:
    """The retry backoff spaces out an agent that keeps failing; a runner pod deleted, evicted or
    drained (stopped on SIGTERM: 130, or gone without an exit code) did not fail, and neither
    waits a standby that is started already."""
    from tether.api import AgentRunSpec
    from tether.contract import ExecRequest
    from tether_operator.executors.base import Submission
    from tether_operator.executors.kubernetes import KubernetesExecutor, _Execution

    executor = KubernetesExecutor(runtime_image="tether-runtime:test", retry_backoff=4.0)

    def backoff(exit_code: int, failures: int = 1, **spec: Any) -> float:
        body = {"framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hi", **spec}
        request = ExecRequest(run_id="u", namespace="ns", name="r", spec=AgentRunSpec.model_validate(body))
        return executor._backoff(_Execution(Submission(name="x", request=request), failures=failures, exit_code=exit_code))

    assert [backoff(code) for code in (130, -1)] == [0.0, 0.0]  # SIGTERM'd (a deletion, a drain); evicted, deleted, node lost
    assert [backoff(code) for code in (1, 137, 143)] == [4.0, 4.0, 4.0]  # the agent or its process failed
    assert backoff(1, failures=2) == 8.0
    assert backoff(1, standby=True) == 0.0


def test_kopf_daemon_finalizer_is_switched_off_for_agentruns() -> None:
    """handlers.py rewrites kopf's private registry (`_spawning._handlers`) so the AgentRun daemon
    adds no finalizer (ours is held only while something runs): fails loudly if kopf changes it."""
    from tether_operator.handlers import build_registry
    from tether_operator.settings import Settings

    registry = build_registry(Settings.from_env({}))
    daemons = {h.id: h.requires_finalizer for h in registry._spawning.get_all_handlers()}
    assert daemons["agentrun"] is False, "kopf's daemon registry changed: see handlers.build_registry"


def test_an_object_is_ours_only_if_every_field_we_set_is_equal() -> None:
    from tether_operator.executors.pods import differences, start_problem

    ours = {
        "spec": {"containers": [{"name": "runtime", "command": ["a", "b"], "resources": {"requests": {"cpu": "0.5", "memory": "1024Mi"}}}]}
    }
    defaulted = {"spec": {"dnsPolicy": "ClusterFirst", "containers": [
        {"name": "runtime", "command": ["a", "b"], "terminationMessagePath": "/dev/termination-log",
         "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}  # fmt: skip
    assert differences(defaulted, ours) == [], "apiserver defaults and canonical quantities are ours"
    extra_arg = {
        "spec": {
            "containers": [{"name": "runtime", "command": ["a", "b", "--evil"], "resources": ours["spec"]["containers"][0]["resources"]}]
        }
    }
    assert differences(extra_arg, ours) == [".spec.containers[0].command"]
    sidecar = {"spec": {"containers": [*ours["spec"]["containers"], {"name": "spy"}]}}
    assert differences(sidecar, ours) == [".spec.containers"]
    assert differences({"spec": {}}, ours) == [".spec.containers"]
    assert differences({"a": "1Gi"}, {"a": "1024Mi"}) == [".a"], "quantities are compared by value only under resources"

    assert start_problem({"status": {"phase": "Pending"}}) is None
    creating = {"status": {"containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}]}}
    assert start_problem(creating) is None, "a pull in progress is not a failure"
    config = {"status": {"containerStatuses": [{"state": {"waiting": {"reason": "CreateContainerConfigError", "message": "container has runAsNonRoot and image will run as root"}}}]}}  # fmt: skip
    assert start_problem(config) == (
        "CreateContainerConfigError",
        "CreateContainerConfigError: container has runAsNonRoot and image will run as root",
    )
    sidecar_pull = {"status": {"initContainerStatuses": [{"name": "tool-0", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}],
                               "containerStatuses": [{"name": "runtime", "state": {"waiting": {"reason": "PodInitializing"}}}]}}  # fmt: skip
    assert start_problem(sidecar_pull) == ("ImagePullBackOff", "ImagePullBackOff: Back-off pulling image"), "a tool runner's image"


def test_the_tool_runner_startup_probe_passes_once_the_runner_listens(tmp_path) -> None:
    """The exec startupProbe a tool runner's container gets fails before the runner listens and
    passes once it does (what holds the agent's container back while a tool imports)."""
    import subprocess
    import sys

    from tests.support.tool_runner_pod import Pod, stop
    from tether_operator.executors.pods import LISTENING

    pod = Pod(tmp_path, "http://127.0.0.1:9", "x")
    probe = [sys.executable, "-c", LISTENING, pod.socket]
    assert subprocess.run(probe, capture_output=True, timeout=30).returncode != 0
    runner = pod.runner()
    try:
        assert subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    finally:
        stop(runner)
    assert subprocess.run(probe, capture_output=True, timeout=30).returncode != 0  # gone with the runner


def test_tenancy_and_allowed_images_settings() -> None:
    assert Settings.from_env({}).single_tenant is False
    assert Settings.from_env({"TETHER_TENANCY": "single-tenant"}).single_tenant is True
    typo = Settings.from_env({"TETHER_TENANCY": "single", "TETHER_NAMESPACES": "a"})  # never changes who may use which Secret
    assert not typo.single_tenant and "expected multi-tenant or single-tenant" in (typo.startup_error() or "")
    # The runtime image's repository is always allowed, besides the chart's images.allowed.
    settings = Settings.from_env({"TETHER_RUNTIME_IMAGE": "reg:5000/rt:1@sha256:" + "a" * 64, "TETHER_ALLOWED_IMAGES": '["x.io/team/"]'})
    assert settings.images_allowed == ("reg:5000/rt", "x.io/team/")
    assert settings.secret_access_policy == "tether-secret-access" and settings.agent_modules is None
    assert (repository("reg:5000/rt"), repository("rt:1"), repository("a/b@sha256:00")) == ("reg:5000/rt", "rt", "a/b")
    # telemetry.otel: OTEL_* variables for every run's runtime, and nothing else.
    otel = Settings.from_env({"TETHER_NAMESPACES": "a", "TETHER_RUNNER_OTEL": '{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}'})
    assert otel.runner_otel == {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"} and otel.startup_error() is None
    smuggled = Settings.from_env({"TETHER_NAMESPACES": "a", "TETHER_RUNNER_OTEL": '{"OTEL_X": "1", "PYTHONPATH": "/evil"}'})
    assert "TETHER_RUNNER_OTEL names PYTHONPATH: only OTEL_* variables" in (smuggled.startup_error() or "")


def test_single_tenant_does_not_look_for_the_secret_access_policy() -> None:
    import asyncio

    from tether_operator.checks import check_admission_policy

    # Returns before any API call (none is possible here): the cluster admin said everyone may.
    assert asyncio.run(check_admission_policy(Settings(tenancy="single-tenant"), "2020-01-01T00:00:00Z", "the AgentRun")) == []


def test_an_mcp_tools_approval_request_finds_its_agent_tools_settings() -> None:
    """An approval request names the tool as the agent called it: for a tool of an MCP server, the
    server's name for it; its timeout and default action are those of the AgentTool allowing it."""
    from tether.api import AgentToolSpec
    from tether_operator.runs import approval_policy

    approval = {"required": True, "timeout": "10m", "defaultAction": "decline"}
    tools = {
        "hotel": AgentToolSpec.model_validate(
            {"description": "d", "mcp": {"url": "https://h.example/mcp", "tools": ["cancel"]}, "approval": approval}
        ),
        "refund": AgentToolSpec.model_validate({"description": "d", "implementation": "m:f", "approval": {**approval, "timeout": "1h"}}),
    }
    assert approval_policy(tools, "cancel").timeout == "10m"  # type: ignore[union-attr]
    assert approval_policy(tools, "refund").timeout == "1h"  # type: ignore[union-attr]
    assert approval_policy(tools, "hotel") is None and approval_policy(tools, "other") is None


def _progress(attempt: int, live: int, replayed: int, tokens: int = 0, spent: float = 0.0, first_replay_at: float | None = None) -> Any:
    from tether.contract import Progress

    return Progress.model_validate(
        {
            "attempt": attempt,
            "steps": {"modelLive": live, "modelReplayed": replayed, "toolLive": 1, "toolReplayed": 0},
            "usage": {"liveTokens": tokens, "runLiveCostUSD": spent},
            "firstReplayAt": first_replay_at,
        }
    )


def test_a_run_account_counts_each_step_once_over_rereads_attempts_and_restarts() -> None:
    ns = "units-account"
    turns = lambda mode: metrics.MODEL_TURNS.get(namespace=ns, framework="openai", mode=mode)  # noqa: E731
    account = metrics.RunAccount(ns, "openai", "local", {})
    account.execution(1, 0, (), queued=False)
    for _ in range(3):  # the same record read on every look
        account.progress(_progress(1, 2, 0, tokens=100, spent=0.01))
    assert (turns("live"), turns("replayed")) == (2, 0)
    assert metrics.TOKENS.get(namespace=ns, framework="openai", mode="live") == 100
    assert metrics.ATTEMPTS.get(namespace=ns, framework="openai") == 1
    # attempt 1 dies (exit 1), attempt 2 replays both turns and makes one live
    account.execution(1, 1, (1,), queued=True)
    assert metrics.RETRIES.get(namespace=ns, framework="openai", reason="Error") == 1
    account.execution(2, 1, (1,), queued=False)
    account.progress(_progress(1, 3, 0, tokens=150, spent=0.015))  # attempt 1's last record, read late
    died_at = account.died[1] if account.died else 0.0
    account.progress(_progress(2, 1, 3, tokens=60, spent=0.021, first_replay_at=died_at + 0.75))
    account.progress(_progress(1, 3, 0))  # a stale record of attempt 1 adds nothing
    assert (turns("live"), turns("replayed")) == (4, 3)
    assert metrics.COST.get(namespace=ns, framework="openai", mode="live") == pytest.approx(0.021)
    series = metrics.KILL_TO_REPLAY.series[(ns, "openai")]
    assert series[0][-1] == 1 and series[1][0] == pytest.approx(0.75)
    # A restarted operator starts from what status shows: nothing counted twice.
    status = {
        "attempts": 2,
        "steps": {"modelLive": 1, "modelReplayed": 3, "toolLive": 1},
        "usage": {"liveTokens": 60, "runLiveCostUSD": 0.021},
    }
    again = metrics.RunAccount(ns, "openai", "local", status)
    again.execution(2, 1, (), queued=False)
    again.progress(_progress(2, 1, 3, tokens=60, spent=0.021))
    assert (turns("live"), turns("replayed")) == (4, 3)
    assert (
        metrics.ATTEMPTS.get(namespace=ns, framework="openai") == 2
        and metrics.RETRIES.get(namespace=ns, framework="openai", reason="Error") == 1
    )
    again.progress(_progress(2, 2, 3, tokens=90, spent=0.03))
    assert (
        turns("live") == 5 and metrics.TOKENS.get(namespace=ns, framework="openai", mode="live") == 240
    )  # 150 in attempt 1, 60 + 30 in attempt 2


def test_live_steps_of_an_attempt_killed_before_its_last_progress_was_read_are_counted() -> None:
    """Attempt 1 makes three live turns and two tool calls; the operator read its progress after
    two turns and one call, then the attempt was killed. Attempt 2 replays them and makes one
    more turn: the runtime's run-level figures count every live step once (4 turns, 2 calls;
    read per attempt, attempt 1's third turn and second call were never counted), and a
    restarted operator counts nothing twice."""
    from tether.contract import Progress

    ns = "units-run-live"
    count = lambda counter, mode: counter.get(namespace=ns, framework="openai", mode=mode)  # noqa: E731

    def progress(attempt: int, live: int, replayed: int, run_live: int, tools: int, run_tools: int, tokens: int, run_tokens: int) -> Any:
        steps = {"modelLive": live, "modelReplayed": replayed, "runModelLive": run_live, "toolLive": tools, "runToolLive": run_tools}
        return Progress.model_validate({"attempt": attempt, "steps": steps, "usage": {"liveTokens": tokens, "runLiveTokens": run_tokens}})

    account = metrics.RunAccount(ns, "openai", "local", {})
    account.execution(1, 0, (), queued=False)
    account.progress(progress(1, 2, 0, 2, 1, 1, 100, 100))
    account.execution(2, 1, (-9,), queued=False)  # killed after its third turn and second call, unread
    for _ in range(2):
        account.progress(progress(2, 1, 3, 4, 0, 2, 40, 190))
    assert (count(metrics.MODEL_TURNS, "live"), count(metrics.MODEL_TURNS, "replayed")) == (4, 3)
    assert count(metrics.TOOL_CALLS, "live") == 2 and count(metrics.TOKENS, "live") == 190
    status = {
        "attempts": 2,
        "steps": {"modelLive": 1, "modelReplayed": 3, "runModelLive": 4, "toolLive": 0, "runToolLive": 2},
        "usage": {"liveTokens": 40, "runLiveTokens": 190},
    }
    again = metrics.RunAccount(ns, "openai", "local", status)
    again.progress(progress(2, 1, 3, 4, 0, 2, 40, 190))
    assert (count(metrics.MODEL_TURNS, "live"), count(metrics.TOOL_CALLS, "live"), count(metrics.TOKENS, "live")) == (4, 2, 190)
    again.progress(progress(2, 2, 3, 5, 1, 3, 70, 220))
    assert (count(metrics.MODEL_TURNS, "live"), count(metrics.TOOL_CALLS, "live"), count(metrics.TOKENS, "live")) == (5, 3, 220)


def test_approval_waits_are_observed_once_and_retry_reasons_are_bounded() -> None:
    ns = "units-approvals"
    account = metrics.RunAccount(ns, "openai", "local", {"approvals": [{"id": "a0", "decision": "approved"}]})
    requests = [
        {"id": "a0", "requestedAt": 0, "decision": {"approved": True, "by": "alice", "decided_at": 99}},  # counted before a restart
        {"id": "a1", "requestedAt": 100.0, "decision": {"approved": True, "by": "alice", "decided_at": 112.5}},
        {"id": "a2", "requestedAt": 100.0, "decision": {"approved": False, "by": "timeout", "decided_at": 400.0}},
        {"id": "a3", "requestedAt": 100.0, "decision": None},
    ]
    account.approvals(requests)
    account.approvals(requests)
    assert metrics.APPROVAL_WAIT.series[(ns, "openai", "approved")][1] == [12.5]
    assert metrics.APPROVAL_WAIT.series[(ns, "openai", "timeout")][1] == [300.0]
    assert metrics.APPROVAL_WAIT.series[(ns, "openai", "declined")] == ([0] * 12, [0.0])  # shown at 0 from the start
    assert [metrics.retry_reason(c) for c in (None, 1, 4, 130, -1, -9, 137, 7)] == [
        "Unknown", "Error", "StoreUnreachable", "Interrupted", "Lost", "Killed", "Killed", "Crashed"
    ]  # fmt: skip


def test_histograms_are_cumulative_and_label_values_escaped() -> None:
    h = metrics.Histogram("t_seconds", "h", ("namespace",), (1, 5))
    h.observe(0.5, namespace='a"b\\c\n')
    h.observe(3, namespace='a"b\\c\n')
    text = h.render()
    assert 't_seconds_bucket{namespace="a\\"b\\\\c\\n",le="1"} 1\n' in text
    assert 't_seconds_bucket{namespace="a\\"b\\\\c\\n",le="5"} 2\n' in text
    assert 't_seconds_bucket{namespace="a\\"b\\\\c\\n",le="+Inf"} 2\n' in text
    assert 't_seconds_count{namespace="a\\"b\\\\c\\n"} 2\n' in text
    with pytest.raises(ValueError, match="takes labels"):
        h.observe(1, phase="x")


def test_the_failure_that_exhausts_the_retries_is_not_a_retry() -> None:
    ns = "units-exhausted"
    account = metrics.RunAccount(ns, "openai", "local", {}, retries=1)
    account.execution(1, 0, (), queued=False)
    account.execution(2, 1, (-9,), queued=False)  # seen once the next attempt runs
    account.execution(2, 2, (-9,), queued=False)  # failed again (exit 1): retries exhausted, not a retry
    assert metrics.RETRIES.get(namespace=ns, framework="openai", reason="Killed") == 1
    assert metrics.RETRIES.get(namespace=ns, framework="openai", reason="Error") == 0
    assert account.died is not None and account.died[0] == 1


def test_every_metric_is_documented_with_its_type_and_labels() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "operator" / "README.md").read_text()
    rows = {
        m.group(1): (m.group(2), tuple(x.strip() for x in m.group(3).split(",") if x.strip()))
        for m in re.finditer(r"^\| `(tether_\w+)` \| (\w+) \|([\w, ]*)\|", readme, re.M)
    }
    served = {f.name: (f.kind, f.label_names) for f in metrics.FAMILIES} | {"tether_operator_executions": ("gauge", ("state",))}
    assert rows == served


def test_deaths_an_adopting_executor_finds_are_not_counted_again() -> None:
    ns = "units-adopted"
    account = metrics.RunAccount(ns, "openai", "kubernetes", {"attempts": 3}, retries=5)
    account.execution(3, 0, (), queued=True)  # submitted: the executor has not looked yet
    account.execution(3, 2, (), queued=False)  # its pods: two earlier deaths, not retried here
    assert metrics.RETRIES.get(namespace=ns, framework="openai", reason="Unknown") == 0 and account.died is None
    account.execution(4, 4, (137, 1), queued=False)  # two deaths retried here, seen in one look
    assert metrics.RETRIES.get(namespace=ns, framework="openai", reason="Killed") == 1 and account.died == (3, account.died[1])
    assert metrics.RETRIES.get(namespace=ns, framework="openai", reason="Error") == 1
    flyte = metrics.RunAccount(ns, "openai", "flyte", {}, exit_codes=False)  # Flyte's backend retries: no exit codes ever
    flyte.execution(1, 0, (), queued=False)
    flyte.execution(2, 1, (), queued=False)
    assert metrics.RETRIES.get(namespace=ns, framework="openai", reason="Unknown") == 1
