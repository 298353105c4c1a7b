"""The generated CRDs on the real apiserver: malformed manifests are rejected with a clear message
(and `tether.api` rejects the same ones offline), defaults and kstatus fields are filled in,
specs are immutable, `kubectl get` / `explain` show what users need."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from tests.support.kube import ControlPlane
from tether import api

from .conftest import Release

pytestmark = pytest.mark.kube

RUN: dict[str, Any] = {
    "apiVersion": "tether.dev/v1alpha1",
    "kind": "AgentRun",
    "metadata": {"name": "valid"},
    "spec": {
        "framework": "openai",
        "model": {"name": "gpt-4.1", "apiKeySecretRef": {"name": "openai", "key": "OPENAI_API_KEY"}},
        "input": "Refund order 42",
        "tools": ["refund"],
        "resources": {"cpu": "500m", "memory": "1Gi", "gpu": {"type": "A100", "count": 1}},
        "limits": {"maxTurns": 10, "maxCostUSD": 2.5},
    },
}
TOOL: dict[str, Any] = {
    "apiVersion": "tether.dev/v1alpha1",
    "kind": "AgentTool",
    "metadata": {"name": "valid-tool"},
    "spec": {
        "description": "Refund an order",
        "implementation": "shop.tools:refund",
        "approval": {"required": True, "timeout": "24h", "defaultAction": "decline"},
        "env": [{"name": "SHOP_TOKEN", "secretKeyRef": {"name": "shop", "key": "token"}}],
    },
}


def edit(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of base with spec.<path> set (value DELETE removes it)."""
    doc = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node.setdefault(p, {})
    if value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return doc


DELETE = object()

# (manifest, what the apiserver's message must contain)
MALFORMED = {
    "wrong framework": (edit(RUN, "spec.framework", "autogen"), 'Unsupported value: "autogen"'),
    # a bring-your-own agent brings its own tools: spec.tools would never reach it (RUN names one)
    "tools beside a byo agent": (edit(RUN, "spec.agent", "shop.agents:triage"), "a bring-your-own agent (spec.agent) brings its own tools"),
    "negative gpu count": (edit(RUN, "spec.resources.gpu.count", -1), "spec.resources.gpu.count: Invalid value: -1"),
    "gpu count without type": (edit(RUN, "spec.resources.gpu", {"count": 2}), "gpu.type is required when gpu.count > 0"),
    "bad memory quantity": (
        edit(RUN, "spec.resources.memory", "2 GB"),
        'spec.resources.memory: Invalid value: "2 GB": must be a Kubernetes quantity of memory',
    ),
    "negative cpu": (
        edit(RUN, "spec.resources.cpu", "-1"),
        'spec.resources.cpu: Invalid value: "-1": must be a Kubernetes quantity of CPUs',
    ),
    "missing model": (edit(RUN, "spec.model", DELETE), "spec.model: Required value"),
    "missing input": (edit(RUN, "spec.input", DELETE), "spec.input: Required value"),
    "empty model name": (
        edit(RUN, "spec.model.name", ""),
        'spec.model.name: Invalid value: "": spec.model.name in body should be at least 1 chars long',
    ),
    "unknown field": (edit(RUN, "spec.colour", "blue"), 'unknown field "spec.colour"'),
    "unknown nested field": (edit(RUN, "spec.model.temperature", 0.2), 'unknown field "spec.model.temperature"'),
    "oversized input": (edit(RUN, "spec.input", "x" * (api.MAX_INPUT + 1)), "spec.input: Too long: may not be more than 32768"),
    "unknown provider": (edit(RUN, "spec.model.provider", "cohere"), 'spec.model.provider: Unsupported value: "cohere"'),
    "baseURL not http": (
        edit(RUN, "spec.model.baseURL", "ftp://models"),
        'spec.model.baseURL: Invalid value: "ftp://models": must be an http:// or https:// URL',
    ),
    "secret ref without key": (
        edit(RUN, "spec.model.apiKeySecretRef", {"name": "openai"}),
        "spec.model.apiKeySecretRef.key: Required value",
    ),
    "too many retries": (
        edit(RUN, "spec.retries", 99),
        "spec.retries: Invalid value: 99: spec.retries in body should be less than or equal to 20",
    ),
    "retries not a number": (
        edit(RUN, "spec.retries", "two"),
        'spec.retries: Invalid value: "string": spec.retries in body must be of type integer',
    ),
    "bad timeout": (edit(RUN, "spec.timeout", "soon"), 'spec.timeout: Invalid value: "soon": must be a duration longer than zero'),
    "negative cost limit": (edit(RUN, "spec.limits.maxCostUSD", -1), "spec.limits.maxCostUSD: Invalid value: -1"),
    "bad tool name": (edit(RUN, "spec.tools", ["Refund_Tool"]), "spec.tools[0] in body should match"),
    "duplicate tools": (edit(RUN, "spec.tools", ["refund", "refund"]), 'spec.tools[1]: Duplicate value: "refund"'),
    "agent not module:attr": (edit(RUN, "spec.agent", "my_agent"), "spec.agent in body should match"),
    "tool without implementation": (
        edit(TOOL, "spec.implementation", DELETE),
        "spec.implementation: Invalid value: set exactly one of implementation (a Python function) and mcp",
    ),
    "tool approval default": (
        edit(TOOL, "spec.approval.defaultAction", "maybe"),
        'spec.approval.defaultAction: Unsupported value: "maybe"',
    ),
    "tool env name": (
        edit(TOOL, "spec.env", [{"name": "1BAD", "secretKeyRef": {"name": "s", "key": "k"}}]),
        "spec.env[0].name in body should match",
    ),
    "tool cache": (edit(TOOL, "spec.cache", "sometimes"), 'spec.cache: Unsupported value: "sometimes"'),
}

