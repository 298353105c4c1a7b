"""What a run's pods look like, and how the operator knows they are its own (the Kubernetes
executor's objects; `kubernetes` drives the attempts, `tool_pods` a GPU tool's pods):

    pod <execution>-<attempt>   owned by the AgentRun (garbage-collected with it), restartPolicy
                                Never, the run's image (or the chart's runtime image) running
                                `python -m tether exec /etc/tether/request/request.json --store URL`
    ConfigMap <execution>-<h>   the exec request (the spec and its AgentTools; no secret values),
                                h: 10 hex digits of its sha256

With `spec.standby` every runner pod of the run waits at its imports (`tether exec --standby
/etc/tether/standby/go`, a downward API file of the pod's `tether.dev/go` annotation) until that
annotation holds the time it was told to go: an attempt's pod is created with it set; the next
attempt's pod (its standby) is created beside it with it empty, without activeDeadlineSeconds and
preferably on another node (pod anti-affinity on the execution label), and is told to go (the
annotation and its deadline patched) once the attempt before it has ended (`kubernetes`).

A pod carries `resources` as requests/limits (`gpu.count` as `nvidia.com/gpu`), the placement
(spec + GPU node pool), `timeout` as activeDeadlineSeconds, the namespace's runner
ServiceAccount (no token mounted, no RBAC) and a restricted security context. Secrets reach it
only as projected read-only volumes at /var/run/tether/secrets: the operator never reads their
values. The agent's container (`runtime`) mounts `model/apiKey`; each AgentTool with Secrets, an
image or resources runs `tether tool-runner` in a container of its own (`tool-<i>`, a native
sidecar) that alone mounts `tools/<AgentTool>/<ENV>`, reached over a Unix socket in a shared
emptyDir (`$TETHER_TOOL_RUNNERS`); an AgentTool asking for GPUs runs in a pod of its own on its
GPU node pool instead, reached by pod IP with the attempt's token (tool_pods). The store
credentials come from a Secret in the run's own namespace (`tether-store` by default), limited by
the admin to that namespace's store prefix, and are mounted only in the `store` container
(`tether store-proxy`, a native sidecar on the chart's image), which serves the agent's
container its own run's keys over a Unix socket.

Every name here is predictable, so nothing is used because it exists: an object found under one
of them (HTTP 409, or a pod carrying the execution label) must be what the operator would create
— the run as controller owner and every field set equal (`not_ours`) — else the run fails with
OwnedObjectConflict (a stranger's labelled pod is ignored). The pod spec carries the request's
sha256, which the runtime checks against the file it reads.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from tether.api import API_VERSION, Resources
from tether.contract import REQUEST_SHA256_ENV, RUNNERS_ENV, SECRETS_DIR_ENV, TOKENS_ENV, TOOL_MODULES_ENV

from ..conditions import Reason
from .base import EXIT_SUCCEEDED, SecretFile, Submission


@dataclass(frozen=True, kw_only=True)
class PodSettings:
    """The chart's values every pod of a run is made and followed with: built by the
    KubernetesExecutor (its defaults), read by its runner pods and its GPU tools' pods (tool_pods)."""

    runtime_image: str
    service_account: str
    store_secret: str  # the namespace's store Secret ("": the pod's own identity, no store proxy)
    pull_policy: str
    tool_modules: tuple[str, ...] | None  # the chart's tools.allowedModules; None: the image's own
    default_resources: Mapping[str, Mapping[str, str]] | None
    start_grace_seconds: float  # how long a pod may fail to start before the run fails
    resync_seconds: float  # how often a pod is read again without a watch event


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
TOKENS_DIR = "/var/run/tether/tool-tokens"  # the agent's tokens for its GPU tools' pods, one file per tool
TOOL_POD_LABEL = "tether.dev/tool-pod"  # a GPU tool's pod (tool_pods), not an attempt's runner pod
GO_ANNOTATION = "tether.dev/go"  # spec.standby: when the pod was told to run its attempt ("": a standby, waiting)
STANDBY_DIR = "/etc/tether/standby"  # the go annotation as a file (downward API), read by `tether exec --standby`
CONTAINER_SECURITY: dict[str, Any] = {  # every container of a runner pod ("restricted")
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
}
POD_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": RUNNER_UID,
    "runAsGroup": RUNNER_UID,
    "fsGroup": RUNNER_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
