"""The executor seam: where an AgentRun's runtime process actually runs.

Four methods, all idempotent by execution name (derived from the AgentRun's uid, so an operator
restart submits under the same name and never starts a second execution):

    submit(submission) -> ExecutionStatus   start (or adopt) the execution
    status(name)       -> ExecutionStatus   what it is doing now, None if unknown
    abort(name, namespace)                  stop it for good (AgentRun deleted)
    resume(name)                            start a suspended execution again (approval decided)

The runtime's exit codes are the contract (`python -m tether exec`): 0 succeeded, 2 terminal
failure, 3 suspended awaiting approval, anything else (a signal included) recoverable: run again
while failures <= retries. Progress (steps, usage, approvals, result) is not the executor's
business: the runtime writes it to the store and the operator reads it from there.

Each executor declares the spec fields it honours (`supports`); `unsupported()` names every field
a run asks for beyond them, and the run is refused (Accepted=False, UnsupportedByExecutor) rather
than silently run without it.
"""

from __future__ import annotations

import asyncio
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, Protocol, TypeVar

from tether.api import AgentRunSpec, AgentToolSpec, ExecRequest
from tether.contract import EXIT_SUCCEEDED as EXIT_SUCCEEDED  # the executors' outcomes
from tether.contract import EXIT_SUSPENDED as EXIT_SUSPENDED
from tether.contract import EXIT_TERMINAL as EXIT_TERMINAL
from tether.secrets import Secrets


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
    for name, tool in sorted(tools.items()):
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


class Followed(Protocol):
    """An execution an executor follows in memory."""

    state: ExecutionState

    def status(self) -> ExecutionStatus: ...


F = TypeVar("F", bound=Followed)


class FollowingExecutor(Executor, Generic[F]):
    """An executor that follows its executions in memory, by name, until they are forgotten."""

    _runs: dict[str, F]

    def executions(self) -> list[ExecutionStatus]:
        return [run.status() for run in self._runs.values()]

    def forget(self, name: str) -> None:
        """Drop a finished execution from memory (the AgentRun's status now holds it)."""
        run = self._runs.get(name)
        if run is not None and run.state.finished:
            del self._runs[name]
