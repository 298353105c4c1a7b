"""Warm pods: runner pods started before their run, waiting at their imports, that a run claims
(chart value `executor.warmPods`: how many wait per shape; 0, the default, keeps none).

A runner pod pays its start-up before its first model call: the image's interpreter, the
runtime's and the framework's imports (benchmarks/pod_start.py: most of apply → first model call
on kind). A warm pod has paid them: it is the pod a run would get (`runner_pod`), without what
belongs to one run, and waits (`tether exec --warm-pod FRAMEWORK`) until its request file holds
the run's request. A run claims one in a single patch: its labels, the run as controller owner,
the request annotation (a downward API file in the pod: the run's request, which the pod reads
instead of the request ConfigMap) and the attempt's deadline, with the pod's resourceVersion, so
that two runs never claim one pod. After a claim (or a create) the operator starts the missing
warm pods of that shape, for the next run. A warm pod serves one attempt, never two runs.

The shape: everything of the pod that is not the run's identity — namespace, image, framework,
resources, placement, environment, the Secret files it mounts (the provider key), the store
proxy — hashed into the `tether.dev/warm` label. Only a run whose pod would be exactly this one
claims it, so a warm pod holds only Secrets that a run of its shape, admitted with its creator's
rights, mounted before it (and that the next such run is admitted for again). Not warm: runs with
`spec.standby` (they have their own), a GPU, an AgentTool in a container or pod of its own (their
runners read the request at their start), or a request too large for an annotation.

A warm pod carries the `tether.dev/execution` label empty, so the runner NetworkPolicy selects
it from its start. It exits by itself after `idleSeconds` unclaimed (exit code 130); the next run
in its namespace deletes ended warm pods (nothing owns one), and none is claimed within
`CLAIM_MARGIN_SECONDS` of its idle end. Whoever
may `patch pods` in the namespace can rewrite a warm pod's request before it is read, as they can
replace a running pod's container images: `patch pods` is what Kubernetes makes it (operator/README.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from tether.contract import REQUEST_SHA256_ENV

from .. import kube
from .base import Submission
from .pods import (
    ATTEMPT_LABEL,
    EXECUTION_LABEL,
    GO_ANNOTATION,
    PodSettings,
    active_deadline,
    asks_for_gpus,
    isolated_tools,
    not_ours,
    owner_reference,
    pod_age_since_creation,
    pod_outcome,
    request_json,
    runner_pod,
)

log = logging.getLogger(__name__)

WARM_LABEL = "tether.dev/warm"  # a waiting warm pod's shape (removed when a run claims it)
WARM_PREFIX = "tether-warm-"  # generateName of warm pods: a claimed runner pod is named so
REQUEST_ANNOTATION = "tether.dev/request"  # a warm pod's request ("" until claimed), read as a file
#: The request travels in an annotation (all of a pod's annotations: 256 KiB at most).
MAX_REQUEST_BYTES = 128 * 1024
#: A warm pod this close to its idle end is not claimed: it may exit before it reads the request.
CLAIM_MARGIN_SECONDS = 60.0


def warm_eligible(sub: Submission) -> bool:
    """Whether a run's attempts may go to warm pods (see the module's docstring)."""
    spec = sub.request.spec
    return (
        not spec.standby
        and not asks_for_gpus(spec.resources)
        and not isolated_tools(sub)
        and len(request_json(sub).encode()) <= MAX_REQUEST_BYTES
    )


def warm_pod(sub: Submission, settings: PodSettings, idle_seconds: float) -> dict[str, Any]:
    """The warm pod of `sub`'s shape as created (a pure function: tests compare it exactly)."""
    pod = runner_pod(sub, 1, settings)
    spec = pod["spec"]
    spec.pop("activeDeadlineSeconds", None)  # set at the claim: the kubelet counts it from the start
    request = {"path": "request.json", "fieldRef": {"fieldPath": f"metadata.annotations['{REQUEST_ANNOTATION}']"}}
    spec["volumes"] = [{"name": "request", "downwardAPI": {"items": [request]}} if v["name"] == "request" else v for v in spec["volumes"]]
    for container in [*spec["containers"], *spec.get("initContainers", [])]:
        container["env"] = [e for e in container["env"] if e["name"] != REQUEST_SHA256_ENV]  # the run's: unknown yet
        if container["name"] == "store":
            container["command"] = [*container["command"], "--wait-for-request"]
    spec["containers"][0]["command"] += ["--warm-pod", sub.request.spec.framework, "--idle-seconds", f"{idle_seconds:g}"]
    shape = hashlib.sha256(json.dumps(pod["spec"], sort_keys=True).encode() + sub.request.namespace.encode()).hexdigest()[:10]
    pod["metadata"] = {
        "generateName": WARM_PREFIX,
        "namespace": sub.request.namespace,
        "labels": {WARM_LABEL: shape, EXECUTION_LABEL: ""},
        "annotations": {**pod["metadata"]["annotations"], REQUEST_ANNOTATION: ""},
    }
    return pod


def claimed(sub: Submission, attempt: int, warm: Mapping[str, Any]) -> dict[str, Any]:
    """A warm pod of `sub`'s shape once claimed for `attempt`: the metadata a claim sets over
    `warm` (as created); what `not_ours` compares a claimed pod with (its deadline aside, set from
    its age at the claim)."""
    meta = warm["metadata"]
    labels = {k: v for k, v in meta["labels"].items() if k != WARM_LABEL}
    annotations = {**meta["annotations"], REQUEST_ANNOTATION: request_json(sub)}
    return {
        **warm,
        "metadata": {
            **meta,
            "labels": {**labels, **sub.labels, EXECUTION_LABEL: sub.name, ATTEMPT_LABEL: str(attempt)},
            "annotations": annotations,
            "ownerReferences": [owner_reference(sub)],
        },
    }