BLANK = "must not be blank"
DURATION = "must be a duration longer than zero and at most 8760h (a year) such as 90s, 30m or 1h30m"
CPU = "must be a Kubernetes quantity of CPUs above 0 and at most 1024, such as 500m or 2"
MEMORY = "must be a Kubernetes quantity of memory from 16Mi to 64Ti, such as 512Mi or 4Gi"
IMAGE = "must be a container image reference such as ghcr.io/org/agent:1.2"
URL = "must be an http:// or https:// URL with a host and no spaces"


def tol(**toleration: Any) -> dict[str, Any]:
    return edit(RUN, "spec.tolerations", [toleration])


# Issue 8 item 7 and issue 13 item 10: every kind of bad value, each message naming its field.
MALFORMED_MORE = {
    # frameworks without an adapter are not promised
    "framework without adapter": (edit(RUN, "spec.framework", "autogen"), 'spec.framework: Unsupported value: "autogen"'),
    # blank strings
    "blank input": (edit(RUN, "spec.input", "  \n\t"), f'spec.input: Invalid value: "  \\n\\t": {BLANK}'),
    "blank instructions": (edit(RUN, "spec.instructions", " "), f'spec.instructions: Invalid value: " ": {BLANK}'),
    "blank model name": (edit(RUN, "spec.model.name", "   "), f'spec.model.name: Invalid value: "   ": {BLANK}'),
    "blank image": (edit(RUN, "spec.image", " "), f'spec.image: Invalid value: " ": {IMAGE}'),
    "blank tool description": (edit(TOOL, "spec.description", "   "), f'spec.description: Invalid value: "   ": {BLANK}'),
    "blank tool version": (edit(TOOL, "spec.version", " "), f'spec.version: Invalid value: " ": {BLANK}'),
    "blank tool image": (edit(TOOL, "spec.image", "\t"), f'spec.image: Invalid value: "\\t": {IMAGE}'),
    # types
    "input not a string": (edit(RUN, "spec.input", 42), 'spec.input: Invalid value: "integer": spec.input in body must be of type string'),
    "durable not a boolean": (
        edit(RUN, "spec.durable", "yes"),
        'spec.durable: Invalid value: "string": spec.durable in body must be of type boolean',
    ),
    "tools not a list": (
        edit(RUN, "spec.tools", "refund"),
        'spec.tools: Invalid value: "string": spec.tools in body must be of type array',
    ),
    "maxTurns not a number": (
        edit(RUN, "spec.limits.maxTurns", "ten"),
        'spec.limits.maxTurns: Invalid value: "string": spec.limits.maxTurns in body must be of type integer',
    ),
    # ranges
    "zero max turns": (
        edit(RUN, "spec.limits.maxTurns", 0),
        "spec.limits.maxTurns: Invalid value: 0: spec.limits.maxTurns in body should be greater",
    ),
    "too many max turns": (edit(RUN, "spec.limits.maxTurns", 10_001), "spec.limits.maxTurns: Invalid value: 10001"),
    "cost limit too high": (
        edit(RUN, "spec.limits.maxCostUSD", 1_000_000),
        "spec.limits.maxCostUSD: Invalid value: 1000000: spec.limits.maxCostUSD in body should be less than or equal to 100000",
    ),
    "too many gpus": (edit(RUN, "spec.resources.gpu.count", 17), "spec.resources.gpu.count: Invalid value: 17"),
    "negative retries": (edit(RUN, "spec.retries", -1), "spec.retries: Invalid value: -1"),
    "tool retries too high": (edit(TOOL, "spec.retries", 21), "spec.retries: Invalid value: 21"),
    # durations: what parse_duration reads, and not zero
    "zero timeout": (edit(RUN, "spec.timeout", "0s"), f'spec.timeout: Invalid value: "0s": {DURATION}'),
    "timeout in days": (edit(RUN, "spec.timeout", "1d"), f'spec.timeout: Invalid value: "1d": {DURATION}'),
    "timeout without unit": (edit(RUN, "spec.timeout", "90"), f'spec.timeout: Invalid value: "90": {DURATION}'),
    "tool timeout in words": (edit(TOOL, "spec.timeout", "5 minutes"), f'spec.timeout: Invalid value: "5 minutes": {DURATION}'),
    "tool timeout zero": (edit(TOOL, "spec.timeout", "0ms"), f'spec.timeout: Invalid value: "0ms": {DURATION}'),
    # quantities
    "cpu with a unit in words": (edit(RUN, "spec.resources.cpu", "2 cores"), f'spec.resources.cpu: Invalid value: "2 cores": {CPU}'),
    "negative memory": (edit(RUN, "spec.resources.memory", "-1Gi"), f'spec.resources.memory: Invalid value: "-1Gi": {MEMORY}'),
    "tool memory with lowercase suffix": (
        edit(TOOL, "spec.resources.memory", "5ki"),
        f'spec.resources.memory: Invalid value: "5ki": {MEMORY}',
    ),
    # Issue 22: accepted, then silently broken (a pod that never schedules, or refused after admission)
    "a googol of CPUs": (edit(RUN, "spec.resources.cpu", "1e100"), f'spec.resources.cpu: Invalid value: "1e100": {CPU}'),
    "tool with a googol of CPUs": (edit(TOOL, "spec.resources.cpu", "1e100"), f'spec.resources.cpu: Invalid value: "1e100": {CPU}'),
    "zero CPUs": (edit(RUN, "spec.resources.cpu", "0"), f'spec.resources.cpu: Invalid value: "0": {CPU}'),
    "999 exbibytes": (edit(RUN, "spec.resources.memory", "999Ei"), f'spec.resources.memory: Invalid value: "999Ei": {MEMORY}'),
    "tool with 999 exbibytes": (edit(TOOL, "spec.resources.memory", "999Ei"), f'spec.resources.memory: Invalid value: "999Ei": {MEMORY}'),
    "zero memory": (edit(RUN, "spec.resources.memory", "0"), f'spec.resources.memory: Invalid value: "0": {MEMORY}'),
    "tool with zero memory": (edit(TOOL, "spec.resources.memory", "0"), f'spec.resources.memory: Invalid value: "0": {MEMORY}'),
    "one byte of memory": (edit(RUN, "spec.resources.memory", "1"), f'spec.resources.memory: Invalid value: "1": {MEMORY}'),
    "image that is not a reference": (
        edit(RUN, "spec.image", "not an image ref !!"),
        f'spec.image: Invalid value: "not an image ref !!": {IMAGE}',
    ),
    "tool image that is not a reference": (
        edit(TOOL, "spec.image", "not an image ref !!"),
        f'spec.image: Invalid value: "not an image ref !!": {IMAGE}',
    ),
    "image with two tags": (edit(RUN, "spec.image", "shop:1:2"), f'spec.image: Invalid value: "shop:1:2": {IMAGE}'),
    # 1000000h is 3.6e9 s: over activeDeadlineSeconds' 2^31-1, refused after admission before
    "timeout over a year": (edit(RUN, "spec.timeout", "1000000h"), f'spec.timeout: Invalid value: "1000000h": {DURATION}'),
    "timeout of a year and a second": (edit(RUN, "spec.timeout", "8760h1s"), f'spec.timeout: Invalid value: "8760h1s": {DURATION}'),
    "tool timeout over a year": (edit(TOOL, "spec.timeout", "9000h"), f'spec.timeout: Invalid value: "9000h": {DURATION}'),
    "tool gpu without type": (
        edit(TOOL, "spec.resources.gpu", {"count": 1}),
        "spec.resources.gpu: Invalid value: gpu.type is required",
    ),
    # provider endpoint
    "baseURL with credentials": (
        edit(RUN, "spec.model.baseURL", "https://user:pw@llm.example.com/v1"),
        'spec.model.baseURL: Invalid value: "https://user:pw@llm.example.com/v1": must not carry credentials',
    ),
    "baseURL without host": (edit(RUN, "spec.model.baseURL", "http:///v1"), f'spec.model.baseURL: Invalid value: "http:///v1": {URL}'),
    "baseURL with a space": (
        edit(RUN, "spec.model.baseURL", "http://llm example/v1"),
        'spec.model.baseURL: Invalid value: "http://llm example/v1": ' + URL,
    ),
    "baseURL file scheme": (
        edit(RUN, "spec.model.baseURL", "file:///etc/passwd"),
        f'spec.model.baseURL: Invalid value: "file:///etc/passwd": {URL}',
    ),
    "baseURL port out of range": (
        edit(RUN, "spec.model.baseURL", "http://llm:99999/v1"),
        f'spec.model.baseURL: Invalid value: "http://llm:99999/v1": {URL}',
    ),
    "unknown provider azure": (edit(RUN, "spec.model.provider", "azure"), 'spec.model.provider: Unsupported value: "azure"'),
    # names
    "run name too long for a label": (edit(RUN, "metadata.name", "r" * 64), "metadata.name: Too long: may not be more than 63"),
    "secret name not a DNS name": (
        edit(RUN, "spec.model.apiKeySecretRef.name", "OpenAI"),
        "spec.model.apiKeySecretRef.name in body should match",
    ),
    "secret key with a slash": (
        edit(TOOL, "spec.env", [{"name": "T", "secretKeyRef": {"name": "shop", "key": "a/b"}}]),
        "spec.env[0].secretKeyRef.key in body should match",
    ),
    "memoryKey starting with a dash": (edit(RUN, "spec.memoryKey", "-chat"), "spec.memoryKey in body should match"),
    "implementation without function": (edit(TOOL, "spec.implementation", "shop.tools.refund"), "spec.implementation in body should match"),
    "duplicate env names": (
        edit(
            TOOL,
            "spec.env",
            [{"name": "T", "secretKeyRef": {"name": "a", "key": "k"}}, {"name": "T", "secretKeyRef": {"name": "b", "key": "k"}}],
        ),
        'spec.env[1]: Duplicate value: {"name":"T"}',
    ),
    # scheduling: the Pod's own rules, said before a pod is ever made
    "nodeSelector value with a space": (
        edit(RUN, "spec.nodeSelector", {"disk": "fast ssd"}),
        "spec.nodeSelector.disk in body should match",
    ),
    "nodeSelector value too long": (
        edit(RUN, "spec.nodeSelector", {"disk": "s" * 64}),
        "spec.nodeSelector.disk: Too long: may not be more than 63",
    ),
    "toleration Exists with a value": (
        tol(key="spot", operator="Exists", value="yes"),
        "spec.tolerations[0]: Invalid value: value must be empty when operator is Exists",
    ),
    "toleration Equal without key": (
        tol(operator="Equal", value="yes"),
        "spec.tolerations[0]: Invalid value: key is required unless operator is Exists",
    ),
    "tolerationSeconds without NoExecute": (
        tol(key="spot", operator="Exists", effect="NoSchedule", tolerationSeconds=60),
        "spec.tolerations[0]: Invalid value: tolerationSeconds is only allowed with effect NoExecute",
    ),
    "toleration effect unknown": (
        tol(key="spot", operator="Exists", effect="Never"),
        'spec.tolerations[0].effect: Unsupported value: "Never"',
    ),
}
MALFORMED.update(MALFORMED_MORE)

