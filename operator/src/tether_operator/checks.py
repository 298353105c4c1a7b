"""Semantic checks the apiserver cannot make: do the things a spec names exist, may it use them?

Each problem is a condition reason plus a message that says exactly what is missing. Missing
things (an AgentTool, a Secret, a key, the Secret's Tether label, the admission policy) may still
appear, so the run waits and looks again; invalid ones (a GPU type no node pool offers, a base
URL, image or module the cluster admin did not allow) are terminal.

Secrets, in every executor: a Secret is used only if it is labelled ``tether.dev/usable=true``
(else SecretNotUsable). Executors whose pods mount the Secrets (kubernetes, flyte) make the
operator read a Secret's metadata only (its labels; the apiserver sends no data); the local
executor reads the values it hands to its subprocess. Whether the run's creator may use a Secret
is the chart's admission policy's question (the apiserver asks it with the creator's own identity,
which the operator never has): runs that would use Secrets wait (AdmissionPolicyMissing) unless
that policy and its binding are in place, or the cluster is declared single-tenant.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from tether.api import AgentRunSpec, AgentToolSpec, ManifestError, Resources, read_spec
from tether.secrets import Secrets
from tether.tools import agent_refusal, implementation_refusal

from . import images, kube
from .conditions import Reason
from .settings import RESERVED_NAMESPACES, Settings
from .times import epoch


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
    return await _forbidden_endpoint(url, field_, unresolved_waits=True)


async def check_mcp_url(url: str | None, allowed: tuple[str, ...], tool: str) -> list[Problem]:
    """The remote MCP server an AgentTool's calls (and its Secret headers) go to (spec.mcp.url):
    refused, like a provider's base URL, if it is or resolves to a loopback, link-local,
    unspecified or cloud metadata address, unless under an entry of providers.allowedBaseURLs (the
    admin's trusted endpoints: a dev install's loopback server). Unlike a provider, the list does
    not limit MCP servers to its entries, and a name that does not resolve yet passes (the server
    may be a Service created later; the call then fails at the wire, its transport error not the
    tool's answer)."""
    if url is None or (allowed and url_allowed(url, allowed)):
        return []
    return await _forbidden_endpoint(url, f"spec.mcp.url {url!r} of AgentTool {tool}", unresolved_waits=False)


async def _forbidden_endpoint(url: str, field_: str, *, unresolved_waits: bool) -> list[Problem]:
    """A refusal if ``url``'s host is, or resolves to, an address no run may send a credential to."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    named = "a cloud metadata name" if host in METADATA_HOSTS else None
    if host == "localhost" or host.endswith(".localhost"):  # RFC 6761: always loopback
        named = "a loopback name"
    if named:
        return [Problem(Reason.BASE_URL_NOT_ALLOWED, f"{field_}: {host} is {named}{_ADMIN_HINT}", terminal=True)]
    try:
        addresses = await _addresses(host)
    except OSError as exc:  # DNS may answer later (a Service being created): wait, as for a Secret
        return [Problem(Reason.BASE_URL_UNRESOLVED, f"{field_}: cannot resolve {host}: {exc}")] if unresolved_waits else []
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


async def _secret_value(namespace: str, name: str, key: str, what: str, read_value: bool) -> str | None | Problem:
    """The value of one Secret key (None when `read_value` is off: only the Secret's metadata is
    read, and a missing key keeps the pod that mounts it from starting), or why not."""
    if read_value:
        secret = await kube.read_secret(namespace, name)
    else:
        found = await kube.secret_labels(namespace, name)
        secret = None if found is None else (found, {})
    if secret is None:
        return Problem(Reason.MISSING_SECRET, f"Secret {namespace}/{name} ({what}) not found")
    labels, data = secret
    if labels.get(USABLE_LABEL) != "true":
        return Problem(Reason.SECRET_NOT_USABLE, f"Secret {namespace}/{name} ({what}) is not labelled {USABLE_LABEL}=true")
    if not read_value:
        return None
    if key not in data:
        return Problem(Reason.MISSING_SECRET_KEY, f"Secret {namespace}/{name} has no key {key!r} ({what})")
    return data[key]


_POLICY_TTL = 5.0
# Creation times have whole seconds, and the apiserver applies a new binding a moment after it
# exists: an object created this soon after the policy may have been admitted without it.
_POLICY_GRACE = 2.0


@dataclass
class _Guard:
    missing: str | None  # why the policy does not guard every AgentRun and AgentTool
    since: float = 0.0  # when the policy and its binding both existed (epoch seconds)
    checked: float = 0.0


_guards: dict[str, _Guard] = {}


def _when(timestamp: str | None) -> float:
    return epoch(timestamp) or 0.0


def _guard_of(name: str, policy: dict[str, Any] | None, binding: dict[str, Any] | None) -> _Guard:
    if policy is None:
        return _Guard(f"ValidatingAdmissionPolicy {name} not found")
    if (policy.get("spec") or {}).get("failurePolicy") == "Ignore":
        return _Guard(f"ValidatingAdmissionPolicy {name} has failurePolicy Ignore")
    if binding is None:
        return _Guard(f"ValidatingAdmissionPolicyBinding {name} not found")
    spec = binding.get("spec") or {}
    if spec.get("policyName") != name or "Deny" not in (spec.get("validationActions") or []):
        return _Guard(f"ValidatingAdmissionPolicyBinding {name} does not deny with policy {name}")
    if spec.get("matchResources"):  # the chart's binding matches everything: a narrower one leaves gaps
        return _Guard(f"ValidatingAdmissionPolicyBinding {name} is narrowed by matchResources")
    created = [_when((o.get("metadata") or {}).get("creationTimestamp")) for o in (policy, binding)]
    return _Guard(None, max(created))


async def check_admission_policy(settings: Settings, created: str | None = None, what: str = "") -> list[Problem]:
    """Secrets may be used only while the apiserver checks their users' rights (the chart's
    secretAccessPolicy), or on a cluster declared single-tenant. `created`: the creation time of
    the object `what` that names the Secrets (specs are immutable: it was admitted then); one
    created before the policy was in place was never checked, and never will be.
    The policy is looked up at most every few seconds (many waiting runs ask)."""
    if settings.single_tenant:
        return []
    name = settings.secret_access_policy
    guard = _guards.get(name)
    if guard is None or time.monotonic() - guard.checked > _POLICY_TTL:
        try:
            guard = _guard_of(name, *await kube.admission_policy(name))
        except kube.KubeError as exc:  # e.g. 403: the operator may not look (its RBAC is not the chart's)
            guard = _Guard(f"cannot read ValidatingAdmissionPolicy {name}: HTTP {exc.status}")
        guard.checked = time.monotonic()
        _guards[name] = guard
    if guard.missing is not None:
        return [
            Problem(
                Reason.ADMISSION_POLICY_MISSING,
                f"{guard.missing}: without it nobody checks that the creator may use the Secrets named; "
                "install it (chart value secretAccessPolicy.enabled: true) or declare the cluster single-tenant "
                "(chart value tenancy: single-tenant)",
            )
        ]
    if created is not None and _when(created) < guard.since + _POLICY_GRACE:
        since = datetime.fromtimestamp(guard.since, UTC).isoformat().replace("+00:00", "Z")
        return [
            Problem(
                Reason.ADMISSION_POLICY_MISSING,
                f"{what} was created at {created}, before ValidatingAdmissionPolicy {name} and its binding were in place "
                f"(since {since}): nobody checked that its creator may use the Secrets it names; delete and recreate it",
                terminal=True,
            )
        ]
    return []


def check_image(image: str | None, allowed: tuple[str, ...], field: str) -> list[Problem]:
    refusal = images.refusal(image, allowed, field) if image else None
    return [Problem(Reason.IMAGE_NOT_ALLOWED, refusal, terminal=True)] if refusal else []


def check_agent(agent: str | None, allowed: tuple[str, ...] | None) -> list[Problem]:
    """As for tools (`check_implementation`): None means the runtime image's default, which the
    runtime enforces; the standard library is refused here."""
    if not agent:
        return []
    refusal = agent_refusal(agent, allowed if allowed is not None else (agent.partition(":")[0],))
    return [Problem(Reason.AGENT_NOT_ALLOWED, f"spec.agent: {refusal}", terminal=True)] if refusal else []


def check_implementation(name: str, spec: AgentToolSpec, allowed: tuple[str, ...] | None) -> list[Problem]:
    """The static part of the allowlist: ``allowed`` None means "the runtime image's default",
    which only the runtime knows (it refuses at start); the standard library is refused here. An
    MCP server has no module (its stdio command runs in the tool's image, which is checked)."""
    if spec.implementation is None:
        return []
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
    namespace: str, name: str, spec: AgentToolSpec, settings: Settings, *, read_secrets: bool = True, created: str | None = None
) -> Resolved:
    """`created`: the AgentTool's creationTimestamp (its Secrets were checked against its creator then)."""
    if refused := check_namespace(namespace):
        return Resolved(problems=refused)
    out = Resolved(problems=check_resources(spec.resources, settings.gpu_node_pools, f"AgentTool {name}"))
    out.problems += check_approval(spec, f"AgentTool {name}", settings.allow_auto_approve)
    out.problems += check_implementation(name, spec, settings.tool_modules)
    out.problems += check_image(spec.image, settings.images_allowed, f"spec.image of AgentTool {name}")
    out.problems += await check_mcp_url(spec.mcp.url if spec.mcp else None, settings.allowed_base_urls, name)
    env: dict[str, str] = {}
    refs = [(item.name, item.secret_key_ref, f"env {item.name}") for item in spec.env or []]
    refs += [(h.name, h.secret_key_ref, f"spec.mcp.headers {h.name}") for h in (spec.mcp.headers if spec.mcp else None) or []]
    for key, ref, what in refs:
        value = await _secret_value(namespace, ref.name, ref.key, f"{what} of AgentTool {name}", read_secrets)
        if isinstance(value, Problem):
            out.problems.append(value)
        elif value is not None:
            env[key] = value
    if refs:
        out.problems += await check_admission_policy(settings, created, f"AgentTool {name}")
    out.tool_env[name] = env
    return out


