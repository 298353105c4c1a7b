"""Semantic checks the apiserver cannot make: do the things a spec names exist, may it use them?

Each problem is a condition reason plus a message that says exactly what is missing. Missing
things (an AgentTool, a Secret, a key, the Secret's Tether label) may still appear, so the run
waits and looks again; invalid ones (a GPU type no node pool offers, a tool implementation from a
module the cluster admin did not allow) are terminal.

Secrets: only Secrets labelled ``tether.dev/usable=true`` are ever read, so a run cannot make the
operator hand out a Secret nobody meant for Tether (the chart's admission policy also checks that
whoever creates an AgentRun or AgentTool may ``get`` each Secret it names).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.api import AgentRunSpec, AgentToolSpec, Resources
from tether.secrets import Secrets
from tether.tools import implementation_refusal

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
    model_key: str | None = field(default=None, repr=False)
    tool_env: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    """Secret values: the provider key (the agent's only) and each tool's own env."""

    @property
    def secrets(self) -> Secrets:
        return Secrets(model_key=self.model_key, tools=self.tool_env)


USABLE_LABEL = "tether.dev/usable"


def check_resources(resources: Resources | None, gpu_node_pools: dict, what: str) -> list[Problem]:
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


async def _secret_value(namespace: str, name: str, key: str, what: str) -> str | Problem:
    secret = await kube.read_secret(namespace, name)
    if secret is None:
        return Problem(Reason.MISSING_SECRET, f"Secret {namespace}/{name} ({what}) not found")
    labels, data = secret
    if labels.get(USABLE_LABEL) != "true":
        return Problem(Reason.SECRET_NOT_USABLE, f"Secret {namespace}/{name} ({what}) is not labelled {USABLE_LABEL}=true")
    if key not in data:
        return Problem(Reason.MISSING_SECRET_KEY, f"Secret {namespace}/{name} has no key {key!r} ({what})")
    return data[key]


def check_implementation(name: str, spec: AgentToolSpec, allowed: tuple[str, ...] | None) -> list[Problem]:
    """The static part of the allowlist: ``allowed`` None means "the runtime image's default",
    which only the runtime knows (it refuses at start); the standard library is refused here."""
    refusal = implementation_refusal(spec.implementation, allowed if allowed is not None else (spec.implementation.partition(":")[0],))
    if refusal:
        return [Problem(Reason.TOOL_NOT_ALLOWED, f"AgentTool {name}: {refusal}", terminal=True)]
    return []


async def check_tool(
    namespace: str, name: str, spec: AgentToolSpec, gpu_node_pools: dict, allowed: tuple[str, ...] | None = None
) -> Resolved:
    out = Resolved(problems=check_resources(spec.resources, gpu_node_pools, f"AgentTool {name}"))
    out.problems += check_implementation(name, spec, allowed)
    env: dict[str, str] = {}
    for item in spec.env or []:
        ref = item.secret_key_ref
        value = await _secret_value(namespace, ref.name, ref.key, f"env {item.name} of AgentTool {name}")
        if isinstance(value, Problem):
            out.problems.append(value)
        else:
            env[item.name] = value
    out.tool_env[name] = env
    return out


async def check_run(namespace: str, spec: AgentRunSpec, gpu_node_pools: dict, allowed: tuple[str, ...] | None = None) -> Resolved:
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
        resolved = await check_tool(namespace, name, tool, gpu_node_pools, allowed)
        out.problems += resolved.problems
        out.tool_env.update(resolved.tool_env)
        out.tools[name] = tool
    ref = spec.model.api_key_secret_ref
    if ref is not None:
        value = await _secret_value(namespace, ref.name, ref.key, "model API key")
        if isinstance(value, Problem):
            out.problems.append(value)
        else:
            out.model_key = value
    return out