def is_warm(pod: Mapping[str, Any]) -> bool:
    """A runner pod that began as a warm pod (its name says so: names never change)."""
    return str((pod.get("metadata") or {}).get("name", "")).startswith(WARM_PREFIX)


class WarmPods:
    """The warm pods of the Kubernetes executor: claimed by runs, started again after a claim."""

    def __init__(self, settings: PodSettings, count: int, idle_seconds: float) -> None:
        self.settings = settings
        self.count = count
        self.idle_seconds = idle_seconds
        self._filling: dict[str, asyncio.Task[None]] = {}  # one refill per shape at a time

    def serves(self, sub: Submission) -> bool:
        return self.count > 0 and warm_eligible(sub)

    def expected(self, sub: Submission, attempt: int, pod: Mapping[str, Any]) -> dict[str, Any]:
        """What a claimed warm pod of `sub` named like `pod` must be (`not_ours`)."""
        ours = claimed(sub, attempt, warm_pod(sub, self.settings, self.idle_seconds))
        return {**ours, "metadata": {**ours["metadata"], "name": pod["metadata"]["name"]}}

    async def claim(self, sub: Submission, attempt: int) -> dict[str, Any] | None:
        """A waiting warm pod of `sub`'s shape, claimed for `attempt` (the patched pod), or None
        (none waits: the caller creates the attempt's pod). Then the shape is filled again."""
        warm = warm_pod(sub, self.settings, self.idle_seconds)
        try:
            return await self._claim(sub, attempt, warm)
        finally:
            self._fill_in_background(warm, sub.timeout_seconds)

    async def _claim(self, sub: Submission, attempt: int, warm: dict[str, Any]) -> dict[str, Any] | None:
        for pod in await self._waiting(warm, sub.timeout_seconds):
            meta = pod["metadata"]
            if why := not_ours(pod, {**warm, "metadata": {**warm["metadata"], "name": meta["name"]}}):
                log.warning(
                    "warm pod %s/%s carries the label but is not the operator's (%s): not used", sub.request.namespace, meta["name"], why
                )
                continue
            ours = claimed(sub, attempt, warm)["metadata"]
            patch = {
                # resourceVersion: refused (409) if another run claimed it, or its deletion began, since it was read
                "metadata": {
                    "resourceVersion": meta["resourceVersion"],
                    "labels": {**ours["labels"], WARM_LABEL: None},
                    "annotations": {REQUEST_ANNOTATION: ours["annotations"][REQUEST_ANNOTATION], GO_ANNOTATION: f"{time.time():.3f}"},
                    "ownerReferences": ours["ownerReferences"],
                },
                # the kubelet counts the deadline from the pod's start: add the time it waited
                "spec": {"activeDeadlineSeconds": active_deadline(sub.timeout_seconds, pod_age_since_creation(pod))},
            }
            path = kube.core_path(sub.request.namespace, "pods", meta["name"])
            try:
                patched: dict[str, Any] | None = await kube.request("PATCH", path, patch, content_type="application/merge-patch+json")
            except kube.KubeError as exc:
                if exc.status != 409:
                    raise
                continue
            if patched is not None:  # (None: it is gone)
                return patched
        return None

    async def _waiting(self, warm: Mapping[str, Any], timeout_seconds: float) -> list[dict[str, Any]]:
        """The shape's warm pods that can be claimed, running ones first, oldest first. The
        namespace's ended warm pods (idle, evicted), of any shape, and those near their idle end
        are deleted: nothing owns a warm pod, so nothing else would."""
        namespace, shape = warm["metadata"]["namespace"], warm["metadata"]["labels"][WARM_LABEL]
        listed = await kube.request("GET", kube.core_path(namespace, "pods") + f"?labelSelector={WARM_LABEL}")
        usable = []
        for pod in (listed or {}).get("items") or []:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or not is_warm(pod):
                continue
            if pod_outcome(pod, timeout_seconds) is not None or pod_age_since_creation(pod) > self.idle_seconds - CLAIM_MARGIN_SECONDS:
                await kube.delete(kube.core_path(namespace, "pods", meta["name"]), uid=meta.get("uid"))
            elif meta["labels"].get(WARM_LABEL) == shape:
                usable.append(pod)
        return sorted(usable, key=lambda p: ((p.get("status") or {}).get("phase") != "Running", p["metadata"].get("creationTimestamp", "")))

    def _fill_in_background(self, warm: dict[str, Any], timeout_seconds: float) -> None:
        """Start the missing warm pods of `warm`'s shape (no run waits for it; one at a time a shape)."""
        shape = f"{warm['metadata']['namespace']}/{warm['metadata']['labels'][WARM_LABEL]}"
        if shape in self._filling and not self._filling[shape].done():
            return
        self._filling[shape] = asyncio.create_task(self._fill(warm, timeout_seconds), name=f"warm pods {shape}")

    async def _fill(self, warm: dict[str, Any], timeout_seconds: float) -> None:
        try:
            missing = self.count - len(await self._waiting(warm, timeout_seconds))
            for _ in range(missing):
                await kube.request("POST", kube.core_path(warm["metadata"]["namespace"], "pods"), warm)
        except Exception as exc:  # a quota, the apiserver away: the next run creates its own pod
            log.warning("warm pods of %s: not started: %s", warm["metadata"]["labels"][WARM_LABEL], exc)

    async def close(self) -> None:
        for task in self._filling.values():
            task.cancel()
        self._filling.clear()
