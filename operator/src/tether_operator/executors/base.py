"""The executor seam: where an AgentRun's runtime process actually runs.

Four methods, all idempotent by execution name (derived from the AgentRun's uid, so an operator
restart submits under the same name and never starts a second execution):

    submit(submission) -> ExecutionStatus   start (or adopt) the execution
    status(name)       -> ExecutionStatus   what it is doing now, None if unknown
    abort(name, namespace)                  stop it for good (AgentRun deleted)
    resume(name)                            start a suspended execution again (approval decided)

The runtime's exit codes are the contract (`python -m tether exec`), read by one function,
`tether.contract.attempt_end`, here and in `tether run`: 0 succeeded, 2 terminal failure, 3
suspended awaiting approval, anything else (130 interrupted, a signal included) recoverable: run
again while failures <= retries. Progress (steps, usage, approvals, result) is not the
executor's business: the runtime writes it to the store and the operator reads it from there.

An executor follows each execution in memory as an `Execution` (`FollowingExecutor`: status,
wait, forget). One that runs the attempts itself (local: a process, kubernetes: a pod) is an
`AttemptingExecutor`, whose `_drive` is the retry loop: it states only how it prepares a run,
runs one attempt and ends one. Flyte runs the attempts and retries itself.

Each executor declares the spec fields it honours (`supports`); `unsupported()` names every field
a run asks for beyond them, and the run is refused (Accepted=False, UnsupportedByExecutor) rather
than silently run without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar

from tether.api import AgentRunSpec, AgentToolSpec
from tether.contract import EXIT_INTERRUPTED as EXIT_INTERRUPTED  # the executors' outcomes
from tether.contract import EXIT_SUCCEEDED as EXIT_SUCCEEDED
from tether.contract import EXIT_SUSPENDED as EXIT_SUSPENDED
from tether.contract import EXIT_TERMINAL as EXIT_TERMINAL
from tether.contract import AttemptEnd, ExecRequest, attempt_end
from tether.secrets import Secrets

from ..conditions import Reason

log = logging.getLogger(__name__)

#: Attempts of one run that may end because the store did not answer (exit code 4, after each
#: waited up to the runtime's TETHER_STORE_OUTAGE_SECONDS) before the run fails, reason
#: StoreUnreachable. They do not count against `retries`: a store outage is not the run's failure.
STORE_OUTAGE_ATTEMPTS = 3


class ExecutionState(str, Enum):
    QUEUED = "Queued"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ABORTED = "Aborted"

    @property
    def finished(self) -> bool:
        return self in (ExecutionState.SUCCEEDED, ExecutionState.FAILED, ExecutionState.ABORTED)


class Capability(str, Enum):
    """Spec fields an executor may or may not honour."""

    IMAGE = "spec.image"
    RESOURCES = "spec.resources"
    NODE_SELECTOR = "spec.nodeSelector"
    TOLERATIONS = "spec.tolerations"
    TOOL_IMAGE = "AgentTool spec.image"
    TOOL_RESOURCES = "AgentTool spec.resources"
    TOOL_GPU = "AgentTool spec.resources.gpu"
    TOOL_MCP = "AgentTool spec.mcp"
    STANDBY = "spec.standby"
    STANDBY_TOOL_GPU = "spec.standby with a GPU AgentTool"  # no executor: its tool pods are per attempt


def unsupported(spec: AgentRunSpec, tools: Mapping[str, AgentToolSpec], supports: frozenset[Capability]) -> list[str]:
    """The fields `spec` (and its tools) set that an executor supporting `supports` would ignore."""
    asked: list[tuple[Capability, str]] = []
    if spec.image:
        asked.append((Capability.IMAGE, "spec.image"))
    if spec.resources is not None:
        asked.append((Capability.RESOURCES, "spec.resources"))
    if spec.node_selector:
        asked.append((Capability.NODE_SELECTOR, "spec.nodeSelector"))
    if spec.tolerations:
        asked.append((Capability.TOLERATIONS, "spec.tolerations"))
    if spec.standby:
        asked.append((Capability.STANDBY, "spec.standby"))
        for name, tool in sorted(tools.items()):
            if tool.resources is not None and tool.resources.gpu is not None and tool.resources.gpu.count > 0:
                asked.append(
                    (Capability.STANDBY_TOOL_GPU, f"spec.standby with AgentTool {name}'s GPU (a standby would hold its GPU pod too)")
                )
    for name, tool in sorted(tools.items()):
        if tool.mcp is not None:
            asked.append((Capability.TOOL_MCP, f"spec.mcp of AgentTool {name}"))
        if tool.image:
            asked.append((Capability.TOOL_IMAGE, f"spec.image of AgentTool {name}"))
        if tool.resources is not None:
            asked.append((Capability.TOOL_RESOURCES, f"spec.resources of AgentTool {name}"))
            # Resources honoured, a GPU not necessarily (a tool container shares the agent's node).
            if tool.resources.gpu is not None and tool.resources.gpu.count > 0 and Capability.TOOL_RESOURCES in supports:
                asked.append((Capability.TOOL_GPU, f"spec.resources.gpu of AgentTool {name}"))
    return [what for capability, what in asked if capability not in supports]


def execution_name(uid: str) -> str:
    """Deterministic execution name of an AgentRun: short, lowercase, starts with a letter."""
    return "t" + hashlib.sha256(uid.encode()).hexdigest()[:19]


@dataclass(frozen=True)
class SecretFile:
    """One Secret key projected into the runner's secrets directory at `path`."""

    secret: str
    key: str
    path: str