# AgentTools with an MCP server (spec.mcp)
MCP_TOOL: dict[str, Any] = {
    "apiVersion": "tether.dev/v1alpha1",
    "kind": "AgentTool",
    "metadata": {"name": "valid-mcp-tool"},
    "spec": {
        "description": "The hotel's booking system",
        "mcp": {
            "url": "https://mcp.hotel.example/mcp",
            "headers": [{"name": "Authorization", "secretKeyRef": {"name": "hotel", "key": "token"}}],
            "tools": ["book", "lookup"],
        },
    },
}
STDIO_TOOL = edit(edit(MCP_TOOL, "spec.mcp", {"command": ["hotel-mcp", "--stdio"], "tools": ["book"]}), "spec.env", TOOL["spec"]["env"])
MALFORMED_MCP = {
    "mcp and implementation": (edit(MCP_TOOL, "spec.implementation", "shop.tools:refund"), "set exactly one of implementation"),
    "neither mcp nor implementation": (edit(MCP_TOOL, "spec.mcp", DELETE), "set exactly one of implementation"),
    "mcp without tools": (edit(MCP_TOOL, "spec.mcp.tools", DELETE), "spec.mcp.tools: Required value"),
    "mcp with an empty tool list": (edit(MCP_TOOL, "spec.mcp.tools", []), "spec.mcp.tools: Invalid value"),
    "mcp tool name with a space": (edit(MCP_TOOL, "spec.mcp.tools", ["book room"]), "spec.mcp.tools[0] in body should match"),
    "mcp duplicate tools": (edit(MCP_TOOL, "spec.mcp.tools", ["book", "book"]), 'spec.mcp.tools[1]: Duplicate value: "book"'),
    "mcp url and command": (edit(MCP_TOOL, "spec.mcp.command", ["hotel-mcp"]), "spec.mcp.url: Invalid value"),
    "mcp neither url nor command": (edit(MCP_TOOL, "spec.mcp.url", DELETE), "set exactly one of url (a remote server) and command"),
    "mcp url not http": (edit(MCP_TOOL, "spec.mcp.url", "file:///etc/passwd"), "spec.mcp.url: Invalid value"),
    "mcp headers with stdio": (
        edit(STDIO_TOOL, "spec.mcp.headers", MCP_TOOL["spec"]["mcp"]["headers"]),
        "spec.mcp.headers: Invalid value: headers are sent to a remote server only",
    ),
    "mcp header name with a colon": (
        edit(MCP_TOOL, "spec.mcp.headers", [{"name": "X:Y", "secretKeyRef": {"name": "hotel", "key": "token"}}]),
        "spec.mcp.headers[0].name in body should match",
    ),
    "mcp env with a url": (
        edit(MCP_TOOL, "spec.env", TOOL["spec"]["env"]),
        "spec.env: Invalid value: env is the environment of a stdio MCP server",
    ),
    "mcp destructiveNeedsApproval not a boolean": (
        edit(MCP_TOOL, "spec.mcp.destructiveNeedsApproval", "no"),
        "spec.mcp.destructiveNeedsApproval: Invalid value",
    ),
}
MALFORMED.update(MALFORMED_MCP)