async def check_run(
    namespace: str, spec: AgentRunSpec, settings: Settings, *, read_secrets: bool = True, created: str | None = None
) -> Resolved:
    """`read_secrets=False` (executors whose pods mount the Secrets): only the Secrets' metadata
    is read (exists, labelled); a missing key keeps the runner pod from starting. `created`: the
    run's creationTimestamp. A tool's Secrets are authorised by the tool's creator (checked when
    the AgentTool was admitted), the run's own API key by the run's creator."""
    if refused := check_namespace(namespace):  # nothing there is looked at, Secrets and tools included
        return Resolved(problems=refused)
    out = Resolved(problems=check_resources(spec.resources, settings.gpu_node_pools, "the run"))
    out.problems += check_image(spec.image, settings.images_allowed, "spec.image")
    out.problems += check_agent(spec.agent, settings.agent_modules)
    out.problems += await check_base_url(spec.model.base_url, settings.allowed_base_urls)
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
        created_tool = (obj.get("metadata") or {}).get("creationTimestamp")
        resolved = await check_tool(namespace, name, tool, settings, read_secrets=read_secrets, created=created_tool)
        out.problems += resolved.problems
        out.tool_env.update(resolved.tool_env)
        out.tools[name] = tool
    ref = spec.model.api_key_secret_ref
    if ref is not None:
        value = await _secret_value(namespace, ref.name, ref.key, "model API key", read_secrets)
        if isinstance(value, Problem):
            out.problems.append(value)
        else:
            out.model_key = value
        out.problems += await check_admission_policy(settings, created, "the AgentRun")
    out.problems = list({p.message: p for p in out.problems}.values())  # the policy, once for all tools
    return out
