"""Approvals can never run a tool with no human asked unless the cluster admin says so, on the real
apiserver: too-short timeouts, approval settings without `required: true`, and `cache: auto` on an
approval-required tool are refused at admission (and by `tether.api` offline); a timeout that
approves makes the tool not Ready and a run naming it fails with a condition naming the field,
unless the chart allows auto-approval (approvals.allowAutoApprove, default off)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.kube import ControlPlane
from tether import api

from .conftest import SERVED, Operator, Release, condition, get, wait_for
from .test_crd_validation import DELETE, TOOL, apply, edit

pytestmark = pytest.mark.kube

NS = SERVED[0]  # the session operator's namespace

REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "timeout below the minimum": (
        edit(TOOL, "spec.approval.timeout", "30s"),
        'spec.approval.timeout: Invalid value: "30s": must be at least 1m',
    ),
    "timeout of zero": (edit(TOOL, "spec.approval.timeout", "0s"), "must be at least 1m"),
    "approval without required": (edit(TOOL, "spec.approval.required", DELETE), "approval settings need required: true"),
    "approval with required false": (edit(TOOL, "spec.approval.required", False), "approval settings need required: true"),
    "cache auto with approval": (edit(TOOL, "spec.cache", "auto"), "cache: auto would return results cached by earlier runs"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_unsafe_approval_settings_are_refused_at_admission(kube: ControlPlane, tether_release: Release, case: str) -> None:
    doc, message = REFUSED[case]
    proc = apply(kube, tether_release.unserved, doc, "--dry-run=server")
    assert proc.returncode != 0, f"{case}: accepted by the apiserver"
    assert message in proc.stderr, f"{case}: unclear message:\n{proc.stderr}"
    with pytest.raises(api.ManifestError):
        api.parse_manifest(doc)


def test_explicit_opt_ins_are_accepted(kube: ControlPlane, tether_release: Release) -> None:
    cached = edit(edit(TOOL, "spec.cache", "auto"), "spec.approval.cachedWithoutApproval", True)
    minute = edit(TOOL, "spec.approval.timeout", "1m")
    for doc in (cached, minute):
        proc = apply(kube, tether_release.unserved, doc, "--dry-run=server")
        assert proc.returncode == 0, proc.stderr
        api.parse_manifest(doc)
    explained = kube.kubectl("explain", "agenttool.spec.cache").stdout
    assert "off for a tool that requires approval" in explained and "cachedWithoutApproval" in explained


def _tool(name: str, **approval: Any) -> str:
    spec = {"description": "Refund an order", "implementation": "shop.tools:refund", "approval": {"required": True, **approval}}
    return json.dumps({"apiVersion": "tether.dev/v1alpha1", "kind": "AgentTool", "metadata": {"name": name}, "spec": spec})


def test_auto_approval_needs_the_chart_to_allow_it(kube: ControlPlane, tether_release: Release, operator: Operator) -> None:
    kube.kubectl("apply", "-n", NS, "-f", "-", input=_tool("auto-refund", timeout="1h", defaultAction="approve"))
    kube.kubectl("apply", "-n", NS, "-f", "-", input=_tool("asked-refund", timeout="1h", defaultAction="decline"))
    # the tool is not Ready, and says which field and which chart value
    tool = wait_for(lambda: (o := get(kube, "agenttool", NS, "auto-refund")).get("status", {}).get("conditions") and o, what="tool status")
    stalled = condition(tool, "Stalled")
    assert condition(tool, "Ready").get("status") != "True"
    assert stalled["status"] == "True" and stalled["reason"] == "AutoApproveNotAllowed"
    assert "spec.approval.defaultAction: approve" in stalled["message"] and "approvals.allowAutoApprove" in stalled["message"]
    kube.kubectl("wait", "-n", NS, "--for=condition=Ready", "--timeout=30s", "agenttool/asked-refund")

    run = {
        "framework": "openai",
        "model": {"name": "gpt-4.1", "baseURL": "http://127.0.0.1:9/v1"},
        "input": "refund order 42",
        "tools": ["auto-refund"],
    }
    body = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "metadata": {"name": "auto-approved"}, "spec": run}
    kube.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(body))
    kube.kubectl("wait", "-n", NS, "--for=condition=Stalled", "--timeout=30s", "agentrun/auto-approved")
    obj = get(kube, "agentrun", NS, "auto-approved")
    assert obj["status"]["phase"] == "Failed" and not obj["status"].get("execution")  # never started
    accepted = condition(obj, "Accepted")
    assert accepted["status"] == "False" and accepted["reason"] == "AutoApproveNotAllowed"
    assert "spec.approval.defaultAction: approve" in condition(obj, "Failed")["message"]
    events = json.loads(
        kube.kubectl("get", "events", "-n", NS, "--field-selector", "involvedObject.name=auto-approved", "-o", "json").stdout
    )
    assert "AutoApproveNotAllowed" in {e["reason"] for e in events["items"]}