NO_EXIT_CODE = -1  # the pod died without a container exit code (evicted, deleted, node lost)


def pod_name(execution: str, attempt: int) -> str:
    return f"{execution}-{attempt}"


def owner_reference(sub: Submission) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AgentRun", "name": sub.request.name, "uid": sub.request.run_id, "controller": True}


def asks_for_gpus(resources: Resources | None) -> bool:
    return resources is not None and resources.gpu is not None and resources.gpu.count > 0


def container_resources(resources: Resources | None, defaults: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, dict[str, Any]]:
    """Requests from `resources`; memory and GPUs are limits too (a GPU cannot be overcommitted,
    memory over the request is what gets a node's pods OOM-killed). CPU is not limited: it only
    throttles. `defaults` (chart value executor.defaultResources) fill what `resources` leaves
    out: its cpu replaces requests.cpu, its memory requests.memory and limits.memory."""
    requests: dict[str, Any] = dict((defaults or {}).get("requests") or {})
    limits: dict[str, Any] = dict((defaults or {}).get("limits") or {})
    if resources is None:
        resources = Resources()
    if resources.cpu:
        requests["cpu"] = resources.cpu
    if resources.memory:
        requests["memory"] = limits["memory"] = resources.memory
    if resources.gpu is not None and resources.gpu.count > 0:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(resources.gpu.count)
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def request_json(sub: Submission) -> str:
    return json.dumps(sub.request.wire())


def request_sha256(sub: Submission) -> str:
    """What the pod's runtime checks its request file against ($TETHER_REQUEST_SHA256)."""
    return hashlib.sha256(request_json(sub).encode()).hexdigest()


def request_configmap_name(sub: Submission) -> str:
    """`<execution>-<10 hex of the request's sha256>`: a request that changed (an AgentTool edited
    while the run waited for approval, then an operator restart) gets its own ConfigMap instead
    of colliding with the first, and each pod names the one it was made for."""
    return f"{sub.name}-{request_sha256(sub)[:10]}"


def request_configmap(sub: Submission) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": request_configmap_name(sub),
            "namespace": sub.request.namespace,
            "labels": {**sub.labels, EXECUTION_LABEL: sub.name},
            "ownerReferences": [owner_reference(sub)],
        },
        "immutable": True,
        "data": {"request.json": request_json(sub)},
    }


def isolated_tools(sub: Submission) -> list[str]:
    """The run's AgentTools that run in a container of their own: those holding Secrets (`env`),
    or with an image or resources of their own, and every MCP server (its runner is the MCP
    client: the agent never holds the server's credentials). The others run in the agent's process."""
    return sorted(
        name for name, tool in sub.request.tools.items() if tool.env or tool.image or tool.resources is not None or tool.mcp is not None
    )


def pod_tools(sub: Submission) -> list[str]:
    """The isolated tools asking for GPUs: each runs in a pod of its own on its GPU node pool
    (tool_pods), not beside the agent, whose pod would have to go to that node."""
    return [name for name in isolated_tools(sub) if asks_for_gpus(sub.request.tools[name].resources)]


def tokens_secret_name(execution: str, attempt: int) -> str:
    return f"{execution}-{attempt}-tools"


def _secrets_volume(name: str, files: list[SecretFile]) -> dict[str, Any]:
    sources = [{"secret": {"name": f.secret, "items": [{"key": f.key, "path": f.path}]}} for f in files]
    return {"name": name, "projected": {"defaultMode": 0o440, "sources": sources}}


