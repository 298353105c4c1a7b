"""The Flyte executor: each AgentRun is a run of the runtime task on a Flyte 2 backend.

    task  tether-runtime.agent_run   deployed once per Tether version (and per image: a run that
                                     names its own image gets a task version of that image), with
                                     `copy_style="none"`: the image already holds the runtime
    run   <execution>                the AgentRun's run, named deterministically from its uid, so an
                                     operator restart finds it (adopts) and never starts a second
    run   <execution>-<n>            the n-th segment after an approval: a suspended run has
                                     ended (nothing is held while a human decides); the decision
                                     starts the next one, which replays to the approval point

Each Kubernetes namespace is its own Flyte project (`project`, a template with `{namespace}`):
the task is deployed and the runs live there, and the Flyte secrets a run asks for are that
project's. The open-source backend's embedded secret manager finds a secret by its name alone,
scoped by project and domain (then domain-wide, then organisation-wide ones an admin made), so a
run in namespace A can never be given B's secret of the same name.

Per-run overrides of the deployed task, through the SDK's `TaskDetails.override`: resources
(`gpu: {type: A100, count: 1}` is Flyte's `gpu="A100:1"`, which the backend turns into the
accelerator's node selector and toleration), env, secrets (for each Secret reference the Flyte
secret `flyte_secret_name(<Secret>, <key>)` of the namespace's project, injected by the backend
as a variable; the operator never reads a value), the store credentials (the same, for the
chart's runner store Secret), the service account (a template with `{namespace}`), retries (Flyte
retries an attempt that raised: the runtime raises on a recoverable failure) and timeout.

Attempts: the backend makes a pod that exited with a bare exit code (SIGKILL, out of memory, a
crash) again under the same name and attempt number, without bound, and reports the run as
running all along. The runtime counts its own starts of the run in the store: the outcome says
how many there were, and a start past `retries` + 1 runs nothing and fails the run with
"retries exhausted".

Everything goes through the real `flyte` SDK (`flyte.remote`): deploy, run, get, abort.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from tether.api import Resources
from tether.contract import AttemptEnd, Outcome, attempt_end

from .base import Capability, Execution, ExecutionState, ExecutionStatus, FollowingExecutor, Submission

log = logging.getLogger(__name__)

RUNTIME_ENV = "tether-runtime"
RUNTIME_TASK = f"{RUNTIME_ENV}.agent_run"
TOOL_ENV = "tether-tool"
TOOL_TASK = f"{TOOL_ENV}.tool_call"
SECRET_VAR = "TETHER_SECRET_{}"
STORE_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")  # as the kubernetes executor's runner pods
NAMESPACE_FIELD = "{namespace}"
_LABEL_VALUE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # a project is a pod label value too
_FLYTE_KEY = re.compile(r"^[-_a-zA-Z0-9]+$")  # the Secret key part of a Flyte secret's name

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


def flyte_secret_name(secret: str, key: str) -> str:
    """The Flyte secret that stands for key `key` of Kubernetes Secret `secret`: `<secret>__<key>`,
    dots of the Secret's name as `_`. One name for the pair (the backend ignores a secret's group),
    and never another pair's: a Secret name has no `_` and no two dots in a row, so the first `__`
    ends it. Flyte secret names allow only letters, digits, `-` and `_`: a key with a dot is refused."""
    if not _FLYTE_KEY.match(key):
        raise ValueError(
            f"key {key!r} of Secret {secret!r} cannot name a Flyte secret (letters, digits, '-' and '_' only): "
            "use a key without dots for the flyte executor"
        )
    return f"{secret.replace('.', '_')}__{key}"


def check_template(value: str, what: str, required: bool = True) -> str:
    """A per-namespace name template (`{namespace}` in it unless not `required`, nothing else to fill)."""
    if required and NAMESPACE_FIELD not in value:
        raise ValueError(
            f"{what} {value!r} must contain {NAMESPACE_FIELD}: a Flyte project shared by namespaces would share their Flyte secrets"
        )
    try:
        value.format(namespace="x")
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"{what} {value!r}: only {NAMESPACE_FIELD} may be filled in ({exc})") from None
    return value


def segment_name(execution: str, segment: int) -> str:
    return execution if segment <= 1 else f"{execution}-{segment}"


@dataclass
class _Execution(Execution):
    segment: int = 1
    launched: bool = False

    @property
    def run_name(self) -> str:
        return segment_name(self.sub.name, self.segment)

    @property
    def namespace(self) -> str:
        return self.sub.request.namespace


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
        project: str = "tether-{namespace}",
        domain: str = "development",
        insecure: bool = False,
        version: str | None = None,
        service_account: str = "",
        store_secret: str = "",
        poll_seconds: float = 2.0,
        tool_modules: tuple[str, ...] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.runtime_image = runtime_image
        self.project = check_template(project, "the Flyte project")
        self.domain = domain
        self.insecure = insecure
        self.version = version or importlib.metadata.version("tether")
        # may name `{namespace}`; empty: the backend's default
        self.service_account = check_template(service_account, "the Flyte service account", required=False)
        self.store_secret = store_secret  # the runner store Secret's name: its Flyte secrets, per project
        self.poll_seconds = poll_seconds
        self.tool_modules = tool_modules  # the chart's tools.allowedModules (None: the image's own)
        self._runs: dict[str, _Execution] = {}
        self._deployed: dict[tuple[str, str, str], Any] = {}  # (project, task, image) -> remote TaskDetails
        self._projects: set[str] = set()
        self._ready = False
        self._lock = asyncio.Lock()

    def project_for(self, namespace: str) -> str:
        """The Flyte project of `namespace`'s runs (a pod label value: 63 characters at most)."""
        project = self.project.format(namespace=namespace)
        if len(project) > 63 or not _LABEL_VALUE.match(project):
            raise ValueError(
                f"Flyte project {project!r} of namespace {namespace!r} is not a valid name (at most 63 lowercase "
                "letters, digits and '-'): shorten the chart's executor.flyte.project"
            )
        return project

    # ------------------------------------------------------------------------ SDK plumbing

    async def _init(self) -> None:
        if self._ready:
            return
        # The SDK reports each deploy and run to Flyte's own Sentry unless told not to: nothing
        # about the cluster's runs leaves it unless the admin sets FLYTE_DISABLE_TELEMETRY=false.
        os.environ.setdefault("FLYTE_DISABLE_TELEMETRY", "true")
        import flyte

        import tether

        endpoint = self.endpoint if "://" in self.endpoint else f"dns:///{self.endpoint}"
        # root_dir: where `tether` is importable from, so the deployed task names its module
        # `tether.entrypoint` (what the image imports), not a path of this checkout.
        root = Path(tether.__file__).resolve().parent.parent
        await flyte.init.aio(endpoint=endpoint, insecure=self.insecure, domain=self.domain, root_dir=root)
        self._ready = True

    @contextlib.contextmanager
    def scope(self, namespace: str) -> Any:
        """SDK calls inside are about `namespace`'s Flyte project (the SDK's per-context config:
        concurrent calls for other namespaces are not affected)."""
        from flyte._initialize import get_init_config, init_config_context

        with init_config_context(get_init_config().replace(project=self.project_for(namespace), domain=self.domain)):
            yield

    async def _ensure_project(self, namespace: str) -> None:
        import flyte.remote

        project = self.project_for(namespace)
        if project in self._projects:
            return
        try:
            await flyte.remote.Project.get.aio(project)
        except Exception as exc:
            if not _not_found(exc):
                raise
            log.info("creating Flyte project %s for namespace %s", project, namespace)
            with contextlib.suppress(Exception):  # created concurrently: the deploy after it says if not
                await flyte.remote.Project.create.aio(id=project, name=project, description=f"Tether AgentRuns of namespace {namespace}")
        self._projects.add(project)

    async def runtime_task(self, namespace: str, image: str) -> Any:
        """The deployed runtime task for `image` in `namespace`'s project (deployed now if this
        version is not yet)."""
        from tether.entrypoint import agent_run

        return await self._deploy(agent_run.func, RUNTIME_ENV, RUNTIME_TASK, namespace, image)

    async def tool_task(self, namespace: str, image: str) -> Any:
        """The deployed task that runs an AgentTool with its own image or resources."""
        from tether.entrypoint import tool_call

        return await self._deploy(tool_call.func, TOOL_ENV, TOOL_TASK, namespace, image)

    async def _deploy(self, func: Any, env_name: str, task_name: str, namespace: str, image: str) -> Any:
        async with self._lock:
            await self._init()
            key = (self.project_for(namespace), task_name, image)
            if key in self._deployed:
                return self._deployed[key]
            import flyte
            import flyte.remote

            with self.scope(namespace):
                await self._ensure_project(namespace)
                version = task_version(self.version, image)
                try:
                    task = await flyte.remote.Task.get(task_name, version=version).fetch.aio()
                except Exception as exc:  # not deployed yet (NOT_FOUND); anything else fails deploy below
                    log.info("deploying %s version %s (image %s) in %s: %s", task_name, version, image, key[0], type(exc).__name__)
                    # The same function in an environment of this image (a clone would carry no tasks).
                    environment = flyte.TaskEnvironment(name=env_name, image=image)
                    environment.task(func)
                    await flyte.deploy.aio(environment, version=version, copy_style="none")
                    task = await flyte.remote.Task.get(task_name, version=version).fetch.aio()
            self._deployed[key] = task
            return task

    async def tool_tasks(self, sub: Submission) -> dict[str, dict[str, Any]]:
        """The AgentTools that run as child tasks (own image or resources): what the runtime needs
        to call each (`$TETHER_FLYTE_TOOL_TASKS`), their tasks deployed."""
        refs: dict[str, dict[str, Any]] = {}
        for name, tool in sorted(sub.request.tools.items()):
            if not tool.image and tool.resources is None:
                continue
            image = tool.image or sub.request.spec.image or self.runtime_image
            await self.tool_task(sub.request.namespace, image)
            resources = tool.resources
            ref: dict[str, Any] = {"task": TOOL_TASK, "version": task_version(self.version, image)}
            if resources is not None:
                gpu = f"{resources.gpu.type}:{resources.gpu.count}" if resources.gpu is not None and resources.gpu.count > 0 else None
                ref["resources"] = {k: v for k, v in (("cpu", resources.cpu), ("memory", resources.memory), ("gpu", gpu)) if v}
            if tool.effective_cache == "auto":
                ref["cache"] = tool.version or "auto"
            prefix = f"tools/{name}/"
            # [group, key, path, variable] as the runtime asks for them: no group (the backend
            # ignores it), the key is the Flyte secret's name in the run's project.
            ref["secrets"] = [
                [None, flyte_secret_name(f.secret, f.key), f.path, SECRET_VAR.format(f"{name}_{i}".upper().replace("-", "_"))]
                for i, f in enumerate(x for x in sub.secret_files if x.path.startswith(prefix))
            ]
            refs[name] = ref
        return refs

    def overrides(self, sub: Submission, tool_tasks: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        """Keyword arguments of `TaskDetails.override` for this submission. Secrets of tools that
        run as child tasks go to those tasks only, not to the agent's. Every secret named is one of
        the namespace's Flyte project (the run is launched there)."""
        import flyte

        from tether.contract import FLYTE_REMOTE_ENV, FLYTE_TOOL_TASKS_ENV, SECRETS_FROM_ENV, TOOL_MODULES_ENV

        spec = sub.request.spec
        env = {**sub.env, FLYTE_REMOTE_ENV: "1"}
        if self.tool_modules is not None:  # as the Kubernetes executor's pods: the runtime enforces it
            env[TOOL_MODULES_ENV] = ",".join(self.tool_modules)
        if tool_tasks:
            env[FLYTE_TOOL_TASKS_ENV] = json.dumps(tool_tasks, sort_keys=True)
        secrets = []
        names: dict[str, str] = {}
        own = [f for f in sub.secret_files if not any(f.path.startswith(f"tools/{t}/") for t in tool_tasks or {})]
        for i, f in enumerate(own):
            var = SECRET_VAR.format(i)
            secrets.append(flyte.Secret(key=flyte_secret_name(f.secret, f.key), as_env_var=var))
            names[f.path] = var
        if names:
            env[SECRETS_FROM_ENV] = json.dumps(names, sort_keys=True)
        if self.store_secret:  # the namespace's own store credentials, never a shared set
            secrets += [flyte.Secret(key=flyte_secret_name(self.store_secret, var), as_env_var=var) for var in STORE_KEYS]
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
            out["service_account"] = self.service_account.format(namespace=sub.request.namespace)
        return out

    async def _get(self, namespace: str, run_name: str) -> Any | None:
        import flyte.remote

        await self._init()
        with self.scope(namespace):
            try:
                return await flyte.remote.Run.get.aio(run_name)
            except Exception as exc:
                if _not_found(exc):
                    return None
                raise

    async def _launch(self, run: _Execution) -> None:
        import flyte

        sub = run.sub
        task = await self.runtime_task(run.namespace, sub.request.spec.image or self.runtime_image)
        remote = await self._get(run.namespace, run.run_name)
        if remote is None:
            overridden = task.override(**self.overrides(sub, await self.tool_tasks(sub)))
            labels = {k.replace("/", "_").replace(".", "_"): v for k, v in sub.labels.items()}
            project = self.project_for(run.namespace)
            try:
                with self.scope(run.namespace):
                    remote = await flyte.with_runcontext(name=run.run_name, labels=labels, project=project, domain=self.domain).run.aio(
                        overridden, sub.request.model_dump_json(by_alias=True), sub.store_url
                    )
            except Exception as exc:
                if not _already_exists(exc):
                    raise
                remote = await self._get(run.namespace, run.run_name)  # submitted concurrently: adopt it
        await self._refresh(run, remote)

    # --------------------------------------------------------------------------- interface

    async def submit(self, submission: Submission) -> ExecutionStatus:
        run = self._runs.get(submission.name)
        if run is not None:
            return run.status()
        run = _Execution(submission)
        self._runs[submission.name] = run
        # Adopt: the newest segment that exists is the current one.
        try:
            while await self._get(run.namespace, segment_name(submission.name, run.segment + 1)) is not None:
                run.segment += 1
        except ValueError as exc:  # the namespace's project cannot be named: refused below
            log.debug("execution %s: %s", submission.name, exc)
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
                remote = await self._get(run.namespace, run.run_name)
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
        namespace = run.namespace if run is not None else namespace
        if namespace is None:  # the project is the namespace's: nothing to find it by
            log.warning("execution %s: no namespace given, nothing aborted", name)
            return
        try:
            self.project_for(namespace)
        except ValueError:  # no project can be named: nothing was ever submitted
            return
        segment = run.segment if run is not None else 1
        if run is None:
            while await self._get(namespace, segment_name(name, segment + 1)) is not None:
                segment += 1
        remote = await self._get(namespace, segment_name(name, segment))
        if remote is not None and not remote.done():
            with self.scope(namespace):
                await remote.abort.aio(reason="the AgentRun was deleted")
        if run is not None:
            run.state, run.message = ExecutionState.ABORTED, "aborted"
            run.changed.set()

    async def close(self) -> None:
        """Operator shutdown: the runs go on in Flyte and are adopted on restart."""
        self._runs.clear()

    # ----------------------------------------------------------------------------- reading

    async def _refresh(self, run: _Execution, remote: Any) -> None:
        self._observe(run, remote)
        if run.state is ExecutionState.SUCCEEDED:
            try:
                with self.scope(run.namespace):
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
        outcome = Outcome.from_json(outputs[0])
        code = run.exit_code = outcome.exit_code
        # The runtime counts its starts: the backend makes a pod that died with a bare exit code
        # again under the same attempt number, so Flyte's count misses those attempts.
        run.attempts = max(run.attempts, outcome.attempts or 0)
        if outcome.retries_exhausted:
            run.failures = run.attempts - 1
        end = attempt_end(code)
        if end is AttemptEnd.SUCCEEDED:
            run.state = ExecutionState.SUCCEEDED
        elif end is AttemptEnd.SUSPENDED:
            run.state, run.message = ExecutionState.SUSPENDED, "waiting for an approval"
        elif outcome.retries_exhausted:
            run.state, run.message = ExecutionState.FAILED, str(outcome.error)
        else:
            run.state, run.message = ExecutionState.FAILED, f"terminal failure: {outcome.error or f'exit code {code}'}"
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