def apply(kube: ControlPlane, ns: str, doc: dict[str, Any], *extra: str):
    return kube.kubectl("create", "-n", ns, "-f", "-", *extra, input=json.dumps(doc), check=False)


def dry_run(kube: ControlPlane, ns: str, doc: dict[str, Any]) -> tuple[int, Any]:
    """`kubectl create --dry-run=server` over HTTP: the same answer, without a process per case."""
    plural = {"AgentRun": "agentruns", "AgentTool": "agenttools"}[doc["kind"]]
    return kube.request("POST", f"/apis/tether.dev/v1alpha1/namespaces/{ns}/{plural}?dryRun=All&fieldValidation=Strict", doc)


def test_valid_manifests_are_accepted(kube: ControlPlane, tether_release: Release) -> None:
    ns = tether_release.unserved  # no operator acts on it
    for doc in (RUN, TOOL, MCP_TOOL, STDIO_TOOL):
        proc = apply(kube, ns, doc, "--dry-run=server")
        assert proc.returncode == 0, proc.stderr
        api.parse_manifest(doc)


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_manifest_is_rejected_clearly(kube: ControlPlane, tether_release: Release, case: str) -> None:
    doc, message = MALFORMED[case]
    status, body = dry_run(kube, tether_release.unserved, doc)
    assert status != 201, f"{case}: accepted by the apiserver"
    said = body["message"] if isinstance(body, dict) else str(body)  # what kubectl prints
    assert message in said, f"{case}: unclear message:\n{said}"
    # `tether run` rejects the same manifest offline, naming the same field
    with pytest.raises(api.ManifestError):
        api.parse_manifest(doc)


