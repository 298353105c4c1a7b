"""Tether's Kubernetes operator: AgentRun/AgentTool reconciliation, executors, status, approvals.

Public surface: the executor seam (`Executor`, `LocalExecutor`, `Submission`, `execution_name`),
`Settings`, and `build_registry` (kopf handlers on an explicit registry). Run it with
`python -m tether_operator`.
"""

from typing import TYPE_CHECKING

from .executors.base import ExecutionState, ExecutionStatus, Executor, Submission, execution_name
from .executors.local import LocalExecutor
from .settings import Settings

if TYPE_CHECKING:
    import kopf


def build_registry(settings: Settings) -> "kopf.OperatorRegistry":  # imported lazily: kopf costs a second to import
    from .handlers import build_registry as build

    return build(settings)


__all__ = [
    "ExecutionState",
    "ExecutionStatus",
    "Executor",
    "LocalExecutor",
    "Settings",
    "Submission",
    "build_registry",
    "execution_name",
]
