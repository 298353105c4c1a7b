"""The Kubernetes executor: each attempt of a run is one pod, and the operator runs no agent code.

What the pods and the objects they use look like, and how the operator knows they are its own
(a name found taken, a pod carrying the execution label): `pods`; a GPU tool's pods: `tool_pods`.
This module drives the attempts.

The pod's end is the runtime's exit code: 0 succeeded, 2 terminal, 3 suspended (the pod is
deleted: nothing is held while a human decides; `resume` starts the next attempt), anything else
— a crash, OOMKilled, eviction, the timeout (counted from the pod's creation), the pod deleted —
is recoverable: the next attempt (a new pod, attempt + 1) replays the journal, while failures <=
retries. A pod that cannot start (unschedulable, image not pullable, a Secret missing) for
`start_grace_seconds` fails the run with that reason (terminal). An object found under one of
the operator's names that is not what it would create fails the run with OwnedObjectConflict.

With `spec.standby` the next attempt's pod is created beside the running one (`pods`: waiting at
its imports) and, once the attempt has ended and is to be retried, told to go instead of a new pod
being created; then a new standby follows. A standby that died or is being deleted when it is
needed is deleted and its attempt number skipped; a waiting standby is deleted when the run ends
or is suspended. Only the operator tells a standby to go, after the attempt before it ended: the
journal's attempt claim in the store keeps a late writer of an older attempt out regardless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import kube
from .base import (
    EXIT_INTERRUPTED,
    EXIT_SUCCEEDED,
    AttemptingExecutor,
    Capability,
    Execution,
    ExecutionState,
    Submission,
    execution_name,
    retried,
)
from .pods import (
    EXECUTION_LABEL,
    GO_ANNOTATION,
    NO_EXIT_CODE,
    NO_SIDECARS,
    TOOL_POD_LABEL,
    PodSettings,
    RunFailure,
    active_deadline,
    asks_for_gpus,
    conflict,
    not_ours,
    pod_age,
    pod_attempt,
    pod_name,
    pod_outcome,
    pod_tools,
    request_configmap,
    request_configmap_name,
    runner_account,
    runner_pod,
    sidecars_kept,
    start_problem,
    waiting_standby,
    with_go,
)
from .tool_pods import ToolPods
from .warm_pods import WarmPods, is_warm

log = logging.getLogger(__name__)

#: After a pod's grace period, how long more the operator waits for a deleted pod to stop before
#: it starts the next attempt anyway (the node may be gone and never report it).
TERMINATION_MARGIN_SECONDS = 30.0
#: How soon an attempt the apiserver refused for a passing reason (unreachable, a quota) is tried again.
RETRY_SECONDS = 10.0


@dataclass
class _Execution(Execution):
    pod_changed: asyncio.Event = field(default_factory=asyncio.Event)
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The newest state of the execution's pods from watch events (or the create), by name, not
    yet looked at: `_follow` reads the pod from here instead of asking the apiserver again."""
    adopted: int = 0
    """The attempt whose pod an operator restart found running (0: none): followed, not created."""
    names: dict[int, str] = field(default_factory=dict)
    """Attempts whose pod is not named `<execution>-<attempt>`: warm pods the run claimed."""
    waiting: set[int] = field(default_factory=set)
    """Attempts whose pod was started waiting (`_early`, or a spec.standby run's standby): told to go, not created."""

    def pod(self, attempt: int) -> str:
        return self.names.get(attempt) or pod_name(self.sub.name, attempt)