@dataclass
class Submission:
    name: str
    request: ExecRequest
    secrets: Secrets = field(default_factory=Secrets, repr=False)
    """The provider key and each tool's own env (contract: tether.secrets): never logged, never
    on disk; the runtime hands each only to its user."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra, non-secret environment of the runtime process."""
    retries: int = 2
    timeout_seconds: float = 3600.0
    attempts: int = 0
    """Attempts already made (from the AgentRun's status, after an operator restart)."""
    failures: int = 0
    """Recoverable failures already counted against `retries`."""
    fresh: bool = False
    """No execution was ever submitted for the run (its status names none): executors need not
    look for one to adopt (one left by an operator that stopped before writing status is still
    found by its name)."""
    suspended: bool = False
    """The run was suspended awaiting approval when last seen: adopt it without starting it."""
    node_selector: dict[str, str] = field(default_factory=dict)
    """Where the runtime should run (spec + GPU node pool); used by executors that make pods."""
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    """Labels for objects the executor creates: the run's labels the chart allows (placement.propagated)."""
    store_url: str = ""
    """The run's store: the operator's store under the run's namespace prefix (empty: the executor's)."""
    secret_files: list[SecretFile] = field(default_factory=list)
    """Secret keys the runtime reads as files (model/apiKey, tools/<tool>/<ENV>): executors that
    make pods mount them; the operator never reads their values for such executors."""


@dataclass
class ExecutionStatus:
    name: str
    state: ExecutionState
    attempts: int = 0
    failures: int = 0
    exit_code: int | None = None
    message: str = ""
    url: str | None = None
    reason: str = ""
    """The condition reason of a failure the executor can name (conditions.Reason), else empty."""
    retried: tuple[int, ...] = ()
    """Exit codes of the attempts this executor saw fail and ran again, in order (an executor that
    runs the attempts itself; not deaths it found adopting the execution, nor the last failure)."""