def tool_container(sub: Submission, index: int, name: str, settings: PodSettings) -> tuple[dict[str, Any], list[dict[str, Any]]]:
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
    env: list[dict[str, Any]] = [{"name": "HOME", "value": "/tmp"}, {"name": REQUEST_SHA256_ENV, "value": request_sha256(sub)}]
    files = [f for f in sub.secret_files if f.path.startswith(f"tools/{name}/")]
    if files:
        volumes.append(_secrets_volume(f"tool-{index}-secrets", files))
        mounts.append({"name": f"tool-{index}-secrets", "mountPath": SECRETS_DIR, "readOnly": True})
        env.append({"name": SECRETS_DIR_ENV, "value": SECRETS_DIR})
    if settings.tool_modules is not None:
        env.append({"name": TOOL_MODULES_ENV, "value": ",".join(settings.tool_modules)})
    container: dict[str, Any] = {
        "name": f"tool-{index}",
        "image": tool.image or sub.request.spec.image or settings.runtime_image,  # else the run's
        "imagePullPolicy": settings.pull_policy,
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


def store_proxy_container(sub: Submission, settings: PodSettings) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`tether store-proxy`: the only container with the namespace's store credentials, serving
    the run's own keys to the agent's container (`tether.stores.proxy`). The chart's runtime
    image, never the run's: it holds the credentials."""
    container: dict[str, Any] = {
        "name": "store",
        "image": settings.runtime_image,
        "imagePullPolicy": settings.pull_policy,
        "restartPolicy": "Always",
        "command": [*PROXY_COMMAND, "--request", f"{REQUEST_DIR}/request.json", "--store", sub.store_url, "--socket", STORE_SOCKET],
        "workingDir": "/tmp",
        "env": [{"name": "HOME", "value": "/tmp"}, {"name": REQUEST_SHA256_ENV, "value": request_sha256(sub)}]
        + [
            {"name": var, "valueFrom": {"secretKeyRef": {"name": settings.store_secret, "key": var}}}
            for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
        ],
        "volumeMounts": [
            {"name": "store-tmp", "mountPath": "/tmp"},
            {"name": "store-socket", "mountPath": STORE_DIR},
            {"name": "request", "mountPath": REQUEST_DIR, "readOnly": True},
        ],
        "securityContext": dict(CONTAINER_SECURITY),
        # No startupProbe: the agent's container starts beside it rather than once it listens (its
        # start and the probe's 1 s period were on the way to the first model call) and waits for
        # the socket at its first store operation (ProxyStore: up to 30 s), after its own imports.
    }
    return container, [{"name": "store-tmp", "emptyDir": {}}, {"name": "store-socket", "emptyDir": {}}]


def runner_pod(
    sub: Submission, attempt: int, settings: PodSettings, endpoints: Mapping[str, str] | None = None, waits: bool = False
) -> dict[str, Any]:
    """The pod of one attempt (a pure function of the submission, the addresses of its GPU tools'
    pods, `endpoints`, and `waits`: tests compare it exactly). `waits` (every pod of a spec.standby
    run; the next attempt's pod started beside one being deleted): it can wait at its imports for
    its go annotation, and its deadline is set when it is told to go."""
    spec = sub.request.spec
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": "/tmp"},  # the root filesystem is read-only
        {"name": SECRETS_DIR_ENV, "value": SECRETS_DIR},
        {"name": REQUEST_SHA256_ENV, "value": request_sha256(sub)},  # the request file must match
    ]
    if settings.tool_modules is not None:  # the chart's tools.allowedModules; else the image's own tools
        env.append({"name": TOOL_MODULES_ENV, "value": ",".join(settings.tool_modules)})
    env += [{"name": k, "value": v} for k, v in sorted(sub.env.items())]  # e.g. the agent allowlist
    volumes: list[dict[str, Any]] = [
        {"name": "tmp", "emptyDir": {}},
        {"name": "work", "emptyDir": {}},
        {"name": "request", "configMap": {"name": request_configmap_name(sub)}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "work", "mountPath": WORK_DIR},
        {"name": "request", "mountPath": REQUEST_DIR, "readOnly": True},
    ]
    sidecars: list[dict[str, Any]] = []
    store_url = sub.store_url
    if settings.store_secret:  # the credentials go to the store proxy only; the agent reaches its run's keys
        proxy, own = store_proxy_container(sub, settings)
        sidecars.append(proxy)
        volumes += own
        mounts.append({"name": "store-socket", "mountPath": STORE_DIR})
        store_url = f"tether+unix://{STORE_SOCKET}"
    # (else the pod's own identity, e.g. IRSA, which every container of the pod gets: no proxy)
    apart = isolated_tools(sub)
    isolated = [name for name in apart if name not in pod_tools(sub)]  # sidecars; the others: pods of their own
    for index, name in enumerate(isolated):
        sidecar, own = tool_container(sub, index, name, settings)
        sidecars.append(sidecar)
        volumes += own
    if isolated:
        volumes.append({"name": "tool-sockets", "emptyDir": {}})
        mounts.append({"name": "tool-sockets", "mountPath": TOOLS_DIR})
    if runners := {name: socket_path(i) for i, name in enumerate(isolated)} | dict(endpoints or {}):
        env.append({"name": RUNNERS_ENV, "value": json.dumps(runners, sort_keys=True)})
    if endpoints:  # the tokens of the attempt's tool pods: this container's alone, not its sidecars'
        volumes.append({"name": "tool-tokens", "secret": {"secretName": tokens_secret_name(sub.name, attempt), "defaultMode": 0o440}})
        mounts.append({"name": "tool-tokens", "mountPath": TOKENS_DIR, "readOnly": True})
        env.append({"name": TOKENS_ENV, "value": TOKENS_DIR})
    # The agent's container mounts no Secret of an isolated tool: only the provider key (and any
    # file of a tool that runs in its process, which has none: a tool with Secrets is isolated).
    own_files = [f for f in sub.secret_files if not any(f.path.startswith(f"tools/{name}/") for name in apart)]
    if own_files:
        volumes.append(_secrets_volume("secrets", own_files))
        mounts.append({"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True})
    command = ["python", "-m", "tether", "exec", f"{REQUEST_DIR}/request.json", "--progress", "--store", store_url]
    if spec.standby or waits:  # waits at its imports until its go annotation is set
        volumes.append({"name": "standby", "downwardAPI": {"items": [{"path": "go", "fieldRef": {"fieldPath": GO_FIELD}}]}})
        mounts.append({"name": "standby", "mountPath": STANDBY_DIR, "readOnly": True})
        command += ["--standby", f"{STANDBY_DIR}/go"]
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image or settings.runtime_image,
        "imagePullPolicy": settings.pull_policy,
        # --progress: the pod's log shows each step as it completes (`kubectl logs`, `tether logs` says so).
        "command": command,
        "workingDir": WORK_DIR,  # the same on every attempt: some SDKs put it in the prompt
        "env": env,
        "volumeMounts": mounts,
        "securityContext": dict(CONTAINER_SECURITY),
    }
    if resources := container_resources(spec.resources, settings.default_resources):
        container["resources"] = resources
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",  # a new attempt is a new pod, counted against retries
        "serviceAccountName": settings.service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": dict(POD_SECURITY),
        "containers": [container],
        "volumes": volumes,
    }
    if spec.standby:
        # Preferably not on the node of the run's other pods: a lost node takes one of them only.
        term = {"labelSelector": {"matchLabels": {EXECUTION_LABEL: sub.name}}, "topologyKey": "kubernetes.io/hostname"}
        pod_spec["affinity"] = {
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]}
        }
    if not (spec.standby or waits):  # else the deadline is set when the pod is told to go (it may wait longer)
        pod_spec["activeDeadlineSeconds"] = active_deadline(sub.timeout_seconds)
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
            "ownerReferences": [owner_reference(sub)],
        },
        "spec": pod_spec,
    }