def test_there_are_at_least_fifteen_cases() -> None:
    assert len(MALFORMED) >= 15 + 30 and len(MALFORMED_MORE) >= 30


def test_defaults_and_kstatus_fields(kube: ControlPlane, tether_release: Release) -> None:
    ns = tether_release.unserved
    doc = edit(edit(RUN, "metadata.name", "defaults"), "spec", {"framework": "langgraph", "model": {"name": "m"}, "input": "hi"})
    assert apply(kube, ns, doc).returncode == 0
    obj = json.loads(kube.kubectl("get", "agentrun", "defaults", "-n", ns, "-o", "json").stdout)
    spec = obj["spec"]
    assert (spec["retries"], spec["timeout"], spec["durable"], spec["model"]["provider"]) == (2, "1h", True, "openai")
    # a brand-new object must not look done to kstatus before the operator has looked at it
    assert obj["status"]["observedGeneration"] == -1 and obj["metadata"]["generation"] == 1


def test_spec_is_immutable(kube: ControlPlane, tether_release: Release) -> None:
    ns = tether_release.unserved
    assert apply(kube, ns, edit(RUN, "metadata.name", "frozen")).returncode == 0
    proc = kube.kubectl("patch", "agentrun", "frozen", "-n", ns, "--type=merge", "-p", '{"spec":{"input":"changed"}}', check=False)
    assert proc.returncode != 0
    assert "spec is immutable: create a new AgentRun instead of changing this one" in proc.stderr
    # metadata stays editable (approvals are AgentApprovals, not annotations)
    kube.kubectl("annotate", "agentrun", "frozen", "-n", ns, "example.com/ticket=abc")