class Executor(ABC):
    kind: str
    supports: frozenset[Capability] = frozenset()
    """Spec fields this executor honours; a run asking for others is refused."""
    refusal_hint: str = ""
    """Said to a run refused for asking more than `supports`: what to do instead."""
    reads_secrets: bool = True
    """Whether the operator must read the run's Secret values and hand them over in `env`
    (False: the executor's pods mount the Secrets themselves)."""

    @abstractmethod
    async def submit(self, submission: Submission) -> ExecutionStatus: ...

    @abstractmethod
    async def status(self, name: str) -> ExecutionStatus | None: ...

    @abstractmethod
    async def abort(self, name: str, namespace: str | None = None) -> None: ...

    @abstractmethod
    async def resume(self, name: str) -> None: ...

    async def wait(self, name: str, timeout: float) -> None:
        """Return when the execution may have changed, at the latest after `timeout` seconds."""
        await asyncio.sleep(timeout)

    async def probe_tool(self, implementation: str) -> str | None:
        """Why `module:function` cannot be a tool where this executor runs the runtime, or None.
        Default: nothing to say here (a runtime in a pod refuses at start, naming the tool)."""
        return None

    def forget(self, name: str) -> None:
        """Drop a finished execution from memory (the AgentRun's status now holds it)."""

    def executions(self) -> list[ExecutionStatus]:
        """The executions this executor currently holds (for metrics)."""
        return []

    async def close(self) -> None:
        """Stop everything this executor started (operator shutdown)."""

    def observe(self, event: Mapping[str, Any]) -> None:
        """A watch event about an object this executor made (its pods); default: not interested."""


def retried(exit_code: int) -> bool:
    """Whether an attempt that ended with `exit_code` is a failure counted against `retries`,
    after which another attempt runs: recoverable, or interrupted (an executor's attempt is
    stopped by someone else than the run: a node drained, a pod deleted)."""
    return attempt_end(exit_code) in (AttemptEnd.RECOVERABLE, AttemptEnd.INTERRUPTED)