GO_FIELD = f"metadata.annotations['{GO_ANNOTATION}']"


def active_deadline(timeout_seconds: float, waited: float = 0.0) -> int:
    """activeDeadlineSeconds of an attempt's pod (counted by the kubelet from the pod's start; a
    standby's includes the time it waited)."""
    return max(1, math.ceil(timeout_seconds + waited))


def with_go(pod: dict[str, Any], go: str, timeout_seconds: float | None = None) -> dict[str, Any]:
    """`pod` (a waiting one's: `runner_pod(waits=True)` or a spec.standby run's) as created: told to go at `go` (epoch seconds) with the
    attempt's deadline, or a standby (go "", no deadline)."""
    meta = pod["metadata"]
    created = {**pod, "metadata": {**meta, "annotations": {**meta.get("annotations", {}), GO_ANNOTATION: go}}}
    if timeout_seconds is not None:
        created["spec"] = {**pod["spec"], "activeDeadlineSeconds": active_deadline(timeout_seconds)}
    return created


def waiting_standby(pod: Mapping[str, Any]) -> bool:
    """A standby not yet told to go (whatever its phase)."""
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(GO_ANNOTATION) == ""


NO_SIDECARS = (
    "the apiserver dropped restartPolicy: Always of the tool runner containers: AgentTools with Secrets, "
    "an image or resources need native sidecar containers (Kubernetes >= 1.29 with SidecarContainers enabled; GA in 1.33)"
)