class KubernetesExecutor(AttemptingExecutor[_Execution]):
    kind = "kubernetes"
    supports = frozenset(
        {
            Capability.IMAGE,
            Capability.RESOURCES,
            Capability.NODE_SELECTOR,
            Capability.TOLERATIONS,
            Capability.TOOL_IMAGE,
            Capability.TOOL_RESOURCES,
            Capability.TOOL_GPU,
            Capability.TOOL_MCP,
            Capability.STANDBY,
        }
    )
    refusal_hint = "it places a run by spec.resources, spec.nodeSelector and spec.tolerations, and a GPU tool on its GPU node pool"
    reads_secrets = False
    starting = "creating the runner pod"

    def __init__(
        self,
        *,
        runtime_image: str,
        service_account: str = "tether-runner",
        store_secret: str = "tether-store",
        pull_policy: str = "IfNotPresent",
        resync_seconds: float = 60.0,
        retry_backoff: float = 0.5,
        tool_modules: tuple[str, ...] | None = None,
        start_grace_seconds: float = 600.0,
        default_resources: Mapping[str, Mapping[str, str]] | None = None,
        gpu_node_pools: Mapping[str, Any] | None = None,
        warm_pods: int = 0,
        warm_idle_seconds: float = 600.0,
    ) -> None:
        self.pod_settings = PodSettings(
            runtime_image=runtime_image,
            service_account=service_account,
            store_secret=store_secret,
            pull_policy=pull_policy,
            tool_modules=tool_modules,
            default_resources=default_resources,
            start_grace_seconds=start_grace_seconds,
            resync_seconds=resync_seconds,
        )
        self.retry_backoff = retry_backoff
        self._runs: dict[str, _Execution] = {}
        self._accounts: set[str] = set()  # namespaces whose runner ServiceAccount exists
        self.tools = ToolPods(self.pod_settings, dict(gpu_node_pools or {}))
        self.warm = WarmPods(self.pod_settings, warm_pods, warm_idle_seconds)

    # --------------------------------------------------------------------------- interface

    def _execution(self, submission: Submission) -> _Execution:
        return _Execution(submission, attempts=submission.attempts, failures=submission.failures)

    async def abort(self, name: str, namespace: str | None = None) -> None:
        run = await self._unfollow(name)
        if run is not None:
            namespace = namespace or run.sub.request.namespace
        if namespace:
            requests = {request_configmap_name(run.sub)} if run is not None else set()
            for pod in await self._pods(namespace, name):
                owners = pod["metadata"].get("ownerReferences") or []
                if any(o.get("controller") and execution_name(o.get("uid", "")) == name for o in owners):  # a run's, not a stranger's
                    volumes = pod.get("spec", {}).get("volumes") or []
                    requests |= {v["configMap"].get("name", "") for v in volumes if v.get("name") == "request" and v.get("configMap")}
                    await kube.delete(kube.core_path(namespace, "pods", pod["metadata"]["name"]))
            for configmap in requests:
                if configmap.startswith(f"{name}-"):  # a pod names it: delete only what could be ours
                    await kube.delete(kube.core_path(namespace, "configmaps", configmap))

    def observe(self, event: Mapping[str, Any]) -> None:
        """A watch event of a runner pod: wake the execution it belongs to."""
        pod = event.get("object") or {}
        meta = pod.get("metadata") or {}
        run = self._runs.get((meta.get("labels") or {}).get(EXECUTION_LABEL, ""))
        if run is not None:
            labels = meta.get("labels") or {}
            if (
                event.get("type") in ("ADDED", "MODIFIED", None)  # None: an object of kopf's (re)listing
                and TOOL_POD_LABEL not in labels
                and meta.get("namespace") == run.sub.request.namespace
            ):
                run.seen[meta.get("name", "")] = dict(pod)  # the pod of that name: what a GET would answer
            else:
                run.seen.pop(meta.get("name", ""), None)  # deleted: asked for
            run.pod_changed.set()

    async def close(self) -> None:
        """Operator shutdown: stop following; the pods keep running and are adopted on restart."""
        for run in self._runs.values():
            if run.task is not None:
                run.task.cancel()
        self._runs.clear()
        await self.warm.close()

    # ----------------------------------------------------------------------------- driving

    async def _pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        listed = await kube.request("GET", kube.core_path(namespace, "pods") + f"?labelSelector={EXECUTION_LABEL}%3D{name}")
        return list((listed or {}).get("items") or [])

    def _pod(self, sub: Submission, attempt: int, endpoints: Mapping[str, str] | None = None, waits: bool = False) -> dict[str, Any]:
        return runner_pod(sub, attempt, self.pod_settings, endpoints, waits)

    async def _objects(self, sub: Submission) -> None:
        """The namespace's runner ServiceAccount (no token, no RBAC) and the request ConfigMap,
        each checked to be what the operator would create before a pod uses it (RunFailure)."""
        namespace = sub.request.namespace
        if namespace not in self._accounts:
            name = self.pod_settings.service_account
            account = await kube.request("GET", kube.core_path(namespace, "serviceaccounts", name))
            if account is None:
                account, _ = await kube.create(kube.core_path(namespace, "serviceaccounts"), runner_account(name))
            # Shared by the namespace's runs and made by the chart, so no owner; what matters is
            # that it gives a pod no token (the pod refuses one too): rights bound to it never
            # reach a runner.
            if account.get("automountServiceAccountToken") is not False:
                raise conflict("ServiceAccount", namespace, name, "it does not set automountServiceAccountToken: false")
            self._accounts.add(namespace)
        expected = request_configmap(sub)
        configmap, created = await kube.create(kube.core_path(namespace, "configmaps"), expected)
        if not created and (why := not_ours(configmap, expected)):
            raise conflict("ConfigMap", namespace, expected["metadata"]["name"], why)

    async def _ours(self, sub: Submission) -> tuple[dict[int, dict[str, Any]], set[int]]:
        """The execution's pods by attempt: only those the operator made; and the attempts whose
        pod waits to be told to go. Anyone who may create pods can label one as this execution
        (and give it an ownerReference): such a pod is neither followed nor counted."""
        pods: dict[int, dict[str, Any]] = {}
        waiting: set[int] = set()
        for pod in await self._pods(sub.request.namespace, sub.name):
            if TOOL_POD_LABEL in pod["metadata"].get("labels", {}):
                continue  # a GPU tool's pod: self.tools'
            attempt = pod_attempt(pod)
            if waiting_standby(pod):  # not an attempt (yet): `_promote` checks it before it is used
                waiting |= {attempt} if attempt else set()
                continue
            waits = GO_ANNOTATION in pod["metadata"].get("annotations", {})  # started waiting, then told to go
            if attempt is None:
                why: str | None = "no attempt number"
            elif is_warm(pod):  # a warm pod the run claimed
                why = not_ours(pod, self.warm.expected(sub, attempt, pod))
            else:
                why = not_ours(pod, self._pod(sub, attempt, self.tools.claimed(sub, pod), waits))
            if why is None and attempt is not None:
                pods[attempt] = pod
            else:
                log.warning(
                    "execution %s: pod %s carries its label but is not the operator's (%s): ignored", sub.name, pod["metadata"]["name"], why
                )
        return pods, waiting

    async def _drive(self, run: _Execution, adopt: bool) -> None:
        try:
            await super()._drive(run, adopt)
        except asyncio.CancelledError:
            raise
        except RunFailure as exc:  # terminal: a conflict or a pod that cannot start stays so
            log.warning("execution %s: %s", run.sub.name, exc)
            run.set(ExecutionState.FAILED, str(exc), exc.reason)
        except Exception as exc:
            if not (isinstance(exc, kube.KubeError) and exc.status in (400, 422)):
                # the apiserver unreachable, a quota, an admission webhook: say so, try again later
                log.warning("execution %s: %s", run.sub.name, exc)
                run.set(ExecutionState.QUEUED, f"cannot create the runner pod: {exc}")
                await asyncio.sleep(min(self.pod_settings.resync_seconds, RETRY_SECONDS))
                return self._start(run, adopt=True)
            run.set(ExecutionState.FAILED, f"the runner pod was refused: {exc}")  # an invalid pod stays invalid
        if run.sub.request.spec.standby or run.attempts + 1 in run.waiting:  # ended or suspended: nothing waits for a next attempt
            await self._discard_standby(run.sub, run.attempts + 1)

    async def _prepare(self, run: _Execution, adopt: bool) -> None:
        """The namespace's runner ServiceAccount and the request ConfigMap (`_objects`); the pods
        an earlier operator made counted: after an operator restart the newest is the current
        attempt (whatever status says), earlier ones that died count against retries."""
        sub = run.sub
        await self._objects(sub)
        if sub.fresh and not run.attempts:  # never submitted, no pod made yet: none to count (a leftover attempt 1 is found by its name)
            return
        pods, waiting = await self._ours(sub)
        run.names |= {n: p["metadata"]["name"] for n, p in pods.items() if is_warm(p)}
        run.waiting |= waiting
        latest = max(pods, default=0)
        # An attempt whose tool pods were made but not its runner pod: gone, its number used.
        unstarted = await self.tools.discard_unstarted(sub, latest)
        run.adopted = latest if adopt and latest and latest >= run.attempts and unstarted <= latest else 0
        run.attempts = max(run.attempts, latest, unstarted)
        outcomes = [pod_outcome(p, sub.timeout_seconds) for n, p in pods.items() if n != run.adopted]
        run.failures = max(run.failures, sum(1 for o in outcomes if o is not None and retried(o[0])))

    async def _attempt(self, run: _Execution) -> tuple[int, str]:
        """The attempt's pod (created, unless adopted or a standby told to go), followed to its
        end; with spec.standby the next attempt's pod waits beside it."""
        sub = run.sub
        standby = sub.request.spec.standby
        current, run.adopted = run.adopted, 0
        if not current:
            current = run.attempts + 1
            promoted: bool | None = False
            while (standby or current in run.waiting) and (promoted := await self._promote(sub, current)) is None:
                current += 1  # its standby died waiting: that number is used
            if promoted:
                run.attempts = current
            else:
                await self._create(run, current)
        if standby:
            await self._standby(sub, current + 1)
        return await self.tools.around(sub, current, self._follow(run, run.pod(current)))

    async def _create(self, run: _Execution, attempt: int) -> None:
        """The attempt's pod (and its tool pods), created told to go when a standby follows it. Its
        own frame: the pod's manifest and the created object are not held while the attempt is
        followed (2,000 runs x 2 pods: ~100 MiB)."""
        sub = run.sub
        namespace = sub.request.namespace
        if self.warm.serves(sub) and (warm := await self.warm.claim(sub, attempt)) is not None:
            run.attempts = attempt
            run.names[attempt] = warm["metadata"]["name"]
            run.seen[warm["metadata"]["name"]] = warm
            return
        expected = self._pod(sub, attempt, await self.tools.start(sub, attempt, run.pod_changed))
        created_as = with_go(expected, f"{time.time():.3f}", sub.timeout_seconds) if sub.request.spec.standby else expected
        pod, created = await kube.create(kube.core_path(namespace, "pods"), created_as)
        if not created and (why := not_ours(pod, expected)):
            raise conflict("Pod", namespace, pod_name(sub.name, attempt), why)
        run.attempts = attempt
        run.seen[pod_name(sub.name, attempt)] = pod
        if created and not sidecars_kept(pod):
            # An apiserver without native sidecars (SidecarContainers, on since 1.29, GA in
            # 1.33) drops their restartPolicy: the tool runner would block the agent's
            # container for ever.
            await kube.delete(kube.core_path(namespace, "pods", pod_name(sub.name, attempt)))
            await self.tools.stop(sub, attempt)
            raise RunFailure("", f"the runner pod was refused: {NO_SIDECARS}")

    async def _promote(self, sub: Submission, attempt: int) -> bool | None:
        """spec.standby: tell the standby pod of `attempt` to go. True: it runs the attempt now;
        False: there is none (create the attempt's pod); None: it cannot run it (it died, or is
        being deleted): it is deleted and the number skipped. A pod under its name that is not
        what the operator creates fails the run (RunFailure)."""
        namespace, name = sub.request.namespace, pod_name(sub.name, attempt)
        path = kube.core_path(namespace, "pods", name)
        pod = await kube.request("GET", path)
        if pod is None:
            return False
        if why := not_ours(pod, self._pod(sub, attempt, waits=True)):
            raise conflict("Pod", namespace, name, why)
        meta = pod["metadata"]
        if waiting_standby(pod) and not meta.get("deletionTimestamp") and pod_outcome(pod, sub.timeout_seconds) is None:
            go = {
                # resourceVersion: refused (409) if the pod changed since it was read (e.g. its deletion began)
                "metadata": {"resourceVersion": meta["resourceVersion"], "annotations": {GO_ANNOTATION: f"{time.time():.3f}"}},
                # the kubelet counts the deadline from the pod's start: add the time it waited
                "spec": {"activeDeadlineSeconds": active_deadline(sub.timeout_seconds, pod_age(pod))},
            }
            try:
                await kube.request("PATCH", path, go, content_type="application/merge-patch+json")
                return True
            except kube.KubeError as exc:
                if exc.status != 409:
                    raise
        log.info("execution %s: standby pod %s cannot run attempt %d: deleted, the number skipped", sub.name, name, attempt)
        await kube.delete(path)
        return None

    async def _early(self, run: _Execution) -> None:
        """The attempt's pod is being deleted: it gets its grace period to stop (two attempts
        never overlap), and meanwhile the next attempt's pod starts and waits at its imports, as
        a standby does, to be told to go once this one has stopped — its retry does not wait for
        a pod's start and imports after the stop. Not for a GPU run or one with GPU tools (their
        GPUs held twice), nor when no retry would follow, nor where a standby or a warm pod is
        there for it. Deleted unused if the attempt ends otherwise (`_drive`)."""
        sub = run.sub
        spec = sub.request.spec
        if spec.standby or run.failures + 1 > sub.retries or asks_for_gpus(spec.resources) or pod_tools(sub) or self.warm.serves(sub):
            return
        attempt = run.attempts + 1
        try:
            await self._standby(sub, attempt)
        except kube.KubeError as exc:  # a quota, the apiserver away: the attempt's pod is created after the stop
            log.info("execution %s: attempt %d's pod not started early: %s", sub.name, attempt, exc)
            return
        run.waiting.add(attempt)

    async def _standby(self, sub: Submission, attempt: int) -> None:
        """The pod of `attempt`, waiting beside the running (or stopping) attempt (created once)."""
        expected = self._pod(sub, attempt, waits=True)
        pod, created = await kube.create(kube.core_path(sub.request.namespace, "pods"), with_go(expected, ""))
        if not created and (why := not_ours(pod, expected)):
            raise conflict("Pod", sub.request.namespace, pod_name(sub.name, attempt), why)

    async def _discard_standby(self, sub: Submission, attempt: int) -> None:
        """The run ended or is suspended: its standby (if any, still waiting) is not needed."""
        path = kube.core_path(sub.request.namespace, "pods", pod_name(sub.name, attempt))
        try:
            pod = await kube.request("GET", path)
            if pod is not None and waiting_standby(pod) and not_ours(pod, self._pod(sub, attempt, waits=True)) is None:
                await kube.delete(path)
        except kube.KubeError as exc:  # it waits, harmless, until the AgentRun is deleted (it owns it)
            log.warning("execution %s: standby pod not deleted: %s", sub.name, exc)

    def _backoff(self, run: _Execution) -> float:
        # The backoff spaces out an agent that keeps failing. A pod that was taken away (deleted,
        # evicted, drained: stopped on SIGTERM or gone without an exit code) did not fail: its
        # retry starts at once. So does a standby's: it is started and waiting already.
        if run.sub.request.spec.standby or run.exit_code in (EXIT_INTERRUPTED, NO_EXIT_CODE):
            return 0.0
        return super()._backoff(run)

    async def _suspended(self, run: _Execution) -> None:
        await kube.delete(kube.core_path(run.sub.request.namespace, "pods", run.pod(run.attempts)))

    async def _stopped(self, run: _Execution, path: str, name: str, pod: dict[str, Any] | None, why: str) -> tuple[int, str]:
        """Wait for a pod being deleted to stop: two attempts never run on one journal at once.
        Its containers get the grace period to stop (the runtime stops cleanly on SIGTERM: no new
        step, running tool calls recorded: `tether.stopping`); the next attempt starts once the pod
        has ended or is gone, or once the grace period and `TERMINATION_MARGIN_SECONDS` have passed
        (a node that does not answer never reports its pods). An outcome it reports while stopping
        counts (a run that finished in its grace period succeeded)."""
        grace = float(((pod or {}).get("metadata") or {}).get("deletionGracePeriodSeconds") or 30)
        deadline = time.monotonic() + grace + TERMINATION_MARGIN_SECONDS
        if pod is not None and pod_outcome(pod, run.sub.timeout_seconds) is None:
            await self._early(run)
        run.set(run.state, f"attempt {run.attempts}: {why}; waiting up to {grace:g}s for it to stop")
        while pod is not None:
            outcome = pod_outcome(pod, run.sub.timeout_seconds)
            if outcome is not None:
                return outcome[0], f"{why} ({outcome[1]})"
            if time.monotonic() >= deadline:
                log.warning("pod %s: still there %gs after its deletion (its node may be gone); starting the next attempt", name, grace)
                return NO_EXIT_CODE, f"{why}; it had not stopped {grace + TERMINATION_MARGIN_SECONDS:g}s later"
            run.pod_changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(run.pod_changed.wait(), min(1.0, max(deadline - time.monotonic(), 0.05)))
            pod = run.seen.pop(name, None) or await kube.request("GET", path)
        return NO_EXIT_CODE, why

    async def _follow(self, run: _Execution, name: str) -> tuple[int, str]:
        """Wait for the attempt's pod to end; (exit code, what happened). The attempt's timeout
        counts from the pod's creation (activeDeadlineSeconds only from its start on a node, so
        never for a pod that is not scheduled); a pod that cannot start (unschedulable, its image
        not pullable, a Secret missing) for `start_grace_seconds` fails the run (RunFailure). Either
        way the pod is deleted first: it must not start later with nobody following it."""
        path = kube.core_path(run.sub.request.namespace, "pods", name)
        attempt = f"attempt {run.attempts}"
        timeout = run.sub.timeout_seconds
        start_grace = self.pod_settings.start_grace_seconds
        while True:
            run.pod_changed.clear()
            pod = run.seen.pop(name, None) or await kube.request("GET", path)
            if pod is None:
                return NO_EXIT_CODE, f"pod {name} was deleted"
            if pod["metadata"].get("deletionTimestamp"):
                return await self._stopped(run, path, name, pod, f"pod {name} was deleted")
            outcome = pod_outcome(pod, timeout)
            if outcome is not None:
                return outcome
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            age = pod_age(pod)
            problem = start_problem(pod) if phase == "Pending" else None
            if problem is not None and age >= start_grace:
                await kube.delete(path)
                reason, why = problem
                raise RunFailure(reason, f"{attempt}: pod {name} did not start within {start_grace:g}s: {why}")
            if age >= timeout:
                await kube.delete(path)
                timed_out = f"timed out after {timeout:g}s" + (" without starting" if phase == "Pending" else "")
                code, _ = await self._stopped(run, path, name, await kube.request("GET", path), timed_out)
                return (code if code == EXIT_SUCCEEDED else NO_EXIT_CODE), timed_out
            state = ExecutionState.RUNNING if phase == "Running" else ExecutionState.QUEUED
            message = f"{attempt}: pod {name} {phase}" + (f" ({problem[1]})" if problem else "")
            if (state, message) != (run.state, run.message):
                run.set(state, message)
            wait = min(self.pod_settings.resync_seconds, timeout - age, (start_grace - age) if problem else math.inf)
            pod = None  # not held while waiting: the next event brings the pod anew
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(run.pod_changed.wait(), max(wait, 0.05))