@dataclass
class Execution:
    """One execution an executor follows in memory: what `status` reports, and `changed` set on
    every change so that `wait` returns."""

    sub: Submission
    state: ExecutionState = ExecutionState.QUEUED
    attempts: int = 0
    failures: int = 0
    #: Attempts that ended because the store did not answer (exit code 4): not failures, bounded
    #: by `AttemptingExecutor.store_outage_attempts` (counted while this operator follows the run).
    store_outages: int = 0
    exit_code: int | None = None
    message: str = ""
    reason: str = ""
    url: str | None = None
    retried: list[int] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    """What drives the attempts (executors that run them themselves)."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def status(self) -> ExecutionStatus:
        return ExecutionStatus(
            self.sub.name,
            self.state,
            self.attempts,
            self.failures,
            self.exit_code,
            self.message,
            self.url,
            self.reason,
            tuple(self.retried),
        )

    def set(self, state: ExecutionState, message: str = "", reason: str = "") -> None:
        self.state, self.message, self.reason = state, message, reason
        self.changed.set()


E = TypeVar("E", bound=Execution)


class FollowingExecutor(Executor, Generic[E]):
    """An executor that follows its executions in memory, by name, until they are forgotten."""

    _runs: dict[str, E]
    poll_seconds: float = math.inf
    """How long `wait` waits at most for a change (an executor that must look itself says less)."""

    def executions(self) -> list[ExecutionStatus]:
        return [run.status() for run in self._runs.values()]

    def forget(self, name: str) -> None:
        """Drop a finished execution from memory (the AgentRun's status now holds it)."""
        run = self._runs.get(name)
        if run is not None and run.state.finished:
            del self._runs[name]

    async def status(self, name: str) -> ExecutionStatus | None:
        run = self._runs.get(name)
        return None if run is None else run.status()

    async def wait(self, name: str, timeout: float) -> None:
        """Return when the execution changes, or after `timeout` seconds."""
        run = self._runs.get(name)
        if run is None:
            await asyncio.sleep(timeout)
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(run.changed.wait(), min(timeout, self.poll_seconds))
        run.changed.clear()


class AttemptingExecutor(FollowingExecutor[E]):
    """An executor that runs each attempt itself (a process, a pod) and starts the next one after
    a recoverable failure: the retry loop is `_drive`; an executor says how it prepares a run,
    runs one attempt and what else it does at an attempt's end (the hooks below)."""

    retry_backoff: float = 0.5
    store_outage_attempts: int = STORE_OUTAGE_ATTEMPTS
    starting: str = "starting"
    """The message of a run about to start an attempt."""

    @abstractmethod
    def _execution(self, submission: Submission) -> E:
        """A new execution of `submission` (its attempts and failures so far counted)."""

    async def _prepare(self, run: E, adopt: bool) -> None:
        """Before the first attempt of a start (`adopt`: the execution may be running already)."""

    @abstractmethod
    async def _attempt(self, run: E) -> tuple[int, str]:
        """Run (or follow) the next attempt to its end: its exit code and what happened."""

    async def _suspended(self, run: E) -> None:
        """The attempt ended suspended (before the run says so)."""

    def _backoff(self, run: E) -> float:
        """Seconds between an attempt's recoverable end and the next attempt."""
        return min(self.retry_backoff * 2.0 ** (run.failures - 1), 10.0)

    def _terminal_error(self, run: E) -> str | None:
        """The cause of the attempt's terminal failure, if the executor can read it."""
        return None

    async def submit(self, submission: Submission) -> ExecutionStatus:
        run = self._runs.get(submission.name)
        if run is None:
            run = self._execution(submission)
            self._runs[submission.name] = run
            if submission.suspended:
                run.set(ExecutionState.SUSPENDED, "adopted while awaiting approval")
            else:
                self._start(run, adopt=True)
        return run.status()

    async def resume(self, name: str) -> None:
        run = self._runs.get(name)
        if run is not None and run.state is ExecutionState.SUSPENDED:
            self._start(run, adopt=False)

    async def abort(self, name: str, namespace: str | None = None) -> None:
        await self._unfollow(name)

    async def _unfollow(self, name: str) -> E | None:
        """Stop driving `name` for good (aborted): the execution, if it was followed."""
        run = self._runs.pop(name, None)
        if run is None:
            return None
        if run.task is not None:
            run.task.cancel()
            with contextlib.suppress(BaseException):
                await run.task
        run.set(ExecutionState.ABORTED, "aborted")
        return run

    def _start(self, run: E, adopt: bool) -> None:
        run.set(ExecutionState.QUEUED, self.starting)
        run.task = asyncio.create_task(self._drive(run, adopt), name=f"tether-{self.kind}-{run.sub.name}")

    async def _drive(self, run: E, adopt: bool) -> None:
        """Attempts until success, terminal failure, suspension or retries exhausted."""
        sub = run.sub
        await self._prepare(run, adopt)
        while True:
            code, happened = await self._attempt(run)
            run.exit_code = code
            end = attempt_end(code)
            if end is AttemptEnd.SUCCEEDED:
                return run.set(ExecutionState.SUCCEEDED, happened)
            if end is AttemptEnd.SUSPENDED:  # nothing is held while a human decides
                await self._suspended(run)
                return run.set(ExecutionState.SUSPENDED, "waiting for an approval")
            if end is AttemptEnd.TERMINAL:
                return run.set(ExecutionState.FAILED, self._terminal_error(run) or f"terminal failure (exit code {EXIT_TERMINAL})")
            if end is AttemptEnd.STORE_UNREACHABLE:  # the store's fault, not the run's: not a failure
                run.store_outages += 1
                if run.store_outages > self.store_outage_attempts:
                    why = (
                        f"attempt {run.attempts} {happened}; the store did not answer in {run.store_outages} attempts "
                        f"(each waits for it up to TETHER_STORE_OUTAGE_SECONDS, default 300 s): check the store, then re-create the run"
                    )
                    return run.set(ExecutionState.FAILED, why, Reason.STORE_UNREACHABLE)
                run.retried.append(code)
                log.info("execution %s attempt %d could not reach the store; starting again", sub.name, run.attempts)
                run.set(ExecutionState.QUEUED, f"attempt {run.attempts} {happened}; starting again (not counted against retries)")
                await asyncio.sleep(min(self.retry_backoff * 2.0 ** (run.store_outages - 1), 10.0))
                continue
            run.failures += 1  # the attempt was `retried`
            if run.failures > sub.retries:
                return run.set(ExecutionState.FAILED, f"attempt {run.attempts} {happened}; retries exhausted ({sub.retries})")
            run.retried.append(code)
            log.info("execution %s attempt %d %s; retrying", sub.name, run.attempts, happened)
            run.set(ExecutionState.QUEUED, f"attempt {run.attempts} {happened}; retrying")
            await asyncio.sleep(self._backoff(run))
