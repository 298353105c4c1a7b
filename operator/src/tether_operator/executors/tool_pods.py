"""GPU AgentTools of the Kubernetes executor: a pod of their own per attempt.

A tool container beside the agent shares its pod, so its node: a tool asking for GPUs would drag
the agent onto the GPU node. Such a tool runs in a pod of its own instead, placed like a run (its
GPU type's node pool, chart value gpuNodePools), while the agent's pod stays where the run's own
spec puts it:

    pod <execution>-<attempt>-tool-<i>   `tether tool-runner --listen :7070`, the tool's image and
                                         resources (the GPU as nvidia.com/gpu), mounting the
                                         tool's own Secrets and its own token only
    Secret <execution>-<attempt>-tools   a random token per GPU tool (key: the AgentTool's name),
                                         made by the operator; mounted by the tool's pod (its
                                         key) and the agent's container (all), nothing else

An attempt makes its tool pods, then the Secret (each pod waits for it in ContainerCreating),
then, once every tool pod is Ready with a pod IP, the runner pod, whose agent container gets
`$TETHER_TOOL_RUNNERS` {tool: tcp://<pod IP>:7070} and the tokens. No Service: anyone who may
create pods could make one its selector matches. A pod IP is reachable by any pod of the cluster,
hence the token: the runner answers no connection that does not send it first
(tether.toolrunner). The attempt's end, whatever it is, deletes its tool pods and Secret; a tool
pod that dies while the agent runs makes its calls ToolRunnerUnavailable (the attempt fails
recoverably; the next makes new tool pods).

Everything is checked as the runner pod is: a pod found under a tool pod's name must be what the
operator would create, else OwnedObjectConflict; the Secret must be created by this call (one
that exists holds a token the operator did not make: OwnedObjectConflict). A tool pod that cannot
start (unschedulable, its image not pullable, a Secret missing) for the start grace, that ends
before it serves, or is not Ready within the run's timeout fails the run with that reason.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import json
import math
import secrets
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

from tether.contract import RUNNERS_ENV

from .. import kube
from ..conditions import Reason
from ..placement import placement
from .base import Submission
from .pods import (
    ATTEMPT_LABEL,
    CONTAINER,
    EXECUTION_LABEL,
    POD_SECURITY,
    REQUEST_DIR,
    RUNNER_COMMAND,
    TOOL_POD_LABEL,
    PodSettings,
    RunFailure,
    conflict,
    not_ours,
    owner_reference,
    pod_age,
    pod_outcome,
    pod_tools,
    request_configmap_name,
    start_problem,
    tokens_secret_name,
    tool_container,
)

PORT = 7070
TOKEN_DIR = "/var/run/tether/tool-token"  # in a tool pod: its own token, file `token`
T = TypeVar("T")


def tool_pod_name(execution: str, attempt: int, index: int) -> str:
    return f"{execution}-{attempt}-tool-{index}"


def tokens_secret(sub: Submission, attempt: int, tokens: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": tokens_secret_name(sub.name, attempt),
            "namespace": sub.request.namespace,
            "labels": {**sub.labels, EXECUTION_LABEL: sub.name, ATTEMPT_LABEL: str(attempt)},
            "ownerReferences": [owner_reference(sub)],
        },
        "immutable": True,
        "data": {name: base64.b64encode(token.encode()).decode() for name, token in tokens.items()},
    }


def tool_pod(
    sub: Submission, attempt: int, index: int, name: str, settings: PodSettings, gpu_node_pools: Mapping[str, Any]
) -> dict[str, Any]:
    """The pod of GPU tool `name` in an attempt: its runner as a sidecar would be (tool_container),
    on TCP with its token instead of a socket, placed on its GPU type's node pool."""
    container, volumes = tool_container(sub, index, name, settings)
    for key in ("restartPolicy", "startupProbe"):  # a sidecar's
        container.pop(key)
    container["name"] = "tool"
    listen = ["--listen", f":{PORT}", "--token-file", f"{TOKEN_DIR}/token"]
    container["command"] = [*RUNNER_COMMAND, "--request", f"{REQUEST_DIR}/request.json", "--tool", name, *listen]
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "tool-sockets"]
    container["volumeMounts"].append({"name": "token", "mountPath": TOKEN_DIR, "readOnly": True})
    container["ports"] = [{"name": "tool", "containerPort": PORT, "protocol": "TCP"}]
    # Ready once it listens (its tool imported: a large library can take a while).
    container["readinessProbe"] = {"tcpSocket": {"port": PORT}, "periodSeconds": 1, "failureThreshold": 3}
    secret = {"secretName": tokens_secret_name(sub.name, attempt), "items": [{"key": name, "path": "token"}], "defaultMode": 0o440}
    volumes += [{"name": "request", "configMap": {"name": request_configmap_name(sub)}}, {"name": "token", "secret": secret}]
    tool = sub.request.tools[name]
    where = placement(tool.resources, None, None, dict(gpu_node_pools))
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",  # a dead tool pod fails the attempt; the next makes a new one
        "serviceAccountName": settings.service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        # Bounded even if the operator is gone (a GPU held for ever): Ready within the timeout
        # (else the run fails), then the agent's pod, made after it, has the timeout again.
        "activeDeadlineSeconds": max(1, math.ceil(2 * sub.timeout_seconds)),
        "securityContext": dict(POD_SECURITY),
        "containers": [container],
        "volumes": volumes,
    }
    if where.node_selector:
        pod_spec["nodeSelector"] = where.node_selector
    if where.tolerations:
        pod_spec["tolerations"] = where.tolerations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": tool_pod_name(sub.name, attempt, index),
            "namespace": sub.request.namespace,
            "labels": {**sub.labels, EXECUTION_LABEL: sub.name, ATTEMPT_LABEL: str(attempt), TOOL_POD_LABEL: str(index)},
            "ownerReferences": [owner_reference(sub)],
        },
        "spec": pod_spec,
    }


