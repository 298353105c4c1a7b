"""kopf handlers, registered on an explicit registry (importing this module registers nothing).

login              credentials from the in-cluster ServiceAccount or $KUBECONFIG
startup/cleanup    settings, store and executor in the memo; executor closed on exit
agentrun           daemon per unfinished AgentRun: runs.RunLoop (accept, submit, follow)
agentrun-abort     on delete (finalizer): abort the execution
agenttool-status   timer per AgentTool: Ready/Reconciling/Stalled
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from tether.api import GROUP, VERSION
from tether.stores import open_store

from . import kube, metrics
from .executors.base import Executor, execution_name
from .executors.local import LocalExecutor
from .runs import FINISHED, RunLoop
from .settings import Settings
from .tools import reconcile_tool

log = logging.getLogger("tether_operator")


def make_executor(settings: Settings) -> Executor:
    if settings.executor.kind == "local":
        return LocalExecutor(
            settings.store.url,
            settings.executor.workdir,
            concurrency=settings.executor.concurrency,
            python=settings.executor.python or None,
            passed_env=settings.executor.runtime_env,
        )
    raise kopf.PermanentError(f"unknown executor {settings.executor.kind!r} (supported: local)")


def _unfinished(status: kopf.Status, **_: Any) -> bool:
    return status.get("phase") not in FINISHED


def build_registry(settings: Settings) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(id="login", registry=registry)
    async def login(**_: Any) -> kopf.AiohttpSession:
        # Watch streams hold a connection each (2 resources per namespace, plus kopf's scanning
        # of namespaces and CRDs); the rest is the pool for patches and Events.
        watches = 2 * max(1, len(settings.namespaces)) + 2
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
        memo.store = open_store(memo.settings.store.url)
        if memo.settings.metrics_port:
            memo.metrics = await metrics.serve(memo.settings.metrics_port, memo.executor)
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
        runner = getattr(memo, "metrics", None)
        if runner is not None:
            await runner.cleanup()
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
    async def agentrun(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, logger: logging.Logger, **_: Any) -> None:
        loop = RunLoop(body=body, settings=memo.settings, executor=memo.executor, store=memo.store, logger=logger)
        await loop.run(stopped)

    @kopf.on.delete(GROUP, VERSION, "agentruns", id="agentrun-abort", registry=registry)
    async def agentrun_abort(uid: str, status: kopf.Status, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
        if status.get("phase") in FINISHED:
            return
        await memo.executor.abort(execution_name(uid))
        logger.info("aborted execution %s", execution_name(uid))

    @kopf.timer(
        GROUP,
        VERSION,
        "agenttools",
        id="agenttool-status",
        registry=registry,
        interval=settings.timing.tool_interval_seconds,
    )
    async def agenttool_status(body: kopf.Body, namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
        change = await reconcile_tool(
            namespace,
            name,
            body.meta.get("generation", 1),
            dict(body.spec),
            dict(body.get("status") or {}),
            memo.settings.gpu_node_pools,
            memo.settings.tool_modules,
            memo.executor.probe_tool,
            allow_auto_approve=memo.settings.allow_auto_approve,
        )
        if change is not None:
            reason, message = change
            kopf.event(body, type="Normal" if reason == "Valid" else "Warning", reason=reason, message=message[:1024])

    return registry
