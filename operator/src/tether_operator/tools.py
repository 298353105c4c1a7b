"""AgentTool status: Ready when its implementation is allowed and importable where it will run,
its image is allowed, every Secret its env names exists (labelled for Tether, and guarded by the
Secret access policy) and its resources are valid."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tether.api import AgentToolSpec, ManifestError, read_spec

from . import conditions as C
from . import kube
from .checks import Problem, check_tool
from .conditions import Reason
from .settings import Settings


def _essence(conditions: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Conditions without timestamps, to tell a real change from a repeat."""
    return sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in conditions)


async def reconcile_tool(
    namespace: str,
    name: str,
    generation: int,
    spec: dict[str, Any],
    status: dict[str, Any],
    settings: Settings,
    probe: Callable[[str], Awaitable[str | None]] | None = None,
    *,
    read_secrets: bool = True,
    created: str | None = None,
) -> tuple[str, str] | None:
    """Check the tool and patch its status if it changed; returns (reason, message) on a change."""
    conditions = list(status.get("conditions") or [])
    try:
        tool = read_spec(AgentToolSpec, spec)
        problems = (await check_tool(namespace, name, tool, settings, read_secrets=read_secrets, created=created)).problems
        if (
            probe is not None
            and tool.implementation is not None
            and not any(p.reason in (Reason.TOOL_NOT_ALLOWED, Reason.NAMESPACE_NOT_SERVED) for p in problems)
        ):
            # Importability is checked where the runtime runs, never in the operator's process.
            refusal = await probe(tool.implementation)
            if refusal:
                problems.append(Problem(Reason.TOOL_NOT_IMPORTABLE, f"AgentTool {name}: {refusal}", terminal=True))
    except ManifestError as exc:  # past the apiserver, refused by the runtime's model: say which field
        problems = [Problem(Reason.INVALID_SPEC, str(exc), terminal=True)]
    if not problems:
        reason, message = Reason.VALID, "the tool's implementation, image, Secrets and resources resolve"
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
