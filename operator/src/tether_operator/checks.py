"""Semantic checks the apiserver cannot make: do the things a spec names exist, may it use them?

Each problem is a condition reason plus a message that says exactly what is missing. Missing
things (an AgentTool, a Secret, a key, the Secret's Tether label) may still appear, so the run
waits and looks again; invalid ones (a GPU type no node pool offers, a base URL the cluster does
not allow, a tool implementation from a module the cluster admin did not allow) are terminal.

Secrets: only Secrets labelled ``tether.dev/usable=true`` are ever read, so a run cannot make the
operator hand out a Secret nobody meant for Tether (the chart's admission policy also checks that
whoever creates an AgentRun or AgentTool may ``get`` each Secret it names).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from tether.api import AgentRunSpec, AgentToolSpec, ManifestError, Resources, read_spec
from tether.secrets import Secrets
from tether.tools import implementation_refusal

from . import kube
from .conditions import Reason
from .settings import RESERVED_NAMESPACES


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


def check_resources(resources: Resources | None, gpu_node_pools: dict[str, object], what: str) -> list[Problem]:
    gpu = resources.gpu if resources else None
    if gpu is None or gpu.count == 0:
        return []
    if gpu.type not in gpu_node_pools:
        offered = ", ".join(sorted(gpu_node_pools)) or "none"
        return [
            Problem(
                Reason.INVALID_RESOURCES,
                f"spec.resources.gpu.type of {what}: {gpu.type!r} is not a GPU type this cluster offers "
                f"(asked for {gpu.count}; chart value gpuNodePools configures: {offered})",
                terminal=True,
            )
        ]
    return []


# Names that reach a cloud's instance metadata service (and with it the node's credentials), for
# where they do not resolve in the operator's view but do in the pod's: GCE's, and EC2's short name.
METADATA_HOSTS = frozenset({"metadata.google.internal", "instance-data"})
_ADMIN_HINT = "; a cluster admin can allow it with the chart value providers.allowedBaseURLs"
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, Azure (IMDS), GCP, Oracle, OpenStack, DigitalOcean... (link-local anyway)
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "100.100.100.200",  # Alibaba Cloud ECS metadata (in 100.64/10, not link-local)
        "168.63.129.16",  # Azure WireServer (a public address, reached from every VM)
        "192.0.0.192",  # Oracle Cloud (Classic / Cloud@Customer) metadata
    )
)
# IPv6 prefixes that carry an IPv4 address a gateway forwards to: NAT64 (RFC 6052 well-known
# 64:ff9b::/96, RFC 8215 local-use 64:ff9b:1::/48 with the RFC 6052 layouts of a /48../96 prefix)
# and 6to4 (2002::/16). 64:ff9b::a9fe:a9fe is 169.254.169.254 to a NAT64 gateway. (IPv4-mapped
# ::ffff:a.b.c.d is the IPv4 address itself.)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
# (prefix length, bit offsets of the IPv4 address's bytes) per RFC 6052 §2.2; bits 64-71 are zero.
_RFC6052_LAYOUTS = ((48, (48, 56, 72, 80)), (56, (56, 72, 80, 88)), (64, (72, 80, 88, 96)), (96, (96, 104, 112, 120)))


def _translated_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses a NAT64 or 6to4 gateway would send this IPv6 address's packets to."""
    if address.sixtofour is not None:
        return [address.sixtofour]
    bits = int(address)
    if address in _NAT64:
        return [ipaddress.IPv4Address(bits & 0xFFFFFFFF)]
    if address in _NAT64_LOCAL:  # the network's NAT64 prefix length is unknown: every layout counts
        return [ipaddress.IPv4Address(bytes((bits >> (120 - offset)) & 0xFF for offset in offsets)) for _, offsets in _RFC6052_LAYOUTS]
    return []