def test_approval_spec_is_immutable(kube: ControlPlane, tether_release: Release) -> None:
    """A decision cannot be changed after admission (its approver was checked at creation)."""
    ns = tether_release.unserved
    spec = {"run": "frozen", "approvalId": "0123456789ab" + "c" * 16, "decision": "decline", "decidedBy": "tether-admin"}
    doc = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentApproval", "metadata": {"name": "frozen-decision"}, "spec": spec}
    kube.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(doc))
    for change in ('{"spec":{"decision":"approve"}}', '{"spec":{"decidedBy":"cfo@example.com"}}'):
        proc = kube.kubectl("patch", "agentapproval", "frozen-decision", "-n", ns, "--type=merge", "-p", change, check=False)
        assert proc.returncode != 0 and "spec is immutable: create a new AgentApproval instead" in proc.stderr, proc.stderr
    bad = {**doc, "metadata": {"name": "bad-decision"}, "spec": {**spec, "decision": "maybe", "approvalId": "../x"}}
    proc = kube.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(bad), check=False)
    assert proc.returncode != 0 and "spec.decision" in proc.stderr and "spec.approvalId" in proc.stderr, proc.stderr


def test_tool_spec_is_immutable(kube: ControlPlane, tether_release: Release) -> None:
    ns = tether_release.unserved
    assert apply(kube, ns, edit(TOOL, "metadata.name", "frozen-tool")).returncode == 0
    patch = '{"spec":{"implementation":"shop.tools:refund_all"}}'
    proc = kube.kubectl("patch", "agenttool", "frozen-tool", "-n", ns, "--type=merge", "-p", patch, check=False)
    assert proc.returncode != 0
    assert "spec: Invalid value" in proc.stderr
    assert "spec is immutable: create a new AgentTool instead of changing this one" in proc.stderr


def test_get_columns_short_names_category_and_explain(kube: ControlPlane, tether_release: Release) -> None:
    ns = tether_release.unserved
    apply(kube, ns, edit(RUN, "metadata.name", "columns"))
    header = kube.kubectl("get", "ar", "-n", ns).stdout.splitlines()[0].split()
    assert header == ["NAME", "PHASE", "FRAMEWORK", "MODEL", "TURNS", "COST", "AGE"]
    assert "agentrun.tether.dev/columns" in kube.kubectl("get", "tether", "-n", ns, "-o", "name").stdout
    assert kube.kubectl("get", "at", "-n", ns).returncode == 0
    explained = kube.kubectl("explain", "agentrun.spec.model.apiKeySecretRef").stdout
    assert "Secret key holding the API key" in explained
    explained = kube.kubectl("explain", "agenttool.spec.approval.defaultAction").stdout
    assert "Decision taken when the timeout passes" in explained


def test_crds_in_repo_match_what_the_chart_installed(kube: ControlPlane, tether_release: Release) -> None:
    from .conftest import REPO

    for name in ("agentruns", "agenttools"):
        served = json.loads(kube.kubectl("get", "crd", f"{name}.tether.dev", "-o", "json").stdout)
        generated = yaml.safe_load((REPO / "crds" / f"tether.dev_{name}.yaml").read_text())
        served_schema = served["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert served_schema == generated["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
