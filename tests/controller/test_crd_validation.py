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
    "negative gpu count": (edit(RUN, "spec.resources.gpu.count", -1), "spec.resources.gpu.count: Invalid value: -1"),
    "gpu count without type": (edit(RUN, "spec.resources.gpu", {"count": 2}), "gpu.type is required when gpu.count > 0"),
    "bad memory quantity": (
        edit(RUN, "spec.resources.memory", "2 GB"),
        'spec.resources.memory: Invalid value: "2 GB": must be a non-negative Kubernetes quantity',
    ),
    "negative cpu": (edit(RUN, "spec.resources.cpu", "-1"), 'spec.resources.cpu: Invalid value: "-1": must be a non-negative'),
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
    "baseURL not http": (edit(RUN, "spec.model.baseURL", "ftp://models"), "spec.model.baseURL in body should match"),
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
    "bad timeout": (edit(RUN, "spec.timeout", "soon"), "spec.timeout in body should match"),
    "negative cost limit": (edit(RUN, "spec.limits.maxCostUSD", -1), "spec.limits.maxCostUSD: Invalid value: -1"),
    "bad tool name": (edit(RUN, "spec.tools", ["Refund_Tool"]), "spec.tools[0] in body should match"),
    "duplicate tools": (edit(RUN, "spec.tools", ["refund", "refund"]), 'spec.tools[1]: Duplicate value: "refund"'),
    "agent not module:attr": (edit(RUN, "spec.agent", "my_agent"), "spec.agent in body should match"),
    "tool without implementation": (edit(TOOL, "spec.implementation", DELETE), "spec.implementation: Required value"),
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


def apply(kube: ControlPlane, ns: str, doc: dict[str, Any], *extra: str):
    return kube.kubectl("create", "-n", ns, "-f", "-", *extra, input=json.dumps(doc), check=False)


def test_valid_manifests_are_accepted(kube: ControlPlane, tether_release: Release) -> None:
    ns = tether_release.unserved  # no operator acts on it
    for doc in (RUN, TOOL):
        proc = apply(kube, ns, doc, "--dry-run=server")
        assert proc.returncode == 0, proc.stderr
        api.parse_manifest(doc)


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_manifest_is_rejected_clearly(kube: ControlPlane, tether_release: Release, case: str) -> None:
    doc, message = MALFORMED[case]
    proc = apply(kube, tether_release.unserved, doc, "--dry-run=server")
    assert proc.returncode != 0, f"{case}: accepted by the apiserver"
    assert message in proc.stderr, f"{case}: unclear message:\n{proc.stderr}"
    # `tether run` rejects the same manifest offline, naming the same field
    with pytest.raises(api.ManifestError):
        api.parse_manifest(doc)


def test_there_are_at_least_fifteen_cases() -> None:
    assert len(MALFORMED) >= 15


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
    # metadata stays editable: that is how approvals are given
    kube.kubectl("annotate", "agentrun", "frozen", "-n", ns, "tether.dev/approve=abc")


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
