"""kopf handlers, registered on an explicit registry (importing this module registers nothing).

login              credentials from the in-cluster ServiceAccount or $KUBECONFIG
startup/cleanup    settings, store and executor in the memo; executor closed on exit
agentrun           daemon per unfinished AgentRun: runs.RunLoop (accept, submit, follow)
agentrun-expiry    daemon per finished AgentRun with spec.ttlSecondsAfterFinished: deletes it
                   that long after it finished (runs.expire)
agentrun-events    every AgentRun event: a deleted run's execution is aborted (its pods or
                   process) and our finalizer released; a run gone for good stops its daemon
runner-pods        (kubernetes executor) watch events of runner pods wake their execution
agenttool-status   timer per AgentTool: Ready/Reconciling/Stalled
agentapproval      a new AgentApproval: checked and, if it holds, recorded (approvals.py); the
                   run's loop woken to look

kopf ties a finalizer to every daemon and timer for as long as it exists; Tether's finalizer
(`runs.FINALIZER`) is held only while something runs, so both are registered without one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from functools import cache
from typing import Any

import kopf

from tether.api import GROUP, VERSION, Phase
from tether.contract import APPROVAL_PLURAL
from tether.stores import Store, open_store

from . import cloudevents, kube, metrics, ui
from .approvals import apply_approval
from .checks import check_admission_policy
from .executors.base import Executor, execution_name
from .executors.flyte import FlyteExecutor
from .executors.kubernetes import KubernetesExecutor
from .executors.local import LocalExecutor
from .executors.pods import EXECUTION_LABEL
from .runs import FINALIZER, FINISHED, RunLoop, expire
from .settings import Settings
from .tools import reconcile_tool

log = logging.getLogger("tether_operator")


def make_executor(settings: Settings) -> Executor:
    ex = settings.executor
    if ex.kind == "kubernetes":
        return KubernetesExecutor(
            runtime_image=ex.runtime_image,
            service_account=ex.runner_service_account,
            store_secret=settings.store.runner_secret,
            pull_policy=ex.image_pull_policy,
            resync_seconds=ex.resync_seconds,
            tool_modules=settings.tool_modules,
            start_grace_seconds=ex.pod_start_grace_seconds,
            default_resources=ex.default_resources,
            gpu_node_pools=settings.gpu_node_pools,
            warm_pods=ex.warm_pods,
            warm_idle_seconds=ex.warm_pod_idle_seconds,
        )
    if ex.kind == "flyte":
        if not ex.flyte.endpoint:
            raise kopf.PermanentError("the flyte executor needs TETHER_FLYTE_ENDPOINT (chart value executor.flyte.endpoint)")
        try:
            return FlyteExecutor(
                endpoint=ex.flyte.endpoint,
                runtime_image=ex.runtime_image,
                project=ex.flyte.project,
                domain=ex.flyte.domain,
                insecure=ex.flyte.insecure,
                service_account=ex.flyte.service_account,
                store_secret=settings.store.runner_secret,
                tool_modules=settings.tool_modules,
            )
        except ValueError as exc:  # a project template without {namespace}
            raise kopf.PermanentError(f"TETHER_FLYTE_PROJECT (chart value executor.flyte.project): {exc}") from None
    if ex.kind == "local":
        return LocalExecutor(
            settings.store.url,
            settings.executor.workdir,
            concurrency=settings.executor.concurrency,
            python=settings.executor.python or None,
            passed_env=settings.executor.runtime_env,
        )
    raise kopf.PermanentError(f"unknown executor {settings.executor.kind!r} (supported: kubernetes, flyte, local)")


class _StopWhenGone:
    """kopf's stop flag, also raised when the run is gone (deleted while holding no finalizer,
    kopf does not stop the daemon then)."""

    def __init__(self, stopped: Any, gone: set[str], uid: str) -> None:
        self.stopped, self.gone, self.uid = stopped, gone, uid

    def __bool__(self) -> bool:
        return bool(self.stopped) or self.uid in self.gone


def _unfinished(status: kopf.Status, **_: Any) -> bool:
    return status.get("phase") not in FINISHED


def _expiring(spec: kopf.Spec, status: kopf.Status, **_: Any) -> bool:
    return status.get("phase") in FINISHED and spec.get("ttlSecondsAfterFinished") is not None


def build_registry(settings: Settings) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(id="login", registry=registry)
    async def login(**_: Any) -> kopf.AiohttpSession:
        # Watch streams hold a connection each (3 resources per namespace, plus kopf's scanning
        # of namespaces and CRDs); the rest is the pool for patches and Events.
        watches = 3 * max(1, len(settings.namespaces)) + 2
        return kube.kopf_session(watches + 16)

    @kopf.on.startup(id="startup", registry=registry)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        # Handler progress in annotations under our own prefix (status.kopf would be pruned by
        # the structural schema); single replica, so no peering objects are needed.
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP, key="last-handled-configuration")
        settings.persistence.finalizer = f"{GROUP}/abort-execution"
        settings.peering.standalone = True
        settings.posting.level = logging.WARNING  # our own Events say what happened
        settings.watching.server_timeout = 300
        memo.executor = make_executor(memo.settings)
        memo.gone = set()
        memo.wakes = {}  # "namespace/name" -> the run loop's wake-up (an AgentApproval for it)
        store_settings = memo.settings.store

        @cache
        def store_for(namespace: str) -> Store:  # each namespace's runs live under their own prefix
            return metrics.CountedStore(open_store(store_settings.for_namespace(namespace)))

        memo.store_for = store_for
        sink = memo.settings.cloud_events_sink
        memo.events = cloudevents.Emitter(sink) if sink else None
        if memo.settings.metrics_port:
            memo.metrics = await metrics.serve(memo.settings.metrics_port, memo.executor)
        if memo.settings.ui_port:
            served = list(memo.settings.namespaces)
            memo.ui = await ui.serve(
                memo.settings.ui_host, memo.settings.ui_port, lambda: served, store_for, content=memo.settings.ui_show_content
            )
        for problem in await check_admission_policy(memo.settings):  # said once here; runs naming Secrets wait
            log.warning("%s: %s", problem.reason, problem.message)
        log.info(
            "tether operator: executor=%s store=%s namespaces=%s",
            memo.executor.kind,
            memo.settings.store.url,
            ",".join(memo.settings.namespaces) or "(all)",
        )

    @kopf.on.cleanup(id="cleanup", registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        executor = getattr(memo, "executor", None)
        if executor is not None:
            await executor.close()
        for server in ("metrics", "ui"):
            runner = getattr(memo, server, None)
            if runner is not None:
                await runner.cleanup()
        events = getattr(memo, "events", None)
        if events is not None:
            await events.close()
        await kube.close()

    @kopf.daemon(
        GROUP,
        VERSION,
        "agentruns",
        id="agentrun",
        registry=registry,
        when=_unfinished,
        cancellation_timeout=10.0,
        backoff=5.0,
    )
    @metrics.counting_errors("agentrun")
    async def agentrun(
        body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any
    ) -> None:
        namespace = body.meta["namespace"]
        key = f"{namespace}/{body.meta['name']}"
        wake = memo.wakes[key] = asyncio.Event()
        loop = RunLoop(
            body=body,
            settings=memo.settings,
            executor=memo.executor,
            store=memo.store_for(namespace),
            store_url=memo.settings.store.for_namespace(namespace),
            logger=logger,
            events=memo.events,
            wake=wake,
        )
        uid = body.meta["uid"]
        try:
            await loop.run(_StopWhenGone(stopped, memo.gone, uid))
        finally:
            if memo.wakes.get(key) is wake:
                del memo.wakes[key]
            if uid in memo.gone:  # deleted while nothing ran (e.g. suspended): forget the execution
                memo.gone.discard(uid)
                await memo.executor.abort(execution_name(uid), namespace)

    @kopf.daemon(GROUP, VERSION, "agentruns", id="agentrun-expiry", registry=registry, when=_expiring, cancellation_timeout=5.0)
    @metrics.counting_errors("agentrun-expiry")
    async def agentrun_expiry(
        body: kopf.Body, stopped: kopf.DaemonStopped, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any
    ) -> None:
        await expire(body, stopped, logger)

    @kopf.on.event(GROUP, VERSION, "agentruns", id="agentrun-events", registry=registry)
    @metrics.counting_errors("agentrun-events")
    async def agentrun_events(
        type: str, body: kopf.Body, memo: kopf.Memo, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any
    ) -> None:
        meta = body.meta
        uid, namespace = meta["uid"], meta["namespace"]
        if type == "DELETED":
            metrics.RUNS.discard(uid)
        else:
            framework = str(body.spec.get("framework") or "")
            metrics.RUNS.set(uid, namespace, framework, str(body.status.get("phase") or Phase.PENDING.value))
        if type == "DELETED" and body.status.get("phase") not in FINISHED:  # its daemon may still run
            memo.gone.add(uid)
        if not meta.get("deletionTimestamp") or FINALIZER not in (meta.get("finalizers") or []):
            return
        await memo.executor.abort(execution_name(uid), namespace)
        await kube.set_finalizer("agentruns", namespace, meta["name"], FINALIZER, False)
        logger.info("aborted execution %s", execution_name(uid))

    if settings.executor.kind == "kubernetes":

        @kopf.on.event("v1", "pods", id="runner-pods", registry=registry, labels={EXECUTION_LABEL: kopf.PRESENT})
        @metrics.counting_errors("runner-pods")
        async def runner_pods(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
            memo.executor.observe(event)

    @kopf.on.create(GROUP, VERSION, APPROVAL_PLURAL, id="agentapproval", registry=registry, backoff=2.0)
    @metrics.counting_errors("agentapproval")
    async def agentapproval(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        await apply_approval(body, memo.settings, memo.store_for(body.meta["namespace"]))
        # The run's loop looks at its approvals at once (else at its next look, runs.Cadence).
        if wake := memo.wakes.get(f"{body.meta['namespace']}/{body.spec.get('run')}"):
            wake.set()

    @kopf.timer(
        GROUP,
        VERSION,
        "agenttools",
        id="agenttool-status",
        registry=registry,
        interval=settings.timing.tool_interval_seconds,
    )
    @metrics.counting_errors("agenttool-status")
    async def agenttool_status(body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
        assert namespace is not None  # AgentTool is a namespaced resource
        change = await reconcile_tool(
            namespace,
            name,
            body.meta.get("generation", 1),
            dict(body.spec),
            dict(body.get("status") or {}),
            memo.settings,
            memo.executor.probe_tool,
            read_secrets=memo.executor.reads_secrets,
            created=body.meta.get("creationTimestamp"),
        )
        if change is not None:
            reason, message = change
            kopf.event(body, type="Normal" if reason == "Valid" else "Warning", reason=reason, message=message[:1024])

    # kopf ties a finalizer to every daemon and timer. The run's own (`runs.FINALIZER`) is held by
    # the RunLoop only while something runs; a tool's timer only writes status, so an AgentTool
    # never has one (deleting it or its namespace needs no operator). Last: it covers both.
    registry._spawning._handlers[:] = [dataclasses.replace(h, requires_finalizer=False) for h in registry._spawning._handlers]
    return registry
