"""The executor seam: where an AgentRun's runtime process actually runs.

Four methods, all idempotent by execution name (derived from the AgentRun's uid, so an operator
restart submits under the same name and never starts a second execution):

    submit(submission) -> ExecutionStatus   start (or adopt) the execution
    status(name)       -> ExecutionStatus   what it is doing now, None if unknown
    abort(name)                             stop it for good (AgentRun deleted)
    resume(name)                            start a suspended execution again (approval decided)

The runtime's exit codes are the contract (`python -m tether exec`): 0 succeeded, 2 terminal
failure, 3 suspended awaiting approval, anything else (a signal included) recoverable: run again
while failures <= retries. Progress (steps, usage, approvals, result) is not the executor's
business: the runtime writes it to the store and the operator reads it from there.
"""

from __future__ import annotations

import asyncio
import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum

from tether.api import ExecRequest
from tether.secrets import Secrets

EXIT_SUCCEEDED = 0
EXIT_TERMINAL = 2
EXIT_SUSPENDED = 3


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


def execution_name(uid: str) -> str:
    """Deterministic execution name of an AgentRun: short, lowercase, starts with a letter."""
    return "t" + hashlib.sha256(uid.encode()).hexdigest()[:19]


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
    tolerations: list[dict] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    """Labels for objects the executor creates: the run's, without GitOps tracking keys."""


@dataclass
class ExecutionStatus:
    name: str
    state: ExecutionState
    attempts: int = 0
    failures: int = 0
    exit_code: int | None = None
    message: str = ""
    url: str | None = None


class Executor(ABC):
    kind: str

    @abstractmethod
    async def submit(self, submission: Submission) -> ExecutionStatus: ...

    @abstractmethod
    async def status(self, name: str) -> ExecutionStatus | None: ...

    @abstractmethod
    async def abort(self, name: str) -> None: ...

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