def _unsafe(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    return None


def _forbidden(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why the operator will not send a provider key to this address, or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if isinstance(address, ipaddress.IPv6Address):
        for inner in _translated_ipv4(address):
            why = _unsafe(inner)
            if why:
                return f"{why} ({inner}) behind a NAT64 or 6to4 prefix"
    if address.is_unspecified:
        return "an unspecified address"
    return _unsafe(address)


def url_allowed(url: str, allowed: tuple[str, ...]) -> bool:
    """True if `url` falls under one of the allowed base URLs: same scheme, host and port (any port
    when the entry names none), and a path under the entry's path (whole segments)."""
    got = urlsplit(url)
    for entry in allowed:
        want = urlsplit(entry)
        if (got.scheme, got.hostname) != (want.scheme, want.hostname):
            continue
        if want.port is not None and got.port != want.port:
            continue
        prefix = want.path.rstrip("/")
        if got.path == prefix or got.path.startswith(prefix + "/"):
            return True
    return False


async def _addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


async def check_base_url(url: str | None, allowed: tuple[str, ...]) -> list[Problem]:
    """The provider endpoint a run's API key will be sent to (spec.model.baseURL).

    With an allowlist (chart value providers.allowedBaseURLs) only its entries pass, and an entry
    is trusted as it is (that is how a dev install reaches a fake provider on loopback). Without
    one, any host passes unless it is, or resolves to, a loopback, link-local, unspecified or cloud
    metadata address. The check runs at accept; the runner resolves the name again later, so pair
    it with an egress NetworkPolicy where DNS answers can change.
    """
    if url is None:
        return []
    field_ = f"spec.model.baseURL {url!r}"
    if allowed:
        if url_allowed(url, allowed):
            return []
        return [
            Problem(
                Reason.BASE_URL_NOT_ALLOWED,
                f"{field_} is not under an allowed base URL (chart value providers.allowedBaseURLs: {', '.join(allowed)})",
                terminal=True,
            )
        ]
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    named = "a cloud metadata name" if host in METADATA_HOSTS else None
    if host == "localhost" or host.endswith(".localhost"):  # RFC 6761: always loopback
        named = "a loopback name"
    if named:
        return [Problem(Reason.BASE_URL_NOT_ALLOWED, f"{field_}: {host} is {named}{_ADMIN_HINT}", terminal=True)]
    try:
        addresses = await _addresses(host)
    except OSError as exc:  # DNS may answer later (a Service being created): wait, as for a Secret
        return [Problem(Reason.BASE_URL_UNRESOLVED, f"{field_}: cannot resolve {host}: {exc}")]
    for address in addresses:
        why = _forbidden(address)
        if why:
            resolved = "" if str(address) == host else f" resolves to {address},"
            return [
                Problem(
                    Reason.BASE_URL_NOT_ALLOWED,
                    f"{field_}: {host}{resolved} is {why}{_ADMIN_HINT}",
                    terminal=True,
                )
            ]
    return []


def check_namespace(namespace: str) -> list[Problem]:
    """The cluster's own namespaces are never served, cluster-wide included: a ClusterRole grants
    the operator pods there too, so the refusal is the operator's."""
    if namespace not in RESERVED_NAMESPACES:
        return []
    return [
        Problem(
            Reason.NAMESPACE_NOT_SERVED,
            f"namespace {namespace}: Tether never serves {', '.join(RESERVED_NAMESPACES)} (the cluster's own namespaces), "
            "even cluster-wide; use another namespace",
            terminal=True,
        )
    ]


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


def check_approval(spec: AgentToolSpec, what: str, allow_auto_approve: bool) -> list[Problem]:
    """An approval timeout may approve only where the cluster admin allows it (chart value)."""
    approval = spec.approval
    if approval is None or approval.default_action != "approve" or allow_auto_approve:
        return []
    return [
        Problem(
            Reason.AUTO_APPROVE_NOT_ALLOWED,
            f"{what}: spec.approval.defaultAction: approve would run the tool with no human asked; this cluster does not "
            "allow auto-approval (chart value approvals.allowAutoApprove): use defaultAction: decline",
            terminal=True,
        )
    ]


async def check_tool(
    namespace: str,
    name: str,
    spec: AgentToolSpec,
    gpu_node_pools: dict[str, object],
    allowed: tuple[str, ...] | None = None,
    *,
    allow_auto_approve: bool = False,
    read_secrets: bool = True,
) -> Resolved:
    if refused := check_namespace(namespace):
        return Resolved(problems=refused)
    out = Resolved(problems=check_resources(spec.resources, gpu_node_pools, f"AgentTool {name}"))
    out.problems += check_approval(spec, f"AgentTool {name}", allow_auto_approve)
    out.problems += check_implementation(name, spec, allowed)
    env: dict[str, str] = {}
    for item in (spec.env or []) if read_secrets else []:
        ref = item.secret_key_ref
        value = await _secret_value(namespace, ref.name, ref.key, f"env {item.name} of AgentTool {name}")
        if isinstance(value, Problem):
            out.problems.append(value)
        else:
            env[item.name] = value
    out.tool_env[name] = env
    return out


async def check_run(
    namespace: str,
    spec: AgentRunSpec,
    gpu_node_pools: dict[str, object],
    allowed: tuple[str, ...] | None = None,
    allowed_base_urls: tuple[str, ...] = (),
    *,
    allow_auto_approve: bool = False,
    read_secrets: bool = True,
) -> Resolved:
    """`read_secrets=False` (executors whose pods mount the Secrets): Secrets are neither read
    nor checked by the operator; a missing one keeps the runner pod from starting."""
    if refused := check_namespace(namespace):  # nothing there is looked at, Secrets and tools included
        return Resolved(problems=refused)
    out = Resolved(problems=check_resources(spec.resources, gpu_node_pools, "the run"))
    out.problems += await check_base_url(spec.model.base_url, allowed_base_urls)
    for name in spec.tools:
        obj = await kube.get_tool(namespace, name)
        if obj is None:
            out.problems.append(Problem(Reason.UNKNOWN_TOOL, f"AgentTool {namespace}/{name} not found"))
            continue
        try:
            tool = read_spec(AgentToolSpec, obj.get("spec") or {})
        except ManifestError as exc:  # an older or newer CRD version than this operator knows
            out.problems.append(Problem(Reason.TOOL_NOT_READY, f"AgentTool {name}: {exc}"))
            continue
        resolved = await check_tool(
            namespace, name, tool, gpu_node_pools, allowed, allow_auto_approve=allow_auto_approve, read_secrets=read_secrets
        )
        out.problems += resolved.problems
        out.tool_env.update(resolved.tool_env)
        out.tools[name] = tool
    ref = spec.model.api_key_secret_ref
    if ref is not None and read_secrets:
        value = await _secret_value(namespace, ref.name, ref.key, "model API key")
        if isinstance(value, Problem):
            out.problems.append(value)
        else:
            out.model_key = value
    return out
