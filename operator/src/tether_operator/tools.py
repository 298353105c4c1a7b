"""AgentTool status: Ready when every Secret its env names exists and its resources are valid."""

from __future__ import annotations

from typing import Any

from tether.api import AgentToolSpec

from . import conditions as C
from . import kube
from .checks import Problem, check_tool
from .conditions import Reason


def _essence(conditions: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Conditions without timestamps, to tell a real change from a repeat."""
    return sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in conditions)


async def reconcile_tool(
    namespace: str,
    name: str,
    generation: int,
    spec: dict[str, Any],
    status: dict[str, Any],
    gpu_node_pools: dict[str, Any],
) -> tuple[str, str] | None:
    """Check the tool and patch its status if it changed; returns (reason, message) on a change."""
    conditions = list(status.get("conditions") or [])
    try:
        tool = AgentToolSpec.model_validate(spec)
        problems = (await check_tool(namespace, name, tool, gpu_node_pools)).problems
    except ValueError as exc:
        problems = [Problem("InvalidSpec", str(exc), terminal=True)]
    if not problems:
        reason, message = Reason.VALID, "the tool's Secrets and resources resolve"
        new = C.kstatus(conditions, ready=(reason, message), generation=generation)
    else:
        reason, message = problems[0].reason, "; ".join(p.message for p in problems)
        if any(p.terminal for p in problems):
            new = C.kstatus(conditions, stalled=(reason, message), generation=generation)
        else:
            new = C.kstatus(conditions, reconciling=(reason, f"waiting: {message}"), generation=generation)
    if _essence(new) == _essence(conditions) and status.get("observedGeneration") == generation:
        return None
    await kube.patch_status("agenttools", namespace, name, {"observedGeneration": generation, "conditions": new})
    return reason, message