def sidecars_kept(pod: Mapping[str, Any]) -> bool:
    return all(c.get("restartPolicy") == "Always" for c in (pod.get("spec") or {}).get("initContainers") or [])


def pod_outcome(pod: Mapping[str, Any], timeout_seconds: float) -> tuple[int, str] | None:
    """(exit code, what happened) of a finished pod; None while it runs. Deaths without an exit
    code (eviction, node lost) are `NO_EXIT_CODE`: recoverable."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase == "Succeeded":
        return EXIT_SUCCEEDED, "the runtime finished"
    if phase != "Failed":
        return None
    if status.get("reason") == "DeadlineExceeded":
        return NO_EXIT_CODE, f"timed out after {timeout_seconds:g}s"
    terminated: dict[str, Any] = {}
    for c in status.get("containerStatuses") or []:
        if c.get("name") == CONTAINER:
            terminated = (c.get("state") or {}).get("terminated") or (c.get("lastState") or {}).get("terminated") or {}
    code = terminated.get("exitCode")
    if not isinstance(code, int):
        why = status.get("reason") or "failed"
        return NO_EXIT_CODE, f"pod {why}" + (f": {status['message']}" if status.get("message") else "")
    reason = terminated.get("reason")
    return code, f"exit code {code}" + (f" ({reason})" if reason and reason not in ("Error", "Completed") else "")


class RunFailure(Exception):
    """The run cannot go on, for a reason the condition names (terminal: not an attempt)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


_MISSING = object()
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$")
_SUFFIX = {"n": "1e-9", "u": "1e-6", "m": "1e-3", "k": "1e3", "M": "1e6", "G": "1e9", "T": "1e12", "P": "1e15", "E": "1e18"}
_SUFFIX |= {f"{p}i": str(1024 ** (i + 1)) for i, p in enumerate("KMGTPE")}


def _quantity(text: Any) -> Decimal | None:
    match = _QUANTITY.match(text) if isinstance(text, str) else None
    if match is None:
        return None
    number, suffix = match.groups()
    try:
        if suffix and suffix[0] in "eE":
            return Decimal(number + suffix)
        return Decimal(number) * Decimal(_SUFFIX[suffix] if suffix else 1)
    except InvalidOperation:
        return None