def _ready_ip(pod: Mapping[str, Any]) -> str | None:
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return status.get("podIP") if status.get("phase") == "Running" and ready else None


def endpoint(ip: str) -> str:
    return f"tcp://[{ip}]:{PORT}" if ":" in ip else f"tcp://{ip}:{PORT}"


class ToolPods:
    """The tool pods of a KubernetesExecutor's attempts, made with its `settings`."""

    def __init__(self, settings: PodSettings, gpu_node_pools: Mapping[str, Any]) -> None:
        self.settings = settings
        self.gpu_node_pools = gpu_node_pools

    def pods(self, sub: Submission, attempt: int) -> dict[str, dict[str, Any]]:
        """The attempt's tool pods by AgentTool (a pure function: compared exactly)."""
        return {name: tool_pod(sub, attempt, index, name, self.settings, self.gpu_node_pools) for index, name in enumerate(pod_tools(sub))}

    def claimed(self, sub: Submission, runner: Mapping[str, Any]) -> dict[str, str] | None:
        """The GPU tools' addresses a runner pod's agent container names, if they are addresses
        of the form the operator gives (tcp://<IP>:7070 for each GPU tool): to compare an existing
        runner pod with what the operator would have made of it."""
        names = pod_tools(sub)
        if not names:
            return None
        containers = (runner.get("spec") or {}).get("containers") or []
        env = next((c.get("env") or [] for c in containers if c.get("name") == CONTAINER), [])
        raw = next((e.get("value") for e in env if e.get("name") == RUNNERS_ENV), None)
        try:
            given = json.loads(raw or "{}")
            claimed = {name: given[name] for name in names}
            for address in claimed.values():
                split = urlsplit(address)
                ipaddress.ip_address(split.hostname or "")
                assert split.scheme == "tcp" and split.port == PORT and address == endpoint(split.hostname or "")
        except (ValueError, KeyError, TypeError, AssertionError):
            return {}  # not what the operator makes: the comparison fails
        return claimed

    async def start(self, sub: Submission, attempt: int, changed: asyncio.Event) -> dict[str, str]:
        """Make the attempt's tool pods and tokens; their addresses once each pod is Ready.
        RunFailure if one cannot start or a name is taken (what this call made deleted first,
        never what it found)."""
        expected = self.pods(sub, attempt)
        if not expected:
            return {}
        namespace = sub.request.namespace
        made: list[str] = []
        try:
            for pod in expected.values():
                found, created = await kube.create(kube.core_path(namespace, "pods"), pod)
                if not created and (why := not_ours(found, pod)):
                    raise conflict("Pod", namespace, pod["metadata"]["name"], why)
                made.append(kube.core_path(namespace, "pods", pod["metadata"]["name"]))
            tokens = {name: secrets.token_urlsafe(32) for name in expected}
            _, created = await kube.create(kube.core_path(namespace, "secrets"), tokens_secret(sub, attempt, tokens))
            if not created:  # the operator never reads its value: a Secret found holds someone else's token
                why = "it was there before the operator created it"
                raise conflict("Secret", namespace, tokens_secret_name(sub.name, attempt), why)
            made.append(kube.core_path(namespace, "secrets", tokens_secret_name(sub.name, attempt)))
            return {name: endpoint(ip) for name, ip in (await self._ready(sub, expected, changed)).items()}
        except asyncio.CancelledError:
            raise  # operator shutdown: discarded on restart (discard_unstarted)
        except BaseException:
            for path in made:
                await kube.delete(path)
            raise

    async def _ready(self, sub: Submission, expected: dict[str, dict[str, Any]], changed: asyncio.Event) -> dict[str, str]:
        settings = self.settings
        namespace = sub.request.namespace
        while True:
            changed.clear()
            ips: dict[str, str] = {}
            waits = [settings.resync_seconds]
            for name, want in expected.items():
                pod_id = want["metadata"]["name"]
                pod = await kube.request("GET", kube.core_path(namespace, "pods", pod_id))
                if pod is None or pod["metadata"].get("deletionTimestamp"):
                    raise RunFailure(Reason.FAILED, f"tool pod {pod_id} of AgentTool {name} was deleted before it served")
                if why := not_ours(pod, want):  # deleted and made again by someone else meanwhile
                    raise conflict("Pod", namespace, pod_id, why)
                if (ip := _ready_ip(pod)) is not None:
                    ips[name] = ip
                    continue
                outcome = pod_outcome(pod, sub.timeout_seconds)
                if outcome is not None:
                    raise RunFailure(Reason.FAILED, f"tool pod {pod_id} of AgentTool {name} ended before it served: {outcome[1]}")
                age = pod_age(pod)
                phase = (pod.get("status") or {}).get("phase") or "Pending"
                problem = start_problem(pod) if phase == "Pending" else None
                if problem is not None:
                    if age >= settings.start_grace_seconds:
                        reason, why = problem
                        raise RunFailure(
                            reason, f"tool pod {pod_id} of AgentTool {name} did not start within {settings.start_grace_seconds:g}s: {why}"
                        )
                    waits.append(settings.start_grace_seconds - age)
                if age >= sub.timeout_seconds:
                    raise RunFailure(Reason.FAILED, f"tool pod {pod_id} of AgentTool {name} was not ready after {sub.timeout_seconds:g}s")
                waits.append(sub.timeout_seconds - age)
            if len(ips) == len(expected):
                return ips
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(changed.wait(), max(min(waits), 0.05))

    async def around(self, sub: Submission, attempt: int, follow: Awaitable[T]) -> T:
        """`follow` (the attempt's runner pod to its end), then the attempt's tool pods deleted;
        not on cancellation (operator shutdown: the restarted operator adopts them)."""
        try:
            outcome = await follow
        except asyncio.CancelledError:
            raise
        except BaseException:
            await self.stop(sub, attempt)
            raise
        await self.stop(sub, attempt)
        return outcome

    async def stop(self, sub: Submission, attempt: int) -> None:
        """Delete the attempt's tool pods and token Secret (no GPU tool: nothing to do)."""
        names = pod_tools(sub)
        if not names:
            return
        namespace = sub.request.namespace
        for index in range(len(names)):
            await kube.delete(kube.core_path(namespace, "pods", tool_pod_name(sub.name, attempt, index)))
        await kube.delete(kube.core_path(namespace, "secrets", tokens_secret_name(sub.name, attempt)))

    async def discard_unstarted(self, sub: Submission, latest: int) -> int:
        """After an operator restart: the tool pods of an attempt whose runner pod was never made
        (the operator stopped while they started) are deleted with its Secret, whose token it no
        longer knows; the attempt's number, so the next attempt takes a new one (else `latest`)."""
        if not pod_tools(sub):
            return latest
        namespace = sub.request.namespace
        selector = f"{EXECUTION_LABEL}%3D{sub.name},{TOOL_POD_LABEL}"
        listed = await kube.request("GET", kube.core_path(namespace, "pods") + f"?labelSelector={selector}")
        unstarted = set()
        for pod in (listed or {}).get("items") or []:
            label = pod["metadata"].get("labels", {}).get(ATTEMPT_LABEL, "")
            if not label.isdigit() or int(label) <= latest:
                continue
            ours = {want["metadata"]["name"]: want for want in self.pods(sub, int(label)).values()}
            want = ours.get(pod["metadata"]["name"])
            if want is not None and not_ours(pod, want) is None:  # a stranger's is left (its name: a conflict)
                unstarted.add(int(label))
        for attempt in sorted(unstarted):
            await self.stop(sub, attempt)
        return max(unstarted, default=latest)
