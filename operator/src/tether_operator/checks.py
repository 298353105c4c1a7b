"""Semantic checks the apiserver cannot make: do the things a spec names exist?

Each problem is a condition reason plus a message that says exactly what is missing. Missing
things (an AgentTool, a Secret, a key) may still appear, so the run waits and looks again;
invalid ones (a GPU type no node pool offers) are terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.api import PROVIDER_KEY_ENV, AgentRunSpec, AgentToolSpec, Resources

from . import kube
from .conditions import Reason


@dataclass
class Problem:
    reason: str
    message: str
    terminal: bool = False


@dataclass
class Resolved:
    """What a run needs from the cluster, once every problem is gone."""

    problems: list[Problem] = field(default_factory=list)
    tools: dict[str, AgentToolSpec] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict, repr=False)
    """Secret values for the runtime's environment: API key and tools' env."""


def check_resources(resources: Resources | None, gpu_node_pools: dict[str, Any], what: str) -> list[Problem]:
    gpu = resources.gpu if resources else None
    if gpu is None or gpu.count == 0:
        return []
    if gpu.type not in gpu_node_pools:
        offered = ", ".join(sorted(gpu_node_pools)) or "none"
        return [
            Problem(
                Reason.INVALID_RESOURCES,
                f"{what} asks for {gpu.count} x {gpu.type} GPU but no GPU node pool {gpu.type!r} is "
                f"configured (chart value gpuNodePools; configured: {offered})",
                terminal=True,
            )
        ]
    return []


async def _secret_value(namespace: str, name: str, key: str, what: str, env: dict[str, Any], var: str) -> Problem | None:
    data = await kube.get_secret(namespace, name)
    if data is None:
        return Problem(Reason.MISSING_SECRET, f"Secret {namespace}/{name} ({what}) not found")
    if key not in data:
        return Problem(Reason.MISSING_SECRET_KEY, f"Secret {namespace}/{name} has no key {key!r} ({what})")
    env[var] = data[key]
    return None


async def check_tool(namespace: str, name: str, spec: AgentToolSpec, gpu_node_pools: dict[str, Any]) -> Resolved:
    out = Resolved(problems=check_resources(spec.resources, gpu_node_pools, f"AgentTool {name}"))
    for item in spec.env or []:
        ref = item.secret_key_ref
        problem = await _secret_value(namespace, ref.name, ref.key, f"env {item.name} of AgentTool {name}", out.env, item.name)
        if problem:
            out.problems.append(problem)
    return out


async def check_run(namespace: str, spec: AgentRunSpec, gpu_node_pools: dict[str, Any]) -> Resolved:
    out = Resolved(problems=check_resources(spec.resources, gpu_node_pools, "the run"))
    for name in spec.tools:
        obj = await kube.get_tool(namespace, name)
        if obj is None:
            out.problems.append(Problem(Reason.UNKNOWN_TOOL, f"AgentTool {namespace}/{name} not found"))
            continue
        try:
            tool = AgentToolSpec.model_validate(obj.get("spec") or {})
        except ValueError as exc:  # an older or newer CRD version than this operator knows
            out.problems.append(Problem(Reason.TOOL_NOT_READY, f"AgentTool {name}: {exc}"))
            continue
        resolved = await check_tool(namespace, name, tool, gpu_node_pools)
        out.problems += resolved.problems
        out.env.update(resolved.env)
        out.tools[name] = tool
    ref = spec.model.api_key_secret_ref
    if ref is not None:
        var = PROVIDER_KEY_ENV[spec.model.provider]
        problem = await _secret_value(namespace, ref.name, ref.key, "model API key", out.env, var)
        if problem:
            out.problems.append(problem)
    return out