def differences(actual: Any, expected: Any, path: str = "") -> list[str]:
    """The fields `expected` sets that `actual` does not have equal: dicts key by key (keys only
    in `actual` are the apiserver's defaults), lists element by element and of equal length,
    resource quantities by value (the apiserver rewrites `0.5` as `500m`)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [path or "."]
        return [d for k, v in expected.items() for d in differences(actual.get(k, _MISSING), v, f"{path}.{k}")]
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [path]
        return [d for i, (a, e) in enumerate(zip(actual, expected, strict=True)) for d in differences(a, e, f"{path}[{i}]")]
    if actual == expected:
        return []
    if ".resources." in path and _quantity(expected) is not None and _quantity(actual) == _quantity(expected):
        return []
    return [path]


def not_ours(obj: Mapping[str, Any], expected: dict[str, Any]) -> str | None:
    """Why `obj` is not the object the operator creates as `expected`, or None if it is: the
    owner (the run's uid, controller) and every field set are equal. Anyone who may create the
    kind may set an ownerReference, hence the content."""
    seen = json.loads(json.dumps(obj))
    if expected.get("kind") == "Pod":
        # the DefaultTolerationSeconds admission plugin adds its own not-ready/unreachable ones
        ours = {t.get("key") for t in expected["spec"].get("tolerations") or []}
        spec = seen.get("spec") or {}
        kept = [
            t for t in spec.get("tolerations") or [] if t.get("key") in ours or not str(t.get("key", "")).startswith("node.kubernetes.io/")
        ]
        spec.pop("tolerations", None)
        if kept:
            spec["tolerations"] = kept
    problems = differences(seen, {k: v for k, v in expected.items() if k not in ("apiVersion", "kind")})  # lists' items lack them
    if not problems:
        return None
    owner = "metadata.ownerReferences" if any(p.startswith(".metadata.ownerReferences") for p in problems) else ""
    fields = ", ".join(p.lstrip(".") for p in problems[:5]) + (", ..." if len(problems) > 5 else "")
    return "it is not owned by this AgentRun" if owner else f"its {fields} differ from what the operator creates"


def conflict(kind: str, namespace: str, name: str, why: str) -> RunFailure:
    return RunFailure(
        Reason.OWNED_OBJECT_CONFLICT,
        f"{kind} {namespace}/{name} exists and is not the operator's ({why}): it was not used; delete it and create the AgentRun again",
    )


def pod_attempt(pod: Mapping[str, Any]) -> int | None:
    label = ((pod.get("metadata") or {}).get("labels") or {}).get(ATTEMPT_LABEL, "")
    return int(label) if label.isdigit() and int(label) > 0 else None


def runner_account(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "tether"}},
        "automountServiceAccountToken": False,
    }


# Container waiting reasons after which a pod will not start by itself (a wrong image, a missing
# Secret); ContainerCreating and a pull in progress are not among them.
_WAITING = {
    "ImagePullBackOff": Reason.IMAGE_PULL_BACK_OFF,
    "ErrImagePull": Reason.IMAGE_PULL_BACK_OFF,
    "InvalidImageName": Reason.IMAGE_PULL_BACK_OFF,
    "ErrImageNeverPull": Reason.IMAGE_PULL_BACK_OFF,
    "CreateContainerConfigError": Reason.CREATE_CONTAINER_CONFIG_ERROR,
}


def start_problem(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(condition reason, the kubelet's or scheduler's message) of a pending pod that cannot
    start as it is, or None."""
    status = pod.get("status") or {}
    # The sidecars (store proxy, tool runners) first: the agent's container waits for them.
    for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (c.get("state") or {}).get("waiting") or {}
        reason = _WAITING.get(waiting.get("reason", ""))
        if reason is not None:
            message = waiting.get("message") or ""
            if reason == Reason.CREATE_CONTAINER_CONFIG_ERROR and "secret" in message.lower():
                reason = Reason.MISSING_SECRET  # e.g. the store Secret or one of its keys
            return reason, f"{waiting['reason']}: {message}".rstrip(": ")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            return Reason.UNSCHEDULABLE, f"Unschedulable: {cond.get('message') or ''}".rstrip(": ")
    return None


def pod_age(pod: Mapping[str, Any]) -> float:
    """Seconds since the pod's creation (0 for one without a creationTimestamp), or since a
    standby was told to go (its attempt's timeout counts from then)."""
    go = ((pod.get("metadata") or {}).get("annotations") or {}).get(GO_ANNOTATION) or ""
    with contextlib.suppress(ValueError):
        if go:
            return time.time() - float(go)
    return pod_age_since_creation(pod)


def pod_age_since_creation(pod: Mapping[str, Any]) -> float:
    now = time.time()
    stamp = (pod.get("metadata") or {}).get("creationTimestamp")
    return now - (datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else now)
