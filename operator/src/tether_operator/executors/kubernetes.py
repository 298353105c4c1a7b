"""The Kubernetes executor: each attempt of a run is one pod, and the operator runs no agent code.

    pod <execution>-<attempt>   owned by the AgentRun (garbage-collected with it), restartPolicy
                                Never, the run's image (or the chart's runtime image) running
                                `python -m tether exec /etc/tether/request/request.json --store URL`
    ConfigMap <execution>       the exec request (the spec and its AgentTools; no secret values)

A pod carries `resources` as requests/limits (`gpu.count` as `nvidia.com/gpu`), the placement
(spec + GPU node pool), `timeout` as activeDeadlineSeconds, the namespace's runner
ServiceAccount (no token mounted, no RBAC) and a restricted security context. Secrets reach it
only as projected read-only volumes at /var/run/tether/secrets: the operator never reads their
values. The agent's container (`runtime`) mounts `model/apiKey`; each AgentTool with Secrets, an
image or resources runs `tether tool-runner` in a container of its own (`tool-<i>`, a native
sidecar) that alone mounts `tools/<AgentTool>/<ENV>`, reached over a Unix socket in a shared
emptyDir (`$TETHER_TOOL_RUNNERS`). The store credentials come from a Secret in the run's own
namespace (`tether-store` by default), limited by the admin to that namespace's store prefix,
and are mounted only in the `store` container (`tether store-proxy`, a native sidecar on the
chart's image), which serves the agent's container its own run's keys over a Unix socket.

The pod's end is the runtime's exit code: 0 succeeded, 2 terminal, 3 suspended (the pod is
deleted: nothing is held while a human decides; `resume` starts the next attempt), anything else
— a crash, OOMKilled, eviction, the deadline, the pod deleted — is recoverable: the next attempt
(a new pod, attempt + 1) replays the journal, while failures <= retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.api import API_VERSION, Resources
from tether.toolrunner import RUNNERS_ENV
from tether.tools import TOOL_MODULES_ENV

from .. import kube
from .base import (
    EXIT_SUCCEEDED,
    EXIT_SUSPENDED,
    EXIT_TERMINAL,
    Capability,
    ExecutionState,
    ExecutionStatus,
    FollowingExecutor,
    SecretFile,
    Submission,
)

log = logging.getLogger(__name__)

EXECUTION_LABEL = "tether.dev/execution"
ATTEMPT_LABEL = "tether.dev/attempt"
CONTAINER = "runtime"
SECRETS_DIR = "/var/run/tether/secrets"
REQUEST_DIR = "/etc/tether/request"
WORK_DIR = "/work"
RUNNER_UID = 65532
GPU_RESOURCE = "nvidia.com/gpu"
RUNNER_COMMAND = ("python", "-m", "tether", "tool-runner")
PROXY_COMMAND = ("python", "-m", "tether", "store-proxy")
STORE_DIR = "/var/run/tether/store"  # the store proxy's socket: an emptyDir the agent shares with it
STORE_SOCKET = f"{STORE_DIR}/store.sock"
TOOLS_DIR = "/var/run/tether/tools"  # the tool runners' sockets: an emptyDir the agent shares with them
CONTAINER_SECURITY: dict[str, Any] = {  # every container of a runner pod ("restricted")
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
}
_NO_EXIT_CODE = -1  # the pod died without a container exit code (evicted, deleted, node lost)
_NOT_DEATHS = (EXIT_SUCCEEDED, EXIT_TERMINAL, EXIT_SUSPENDED)


def pod_name(execution: str, attempt: int) -> str:
    return f"{execution}-{attempt}"


def _owner(sub: Submission) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AgentRun", "name": sub.request.name, "uid": sub.request.run_id, "controller": True}


def container_resources(resources: Resources | None) -> dict[str, dict[str, Any]]:
    """Requests from `resources`; memory and GPUs are limits too (a GPU cannot be overcommitted,
    memory over the request is what gets a node's pods OOM-killed). CPU is not limited: it only
    throttles."""
    if resources is None:
        return {}
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    if resources.cpu:
        requests["cpu"] = resources.cpu
    if resources.memory:
        requests["memory"] = limits["memory"] = resources.memory
    if resources.gpu is not None and resources.gpu.count > 0:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(resources.gpu.count)
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def request_configmap(sub: Submission) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": sub.name,
            "namespace": sub.request.namespace,
            "labels": {**sub.labels, EXECUTION_LABEL: sub.name},
            "ownerReferences": [_owner(sub)],
        },
        "immutable": True,
        "data": {"request.json": json.dumps(sub.request.wire())},
    }


def isolated_tools(sub: Submission) -> list[str]:
    """The run's AgentTools that run in a container of their own: those holding Secrets (`env`),
    or with an image or resources of their own. The others run in the agent's process."""
    return sorted(name for name, tool in sub.request.tools.items() if tool.env or tool.image or tool.resources is not None)


def _secrets_volume(name: str, files: list[SecretFile]) -> dict[str, Any]:
    sources = [{"secret": {"name": f.secret, "items": [{"key": f.key, "path": f.path}]}} for f in files]
    return {"name": name, "projected": {"defaultMode": 0o440, "sources": sources}}


def tool_container(
    sub: Submission, index: int, name: str, *, image: str, pull_policy: str, tool_modules: tuple[str, ...] | None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The tool runner of AgentTool `name` (a native sidecar: an init container that keeps
    running, stopped when the agent's container ends) and the volumes only it mounts: its own
    Secrets, its own /tmp."""
    tool = sub.request.tools[name]
    volumes: list[dict[str, Any]] = [{"name": f"tool-{index}-tmp", "emptyDir": {}}]
    mounts: list[dict[str, Any]] = [
        {"name": f"tool-{index}-tmp", "mountPath": "/tmp"},
        {"name": "tool-sockets", "mountPath": TOOLS_DIR},
        {"name": "request", "mountPath": REQUEST_DIR, "readOnly": True},
    ]
    env: list[dict[str, Any]] = [{"name": "HOME", "value": "/tmp"}]
    files = [f for f in sub.secret_files if f.path.startswith(f"tools/{name}/")]
    if files:
        volumes.append(_secrets_volume(f"tool-{index}-secrets", files))
        mounts.append({"name": f"tool-{index}-secrets", "mountPath": SECRETS_DIR, "readOnly": True})
        env.append({"name": "TETHER_SECRETS_DIR", "value": SECRETS_DIR})
    if tool_modules is not None:
        env.append({"name": TOOL_MODULES_ENV, "value": ",".join(tool_modules)})
    container: dict[str, Any] = {
        "name": f"tool-{index}",
        "image": tool.image or image,  # else the run's
        "imagePullPolicy": pull_policy,
        "restartPolicy": "Always",
        "command": [*RUNNER_COMMAND, "--request", f"{REQUEST_DIR}/request.json", "--tool", name, "--socket", socket_path(index)],
        "workingDir": "/tmp",
        "env": env,
        "volumeMounts": mounts,
        "securityContext": dict(CONTAINER_SECURITY),
        # The agent's container starts once the runner listens (its tool imported: a large
        # library can take a while), not merely once the runner's process started.
        "startupProbe": {
            "exec": {"command": ["python", "-c", LISTENING, socket_path(index)]},
            "periodSeconds": 1,
            "failureThreshold": 600,
        },
    }
    if resources := container_resources(tool.resources):
        container["resources"] = resources
    return container, volumes


LISTENING = "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])"


def socket_path(index: int) -> str:
    return f"{TOOLS_DIR}/{index}.sock"


def store_proxy_container(
    sub: Submission, *, image: str, pull_policy: str, store_secret: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`tether store-proxy`: the only container with the namespace's store credentials, serving
    the run's own keys to the agent's container (`tether.stores.proxy`). The chart's runtime
    image, never the run's: it holds the credentials."""
    container: dict[str, Any] = {
        "name": "store",
        "image": image,
        "imagePullPolicy": pull_policy,
        "restartPolicy": "Always",
        "command": [*PROXY_COMMAND, "--request", f"{REQUEST_DIR}/request.json", "--store", sub.store_url, "--socket", STORE_SOCKET],
        "workingDir": "/tmp",
        "env": [{"name": "HOME", "value": "/tmp"}]
        + [
            {"name": var, "valueFrom": {"secretKeyRef": {"name": store_secret, "key": var}}}
            for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
        ],
        "volumeMounts": [
            {"name": "store-tmp", "mountPath": "/tmp"},
            {"name": "store-socket", "mountPath": STORE_DIR},
            {"name": "request", "mountPath": REQUEST_DIR, "readOnly": True},
        ],
        "securityContext": dict(CONTAINER_SECURITY),
        "startupProbe": {"exec": {"command": ["python", "-c", LISTENING, STORE_SOCKET]}, "periodSeconds": 1, "failureThreshold": 600},
    }
    return container, [{"name": "store-tmp", "emptyDir": {}}, {"name": "store-socket", "emptyDir": {}}]


def runner_pod(
    sub: Submission,
    attempt: int,
    *,
    image: str,
    service_account: str,
    store_secret: str,
    pull_policy: str = "IfNotPresent",
    tool_modules: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """The pod of one attempt (a pure function of the submission: tests compare it exactly)."""
    spec = sub.request.spec
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": "/tmp"},  # the root filesystem is read-only
        {"name": "TETHER_SECRETS_DIR", "value": SECRETS_DIR},
    ]
    if tool_modules is not None:  # the chart's tools.allowedModules; else the image's own tools
        env.append({"name": TOOL_MODULES_ENV, "value": ",".join(tool_modules)})
    volumes: list[dict[str, Any]] = [
        {"name": "tmp", "emptyDir": {}},
        {"name": "work", "emptyDir": {}},
        {"name": "request", "configMap": {"name": sub.name}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "work", "mountPath": WORK_DIR},
        {"name": "request", "mountPath": REQUEST_DIR, "readOnly": True},
    ]
    sidecars: list[dict[str, Any]] = []
    store_url = sub.store_url
    if store_secret:  # the credentials go to the store proxy only; the agent reaches its run's keys
        proxy, own = store_proxy_container(sub, image=image, pull_policy=pull_policy, store_secret=store_secret)
        sidecars.append(proxy)
        volumes += own
        mounts.append({"name": "store-socket", "mountPath": STORE_DIR})
        store_url = f"tether+unix://{STORE_SOCKET}"
    # (else the pod's own identity, e.g. IRSA, which every container of the pod gets: no proxy)
    isolated = isolated_tools(sub)
    for index, name in enumerate(isolated):
        sidecar, own = tool_container(sub, index, name, image=spec.image or image, pull_policy=pull_policy, tool_modules=tool_modules)
        sidecars.append(sidecar)
        volumes += own
    if isolated:
        volumes.append({"name": "tool-sockets", "emptyDir": {}})
        mounts.append({"name": "tool-sockets", "mountPath": TOOLS_DIR})
        env.append({"name": RUNNERS_ENV, "value": json.dumps({name: socket_path(i) for i, name in enumerate(isolated)}, sort_keys=True)})
    # The agent's container mounts no Secret of an isolated tool: only the provider key (and any
    # file of a tool that runs in its process, which has none: a tool with Secrets is isolated).
    own_files = [f for f in sub.secret_files if not any(f.path.startswith(f"tools/{name}/") for name in isolated)]
    if own_files:
        volumes.append(_secrets_volume("secrets", own_files))
        mounts.append({"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True})
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image or image,
        "imagePullPolicy": pull_policy,
        "command": ["python", "-m", "tether", "exec", f"{REQUEST_DIR}/request.json", "--store", store_url],
        "workingDir": WORK_DIR,  # the same on every attempt: some SDKs put it in the prompt
        "env": env,
        "volumeMounts": mounts,
        "securityContext": dict(CONTAINER_SECURITY),
    }
    if resources := container_resources(spec.resources):
        container["resources"] = resources
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",  # a new attempt is a new pod, counted against retries
        "serviceAccountName": service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "activeDeadlineSeconds": max(1, math.ceil(sub.timeout_seconds)),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUNNER_UID,
            "runAsGroup": RUNNER_UID,
            "fsGroup": RUNNER_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
    }
    if sidecars:
        pod_spec["initContainers"] = sidecars
    if sub.node_selector:
        pod_spec["nodeSelector"] = dict(sub.node_selector)
    if sub.tolerations:
        pod_spec["tolerations"] = list(sub.tolerations)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(sub.name, attempt),
            "namespace": sub.request.namespace,
            "labels": {**sub.labels, EXECUTION_LABEL: sub.name, ATTEMPT_LABEL: str(attempt)},
            "annotations": {"kubectl.kubernetes.io/default-container": CONTAINER},  # `kubectl logs POD`: the agent's
            "ownerReferences": [_owner(sub)],
        },
        "spec": pod_spec,
    }


NO_SIDECARS = (
    "the apiserver dropped restartPolicy: Always of the tool runner containers: AgentTools with Secrets, "
    "an image or resources need native sidecar containers (Kubernetes >= 1.29 with SidecarContainers enabled; GA in 1.33)"
)


def _sidecars_kept(pod: Mapping[str, Any]) -> bool:
    return all(c.get("restartPolicy") == "Always" for c in (pod.get("spec") or {}).get("initContainers") or [])


def pod_outcome(pod: Mapping[str, Any], timeout_seconds: float) -> tuple[int, str] | None:
    """(exit code, what happened) of a finished pod; None while it runs. Deaths without an exit
    code (eviction, node lost) are `_NO_EXIT_CODE`: recoverable."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase == "Succeeded":
        return EXIT_SUCCEEDED, "the runtime finished"
    if phase != "Failed":
        return None
    if status.get("reason") == "DeadlineExceeded":
        return _NO_EXIT_CODE, f"timed out after {timeout_seconds:g}s"
    terminated: dict[str, Any] = {}
    for c in status.get("containerStatuses") or []:
        if c.get("name") == CONTAINER:
            terminated = (c.get("state") or {}).get("terminated") or (c.get("lastState") or {}).get("terminated") or {}
    code = terminated.get("exitCode")
    if not isinstance(code, int):
        why = status.get("reason") or "failed"
        return _NO_EXIT_CODE, f"pod {why}" + (f": {status['message']}" if status.get("message") else "")
    reason = terminated.get("reason")
    return code, f"exit code {code}" + (f" ({reason})" if reason and reason not in ("Error", "Completed") else "")


@dataclass
class _Execution:
    sub: Submission
    state: ExecutionState = ExecutionState.QUEUED
    attempts: int = 0
    failures: int = 0
    exit_code: int | None = None
    message: str = ""
    task: asyncio.Task[None] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    pod_changed: asyncio.Event = field(default_factory=asyncio.Event)

    def status(self) -> ExecutionStatus:
        return ExecutionStatus(self.sub.name, self.state, self.attempts, self.failures, self.exit_code, self.message)

    def set(self, state: ExecutionState, message: str = "") -> None:
        self.state, self.message = state, message
        self.changed.set()


class KubernetesExecutor(FollowingExecutor[_Execution]):
    kind = "kubernetes"
    supports = frozenset(
        {
            Capability.IMAGE,
            Capability.RESOURCES,
            Capability.NODE_SELECTOR,
            Capability.TOLERATIONS,
            Capability.TOOL_IMAGE,
            Capability.TOOL_RESOURCES,
        }
    )
    refusal_hint = (
        "a tool runs in a container of the run's pod, on the agent's node: a GPU tool would need a pod of its own, "
        "which this executor does not make; give the run the GPU (spec.resources) or use the flyte executor"
    )
    reads_secrets = False

    def __init__(
        self,
        *,
        runtime_image: str,
        service_account: str = "tether-runner",
        store_secret: str = "tether-store",
        pull_policy: str = "IfNotPresent",
        resync_seconds: float = 10.0,
        retry_backoff: float = 0.5,
        tool_modules: tuple[str, ...] | None = None,
    ) -> None:
        self.runtime_image = runtime_image
        self.tool_modules = tool_modules
        self.service_account = service_account
        self.store_secret = store_secret
        self.pull_policy = pull_policy
        self.resync_seconds = resync_seconds
        self.retry_backoff = retry_backoff
        self._runs: dict[str, _Execution] = {}
        self._accounts: set[str] = set()  # namespaces whose runner ServiceAccount exists

    # --------------------------------------------------------------------------- interface

    async def submit(self, submission: Submission) -> ExecutionStatus:
        run = self._runs.get(submission.name)
        if run is None:
            run = _Execution(submission, attempts=submission.attempts, failures=submission.failures)
            self._runs[submission.name] = run
            if submission.suspended:
                run.set(ExecutionState.SUSPENDED, "adopted while awaiting approval")
            else:
                self._start(run, adopt=True)
        return run.status()

    async def status(self, name: str) -> ExecutionStatus | None:
        run = self._runs.get(name)
        return None if run is None else run.status()

    async def resume(self, name: str) -> None:
        run = self._runs.get(name)
        if run is not None and run.state is ExecutionState.SUSPENDED:
            self._start(run, adopt=False)

    async def abort(self, name: str, namespace: str | None = None) -> None:
        run = self._runs.pop(name, None)
        if run is not None:
            namespace = namespace or run.sub.request.namespace
            if run.task is not None:
                run.task.cancel()
                with contextlib.suppress(BaseException):
                    await run.task
            run.set(ExecutionState.ABORTED, "aborted")
        if namespace:
            for pod in await self._pods(namespace, name):
                await kube.delete(kube.core_path(namespace, "pods", pod["metadata"]["name"]))
            await kube.delete(kube.core_path(namespace, "configmaps", name))

    async def wait(self, name: str, timeout: float) -> None:
        run = self._runs.get(name)
        if run is None:
            await asyncio.sleep(timeout)
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(run.changed.wait(), timeout)
        run.changed.clear()

    def observe(self, event: Mapping[str, Any]) -> None:
        """A watch event of a runner pod: wake the execution it belongs to."""
        labels = ((event.get("object") or {}).get("metadata") or {}).get("labels") or {}
        run = self._runs.get(labels.get(EXECUTION_LABEL, ""))
        if run is not None:
            run.pod_changed.set()

    async def close(self) -> None:
        """Operator shutdown: stop following; the pods keep running and are adopted on restart."""
        for run in self._runs.values():
            if run.task is not None:
                run.task.cancel()
        self._runs.clear()

    # ----------------------------------------------------------------------------- driving

    def _start(self, run: _Execution, adopt: bool) -> None:
        run.set(ExecutionState.QUEUED, "creating the runner pod")
        run.task = asyncio.create_task(self._drive(run, adopt), name=f"tether-pod-{run.sub.name}")

    async def _pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        listed = await kube.request("GET", kube.core_path(namespace, "pods") + f"?labelSelector={EXECUTION_LABEL}%3D{name}")
        return list((listed or {}).get("items") or [])

    async def _prepare(self, sub: Submission) -> None:
        """The namespace's runner ServiceAccount (no token, no RBAC) and the request ConfigMap."""
        namespace = sub.request.namespace
        if namespace not in self._accounts:
            path = kube.core_path(namespace, "serviceaccounts", self.service_account)
            if await kube.request("GET", path) is None:
                account = {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": self.service_account, "labels": {"app.kubernetes.io/part-of": "tether"}},
                    "automountServiceAccountToken": False,
                }
                await kube.create(kube.core_path(namespace, "serviceaccounts"), account)
            self._accounts.add(namespace)
        await kube.create(kube.core_path(namespace, "configmaps"), request_configmap(sub))

    async def _drive(self, run: _Execution, adopt: bool) -> None:
        """Attempts until success, terminal failure, suspension or retries exhausted."""
        sub = run.sub
        namespace = sub.request.namespace
        try:
            await self._prepare(sub)
            pods = {int(p["metadata"]["labels"].get(ATTEMPT_LABEL, 0)): p for p in await self._pods(namespace, sub.name)}
            latest = max(pods, default=0)
            # After an operator restart the newest pod is the current attempt, whatever status says.
            current = latest if adopt and latest and latest >= run.attempts else 0
            run.attempts = max(run.attempts, latest)
            # Earlier attempts that died (before a restart) still count against retries.
            outcomes = [pod_outcome(p, sub.timeout_seconds) for n, p in pods.items() if n != current]
            run.failures = max(run.failures, sum(1 for o in outcomes if o is not None and o[0] not in _NOT_DEATHS))
            while True:
                if not current:
                    current = run.attempts + 1
                    pod = runner_pod(
                        sub,
                        current,
                        image=self.runtime_image,
                        service_account=self.service_account,
                        store_secret=self.store_secret,
                        pull_policy=self.pull_policy,
                        tool_modules=self.tool_modules,
                    )
                    created = await kube.create(kube.core_path(namespace, "pods"), pod)
                    run.attempts = current
                    if created is not None and not _sidecars_kept(created):
                        # An apiserver without native sidecars (SidecarContainers, on since 1.29,
                        # GA in 1.33) drops their restartPolicy: the tool runner would block the
                        # agent's container for ever.
                        await kube.delete(kube.core_path(namespace, "pods", pod_name(sub.name, current)))
                        return run.set(ExecutionState.FAILED, f"the runner pod was refused: {NO_SIDECARS}")
                code, died = await self._follow(run, pod_name(sub.name, current))
                current = 0
                run.exit_code = code
                if code == EXIT_SUCCEEDED:
                    return run.set(ExecutionState.SUCCEEDED, died)
                if code == EXIT_SUSPENDED:  # nothing is held while a human decides
                    await kube.delete(kube.core_path(namespace, "pods", pod_name(sub.name, run.attempts)))
                    return run.set(ExecutionState.SUSPENDED, "waiting for an approval")
                if code == EXIT_TERMINAL:
                    return run.set(ExecutionState.FAILED, "terminal failure (exit code 2)")
                run.failures += 1
                if run.failures > sub.retries:
                    return run.set(ExecutionState.FAILED, f"attempt {run.attempts} {died}; retries exhausted ({sub.retries})")
                log.info("execution %s attempt %d %s; retrying", sub.name, run.attempts, died)
                run.set(ExecutionState.QUEUED, f"attempt {run.attempts} {died}; retrying")
                await asyncio.sleep(min(self.retry_backoff * 2 ** (run.failures - 1), 10.0))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if isinstance(exc, kube.KubeError) and exc.status in (400, 422):  # an invalid pod stays invalid
                return run.set(ExecutionState.FAILED, f"the runner pod was refused: {exc}")
            # the apiserver unreachable, a quota, an admission webhook: say so, try again later
            log.warning("execution %s: %s", sub.name, exc)
            run.set(ExecutionState.QUEUED, f"cannot create the runner pod: {exc}")
            await asyncio.sleep(self.resync_seconds)
            self._start(run, adopt=True)

    async def _follow(self, run: _Execution, name: str) -> tuple[int, str]:
        """Wait for the attempt's pod to end; (exit code, what happened)."""
        path = kube.core_path(run.sub.request.namespace, "pods", name)
        attempt = f"attempt {run.attempts}"
        while True:
            run.pod_changed.clear()
            pod = await kube.request("GET", path)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                return _NO_EXIT_CODE, f"pod {name} was deleted"
            outcome = pod_outcome(pod, run.sub.timeout_seconds)
            if outcome is not None:
                return outcome
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            state = ExecutionState.RUNNING if phase == "Running" else ExecutionState.QUEUED
            message = f"{attempt}: pod {name} {phase}"
            if (state, message) != (run.state, run.message):
                run.set(state, message)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(run.pod_changed.wait(), self.resync_seconds)
