"""The Flyte executor: each AgentRun is a run of the runtime task on a Flyte 2 backend.

    task  tether-runtime.agent_run   deployed once per Tether version (and per image: a run that
                                     names its own image gets a task version of that image), with
                                     `copy_style="none"`: the image already holds the runtime
    run   <execution>                the AgentRun's run, named deterministically from its uid, so an
                                     operator restart finds it (adopts) and never starts a second
    run   <execution>-<n>            the n-th segment after an approval: a suspended run has
                                     ended (nothing is held while a human decides); the decision
                                     starts the next one, which replays to the approval point

Per-run overrides of the deployed task, through the SDK's `TaskDetails.override`: resources
(`gpu: {type: A100, count: 1}` is Flyte's `gpu="A100:1"`, which the backend turns into the
accelerator's node selector and toleration), env, secrets (Flyte secrets named `<Secret
name>/<key>` of the AgentRun's references, injected by the backend as variables; the operator
never reads a value), service account, retries (Flyte retries an attempt that raised: the
runtime raises on a recoverable failure) and timeout.

Everything goes through the real `flyte` SDK (`flyte.remote`): deploy, run, get, abort.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.metadata
import json
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from tether.api import Resources

from .base import (
    EXIT_SUCCEEDED,
    EXIT_SUSPENDED,
    Capability,
    ExecutionState,
    ExecutionStatus,
    FollowingExecutor,
    Submission,
)

log = logging.getLogger(__name__)

RUNTIME_ENV = "tether-runtime"
RUNTIME_TASK = f"{RUNTIME_ENV}.agent_run"
TOOL_ENV = "tether-tool"
TOOL_TASK = f"{TOOL_ENV}.tool_call"
SECRET_VAR = "TETHER_SECRET_{}"

# Flyte's phases (flyte.models.ActionPhase values) -> ours. A finished run's outcome (the task's
# output) decides between succeeded, suspended and a terminal failure.
_PHASES = {
    "queued": ExecutionState.QUEUED,
    "waiting_for_resources": ExecutionState.QUEUED,
    "initializing": ExecutionState.QUEUED,
    "running": ExecutionState.RUNNING,
    "paused": ExecutionState.RUNNING,
    "succeeded": ExecutionState.SUCCEEDED,
    "recovered": ExecutionState.SUCCEEDED,
    "failed": ExecutionState.FAILED,
    "timed_out": ExecutionState.FAILED,
    "aborted": ExecutionState.ABORTED,
}


def flyte_resources(resources: Resources | None) -> Any:
    """`spec.resources` as `flyte.Resources` (None: the deployed task's own)."""
    import flyte

    if resources is None:
        return None
    gpu = None
    if resources.gpu is not None and resources.gpu.count > 0:
        gpu = f"{resources.gpu.type}:{resources.gpu.count}"  # the SDK checks it against its GPU types
    return flyte.Resources(cpu=resources.cpu, memory=resources.memory, gpu=cast(Any, gpu))


def task_version(tether_version: str, image: str) -> str:
    """The runtime task's version for `image`: the Tether version, plus the image's digest so a
    run with its own image never reuses another image's task."""
    return f"{tether_version}-{hashlib.sha256(image.encode()).hexdigest()[:10]}"


def segment_name(execution: str, segment: int) -> str:
    return execution if segment <= 1 else f"{execution}-{segment}"


@dataclass
class _Execution:
    sub: Submission
    segment: int = 1
    state: ExecutionState = ExecutionState.QUEUED
    attempts: int = 0
    exit_code: int | None = None
    message: str = ""
    url: str | None = None
    launched: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def run_name(self) -> str:
        return segment_name(self.sub.name, self.segment)

    def status(self) -> ExecutionStatus:
        return ExecutionStatus(self.sub.name, self.state, self.attempts, 0, self.exit_code, self.message, self.url)


class FlyteExecutor(FollowingExecutor[_Execution]):
    kind = "flyte"
    supports = frozenset({Capability.IMAGE, Capability.RESOURCES, Capability.TOOL_IMAGE, Capability.TOOL_RESOURCES, Capability.TOOL_GPU})
    refusal_hint = (
        "placement is the Flyte backend's: a GPU type in spec.resources selects its accelerator pool; "
        "nodeSelector and tolerations are not passed through"
    )
    reads_secrets = False

    def __init__(
        self,
        *,
        endpoint: str,
        runtime_image: str,
        project: str = "tether",
        domain: str = "development",
        insecure: bool = False,
        version: str | None = None,
        service_account: str = "",
        poll_seconds: float = 2.0,
        tool_modules: tuple[str, ...] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.runtime_image = runtime_image
        self.project = project
        self.domain = domain
        self.insecure = insecure
        self.version = version or importlib.metadata.version("tether")
        self.service_account = service_account
        self.poll_seconds = poll_seconds
        self.tool_modules = tool_modules  # the chart's tools.allowedModules (None: the image's own)
        self._runs: dict[str, _Execution] = {}
        self._deployed: dict[tuple[str, str], Any] = {}  # (task, image) -> remote TaskDetails
        self._ready = False
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------------ SDK plumbing

    async def _init(self) -> None:
        if self._ready:
            return
        import flyte
        import flyte.remote

        import tether

        endpoint = self.endpoint if "://" in self.endpoint else f"dns:///{self.endpoint}"
        # root_dir: where `tether` is importable from, so the deployed task names its module
        # `tether.entrypoint` (what the image imports), not a path of this checkout.
        root = Path(tether.__file__).resolve().parent.parent
        await flyte.init.aio(endpoint=endpoint, insecure=self.insecure, project=self.project, domain=self.domain, root_dir=root)
        try:
            await flyte.remote.Project.get.aio(self.project)
        except Exception as exc:
            if not _not_found(exc):
                raise
            log.info("creating Flyte project %s", self.project)
            with contextlib.suppress(Exception):  # created concurrently: the deploy below says if not
                await flyte.remote.Project.create.aio(id=self.project, name=self.project, description="Tether AgentRuns")
        self._ready = True

    async def runtime_task(self, image: str) -> Any:
        """The deployed runtime task for `image` (deployed now if this version is not yet)."""
        from tether.entrypoint import agent_run

        return await self._deploy(agent_run.func, RUNTIME_ENV, RUNTIME_TASK, image)

    async def tool_task(self, image: str) -> Any:
        """The deployed task that runs an AgentTool with its own image or resources."""
        from tether.entrypoint import tool_call

        return await self._deploy(tool_call.func, TOOL_ENV, TOOL_TASK, image)

    async def _deploy(self, func: Any, env_name: str, task_name: str, image: str) -> Any:
        async with self._lock:
            await self._init()
            if (task_name, image) in self._deployed:
                return self._deployed[(task_name, image)]
            import flyte
            import flyte.remote

            version = task_version(self.version, image)
            try:
                task = await flyte.remote.Task.get(task_name, version=version).fetch.aio()
            except Exception as exc:  # not deployed yet (NOT_FOUND); anything else fails deploy below
                log.info("deploying %s version %s (image %s): %s", task_name, version, image, type(exc).__name__)
                # The same function in an environment of this image (a clone would carry no tasks).
                environment = flyte.TaskEnvironment(name=env_name, image=image)
                environment.task(func)
                await flyte.deploy.aio(environment, version=version, copy_style="none")
                task = await flyte.remote.Task.get(task_name, version=version).fetch.aio()
            self._deployed[(task_name, image)] = task
            return task

    async def tool_tasks(self, sub: Submission) -> dict[str, dict[str, Any]]:
        """The AgentTools that run as child tasks (own image or resources): what the runtime needs
        to call each (`$TETHER_FLYTE_TOOL_TASKS`), their tasks deployed."""
        refs: dict[str, dict[str, Any]] = {}
        for name, tool in sorted(sub.request.tools.items()):
            if not tool.image and tool.resources is None:
                continue
            image = tool.image or sub.request.spec.image or self.runtime_image
            await self.tool_task(image)
            resources = tool.resources
            ref: dict[str, Any] = {"task": TOOL_TASK, "version": task_version(self.version, image)}
            if resources is not None:
                gpu = f"{resources.gpu.type}:{resources.gpu.count}" if resources.gpu is not None and resources.gpu.count > 0 else None
                ref["resources"] = {k: v for k, v in (("cpu", resources.cpu), ("memory", resources.memory), ("gpu", gpu)) if v}
            if tool.effective_cache == "auto":
                ref["cache"] = tool.version or "auto"
            prefix = f"tools/{name}/"
            ref["secrets"] = [
                [f.secret, f.key, f.path, SECRET_VAR.format(f"{name}_{i}".upper().replace("-", "_"))]
                for i, f in enumerate(x for x in sub.secret_files if x.path.startswith(prefix))
            ]
            refs[name] = ref
        return refs

    def overrides(self, sub: Submission, tool_tasks: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        """Keyword arguments of `TaskDetails.override` for this submission. Secrets of tools that
        run as child tasks go to those tasks only, not to the agent's."""
        import flyte

        from tether.entrypoint import FLYTE_REMOTE_ENV, TOOL_TASKS_ENV
        from tether.secrets import SECRETS_FROM_ENV
        from tether.tools import TOOL_MODULES_ENV

        spec = sub.request.spec
        env = {**sub.env, FLYTE_REMOTE_ENV: "1"}
        if self.tool_modules is not None:  # as the Kubernetes executor's pods: the runtime enforces it
            env[TOOL_MODULES_ENV] = ",".join(self.tool_modules)
        if tool_tasks:
            env[TOOL_TASKS_ENV] = json.dumps(tool_tasks, sort_keys=True)
        secrets = []
        names: dict[str, str] = {}
        own = [f for f in sub.secret_files if not any(f.path.startswith(f"tools/{t}/") for t in tool_tasks or {})]
        for i, f in enumerate(own):
            var = SECRET_VAR.format(i)
            secrets.append(flyte.Secret(key=f.key, group=f.secret, as_env_var=var))
            names[f.path] = var
        if names:
            env[SECRETS_FROM_ENV] = json.dumps(names, sort_keys=True)
        out: dict[str, Any] = {
            "env_vars": env,
            "retries": flyte.RetryStrategy(count=sub.retries),
            "timeout": timedelta(seconds=sub.timeout_seconds),
        }
        if (resources := flyte_resources(spec.resources)) is not None:
            out["resources"] = resources
        if secrets:
            out["secrets"] = secrets
        if self.service_account:
            out["service_account"] = self.service_account
        return out

    async def _get(self, run_name: str) -> Any | None:
        import flyte.remote

        try:
            return await flyte.remote.Run.get.aio(run_name)
        except Exception as exc:
            if _not_found(exc):
                return None
            raise

    async def _launch(self, run: _Execution) -> None:
        import flyte

        sub = run.sub
        task = await self.runtime_task(sub.request.spec.image or self.runtime_image)
        remote = await self._get(run.run_name)
        if remote is None:
            overridden = task.override(**self.overrides(sub, await self.tool_tasks(sub)))
            labels = {k.replace("/", "_").replace(".", "_"): v for k, v in sub.labels.items()}
            try:
                remote = await flyte.with_runcontext(name=run.run_name, labels=labels, project=self.project, domain=self.domain).run.aio(
                    overridden, sub.request.model_dump_json(by_alias=True), sub.store_url
                )
            except Exception as exc:
                if not _already_exists(exc):
                    raise
                remote = await self._get(run.run_name)  # submitted concurrently: adopt it
        await self._refresh(run, remote)

    # --------------------------------------------------------------------------- interface

    async def submit(self, submission: Submission) -> ExecutionStatus:
        run = self._runs.get(submission.name)
        if run is not None:
            return run.status()
        run = _Execution(submission)
        self._runs[submission.name] = run
        # Adopt: the newest segment that exists is the current one.
        await self._init()
        while await self._get(segment_name(submission.name, run.segment + 1)) is not None:
            run.segment += 1
        await self._try_launch(run)
        return run.status()

    async def _try_launch(self, run: _Execution) -> None:
        """Launch (or adopt); a spec the SDK or the backend refuses fails the run, a backend out
        of reach leaves it queued, launched again on the next look."""
        try:
            await self._launch(run)
            run.launched = True
        except (ValueError, TypeError, AssertionError) as exc:
            run.state, run.message = ExecutionState.FAILED, f"the Flyte run was refused: {_describe(exc)}"
        except Exception as exc:
            if _code(exc) in ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "PERMISSION_DENIED"):
                run.state, run.message = ExecutionState.FAILED, f"the Flyte run was refused: {_describe(exc)}"
            else:
                log.warning("execution %s: %s", run.sub.name, _describe(exc))
                run.state, run.message = ExecutionState.QUEUED, f"cannot reach the Flyte backend: {_describe(exc)}"
        run.changed.set()

    async def status(self, name: str) -> ExecutionStatus | None:
        run = self._runs.get(name)
        if run is None:
            return None
        if not run.launched and not run.state.finished:
            await self._try_launch(run)
        elif not run.state.finished and run.state is not ExecutionState.SUSPENDED:
            try:
                remote = await self._get(run.run_name)
            except Exception as exc:  # the backend unreachable: say so, keep the last state
                run.message = f"cannot reach the Flyte backend: {_describe(exc)}"
            else:
                if remote is not None:
                    await self._refresh(run, remote)
        return run.status()

    async def resume(self, name: str) -> None:
        run = self._runs.get(name)
        if run is None or run.state is not ExecutionState.SUSPENDED:
            return
        run.segment += 1
        run.state, run.exit_code, run.message, run.launched = ExecutionState.QUEUED, None, "resumed after the approval", False
        await self._try_launch(run)

    async def abort(self, name: str, namespace: str | None = None) -> None:
        run = self._runs.pop(name, None)
        await self._init()
        segment = run.segment if run is not None else 1
        if run is None:
            while await self._get(segment_name(name, segment + 1)) is not None:
                segment += 1
        remote = await self._get(segment_name(name, segment))
        if remote is not None and not remote.done():
            await remote.abort.aio(reason="the AgentRun was deleted")
        if run is not None:
            run.state, run.message = ExecutionState.ABORTED, "aborted"
            run.changed.set()

    async def wait(self, name: str, timeout: float) -> None:
        run = self._runs.get(name)
        if run is None:
            await asyncio.sleep(timeout)
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(run.changed.wait(), min(timeout, self.poll_seconds))
        run.changed.clear()

    async def close(self) -> None:
        """Operator shutdown: the runs go on in Flyte and are adopted on restart."""
        self._runs.clear()

    # ----------------------------------------------------------------------------- reading

    async def _refresh(self, run: _Execution, remote: Any) -> None:
        self._observe(run, remote)
        if run.state is ExecutionState.SUCCEEDED:
            try:
                await self._outcome(run, remote)
            except Exception as exc:  # outputs not readable yet: look again next time
                run.state, run.message = ExecutionState.RUNNING, f"reading the run's outcome: {_describe(exc)}"

    def _observe(self, run: _Execution, remote: Any) -> None:
        details = remote._details.action_details if remote._details is not None else None
        phase = str(remote.phase.value)
        state = _PHASES.get(phase, ExecutionState.QUEUED)
        attempts = int(details.attempts) if details is not None else 0
        message = f"Flyte run {run.run_name}: {phase.replace('_', ' ')}"
        error = details.error_info if details is not None else None
        if error is not None and error.message:
            message += f": {error.message}"
        if phase == "timed_out":
            message += f" (timeout {run.sub.timeout_seconds:g}s)"
        with contextlib.suppress(Exception):
            run.url = remote.url
        if (state, attempts, message) != (run.state, run.attempts, run.message):
            run.state, run.attempts, run.message = state, attempts, message
            run.changed.set()

    async def _outcome(self, run: _Execution, remote: Any) -> None:
        """A succeeded Flyte run ran the task to its end: its output says how the attempt ended."""
        outputs = await remote.outputs.aio()
        outcome = json.loads(outputs[0])
        code = int(outcome["exit_code"])
        run.exit_code = code
        if code == EXIT_SUCCEEDED:
            run.state = ExecutionState.SUCCEEDED
        elif code == EXIT_SUSPENDED:
            run.state, run.message = ExecutionState.SUSPENDED, "waiting for an approval"
        else:
            run.state, run.message = ExecutionState.FAILED, f"terminal failure: {outcome.get('error') or f'exit code {code}'}"
        run.changed.set()


def _code(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    return str(getattr(code, "name", code) or "").upper()


def _not_found(exc: BaseException) -> bool:
    return _code(exc) == "NOT_FOUND" or type(exc).__name__ in ("RunNotFoundError", "RemoteTaskNotFoundError", "NotFoundError")


def _already_exists(exc: BaseException) -> bool:
    return _code(exc) == "ALREADY_EXISTS" or "already exists" in str(exc).lower()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]
