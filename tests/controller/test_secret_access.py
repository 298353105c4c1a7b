"""On the real apiserver with the chart installed: a run can only use Secrets its author may use,
and tools come only from allowed modules.

- The chart's ValidatingAdmissionPolicy checks, with the request's own user, `get` on every Secret
  an AgentRun or AgentTool names: a user who may create AgentRuns but not read Secrets cannot name
  `db-creds` (refused at admission; the fake provider it pointed at hears nothing); a user allowed
  to read the Secret can; annotating a run is not a spec change and is not checked.
- The operator reads only Secrets labelled tether.dev/usable=true (SecretNotUsable until labelled).
- An AgentTool from the standard library or a module outside tools.allowedModules is Ready=False
  (ToolNotAllowed); one whose module cannot be imported where the runtime runs is Ready=False
  (ToolNotImportable); a run naming such a tool fails with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.kube import ControlPlane
from tether.testing.fake_provider import FakeProvider

from .conftest import Operator, Release, condition, get, wait_for

pytestmark = pytest.mark.kube

NS = "op-a"
MALLORY, ALICE = "tether-test-user-3", "tether-test-user-2"  # static-token users with no rights of their own
DB_PASSWORD = "db-password-do-not-send-5521"


def _run(name: str, secret: str | None, base_url: str, tools: list[str] | None = None) -> str:
    model: dict[str, Any] = {"name": "gpt-4.1", "baseURL": base_url}
    if secret:
        model["apiKeySecretRef"] = {"name": secret, "key": "password"}
    spec = {"framework": "openai", "model": model, "input": "hello", "retries": 0, "tools": tools or []}
    return json.dumps({"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "metadata": {"name": name}, "spec": spec})


def _tool(name: str, implementation: str, secret: str | None = None) -> str:
    spec: dict[str, Any] = {"description": "a tool", "implementation": implementation}
    if secret:
        spec["env"] = [{"name": "DB_PASSWORD", "secretKeyRef": {"name": secret, "key": "password"}}]
    return json.dumps({"apiVersion": "tether.dev/v1alpha1", "kind": "AgentTool", "metadata": {"name": name}, "spec": spec})


@pytest.fixture(scope="module")
def users(kube: ControlPlane, tether_release: Release) -> dict[str, Any]:
    for name, value in (("db-creds", DB_PASSWORD), ("shared-key", "shared-key-value-8812")):
        kube.kubectl("create", "secret", "generic", name, "-n", NS, f"--from-literal=password={value}")
        kube.kubectl("label", "secret", name, "-n", NS, "tether.dev/usable=true")  # labelled: only the creator's rights stop it
    kube.kubectl(
        "create",
        "role",
        "run-author",
        "-n",
        NS,
        "--verb=create,get,list,watch,patch",
        "--resource=agentruns.tether.dev,agenttools.tether.dev",
    )
    kube.kubectl("create", "role", "read-shared-key", "-n", NS, "--verb=get", "--resource=secrets", "--resource-name=shared-key")
    for user in (MALLORY, ALICE):
        kube.kubectl("create", "rolebinding", f"run-author-{user}", "-n", NS, "--role=run-author", f"--user={user}")
    kube.kubectl("create", "rolebinding", "alice-reads-shared-key", "-n", NS, "--role=read-shared-key", f"--user={ALICE}")
    return {user: kube.kubeconfig_for(user) for user in (MALLORY, ALICE)}


@pytest.fixture(scope="module")
def attacker_server() -> Iterator[FakeProvider]:
    with FakeProvider({"conversations": [{"match": "hello", "turns": [{"text": "hi"}]}]}) as provider:
        yield provider


def _as(kube: ControlPlane, users: dict[str, Any], user: str, doc: str, *args: str) -> Any:
    return kube.kubectl("apply", "-n", NS, "-f", "-", *args, input=doc, kubeconfig=users[user], check=False)


def test_a_creator_who_cannot_read_a_secret_cannot_name_it(
    kube: ControlPlane, users: dict[str, Any], attacker_server: FakeProvider, operator: Operator
) -> None:
    assert kube.kubectl("auth", "can-i", "create", "agentruns.tether.dev", "-n", NS, f"--as={MALLORY}", check=False).returncode == 0
    assert kube.kubectl("auth", "can-i", "get", "secrets/db-creds", "-n", NS, f"--as={MALLORY}", check=False).returncode != 0

    proc = _as(kube, users, MALLORY, _run("steal", "db-creds", attacker_server.base_url("openai")))
    assert proc.returncode != 0
    assert f"user {MALLORY} may not get every Secret this object names (db-creds) in namespace {NS}" in proc.stderr, proc.stderr
    proc = _as(kube, users, MALLORY, _tool("steal-tool", "shop.tools:crm", "db-creds"))
    assert proc.returncode != 0 and "may not get every Secret this object names (db-creds)" in proc.stderr, proc.stderr
    assert kube.kubectl("get", "agentrun", "steal", "-n", NS, check=False).returncode != 0

    # Someone who may read the Secret may name it; the run is accepted by the operator.
    nowhere = "http://127.0.0.1:9/v1"  # should it execute, it fails fast
    assert _as(kube, users, ALICE, _run("allowed", "shared-key", nowhere)).returncode == 0
    kube.kubectl("wait", "-n", NS, "--for=condition=Accepted", "--timeout=30s", "agentrun/allowed")
    # Editing metadata is not a spec change: a user who cannot read the Secret may still do it.
    annotate = kube.kubectl("annotate", "agentrun", "allowed", "-n", NS, "tether.dev/reason=looked", kubeconfig=users[MALLORY], check=False)
    assert annotate.returncode == 0, annotate.stderr
    # A run naming no Secret is the creator's own business.
    assert _as(kube, users, MALLORY, _run("no-secret", None, nowhere)).returncode == 0

    assert attacker_server.ledger.snapshot() == [], "a request reached the attacker's server"
    everything = kube.kubectl("get", "agentruns,agenttools,events", "-n", NS, "-o", "json").stdout + operator.logs()
    assert DB_PASSWORD not in everything


def test_an_unlabelled_secret_is_never_used(kube: ControlPlane, tether_release: Release, operator: Operator) -> None:
    kube.kubectl("create", "secret", "generic", "plain", "-n", NS, "--from-literal=password=plain-value-3390")
    kube.kubectl("apply", "-n", NS, "-f", "-", input=_run("unlabelled", "plain", "http://127.0.0.1:9/v1"))
    wait_for(
        lambda: condition(get(kube, "agentrun", NS, "unlabelled"), "Accepted").get("reason") == "SecretNotUsable", what="SecretNotUsable"
    )
    message = condition(get(kube, "agentrun", NS, "unlabelled"), "Accepted")["message"]
    assert f"Secret {NS}/plain (model API key) is not labelled tether.dev/usable=true" in message
    kube.kubectl("label", "secret", "plain", "-n", NS, "tether.dev/usable=true")
    kube.kubectl("wait", "-n", NS, "--for=condition=Accepted", "--timeout=30s", "agentrun/unlabelled")


@pytest.mark.parametrize(
    ("tool", "implementation", "reason", "message"),
    [
        ("shell", "subprocess:getoutput", "ToolNotAllowed", "subprocess:getoutput is in the Python standard library"),
        ("system", "os:system", "ToolNotAllowed", "os:system is in the Python standard library"),
        ("evaluate", "builtins:eval", "ToolNotAllowed", "builtins:eval is in the Python standard library"),
        ("site", "yaml:safe_load", "ToolNotAllowed", "module yaml is not an allowed tool module (allowed: shop;"),
        ("ghost", "shop.ghost:haunt", "ToolNotImportable", "cannot import shop.ghost:haunt: ModuleNotFoundError"),
    ],
)
def test_a_tool_from_a_module_not_allowed_or_not_importable_is_not_ready(
    kube: ControlPlane, tether_release: Release, operator: Operator, tool: str, implementation: str, reason: str, message: str
) -> None:
    kube.kubectl("apply", "-n", NS, "-f", "-", input=_tool(tool, implementation))
    wait_for(lambda: condition(get(kube, "agenttool", NS, tool), "Ready").get("reason") == reason, what=reason)
    obj = get(kube, "agenttool", NS, tool)
    assert condition(obj, "Ready")["status"] == "False" and condition(obj, "Stalled")["status"] == "True"
    assert message in condition(obj, "Ready")["message"]
    if reason == "ToolNotAllowed":  # a run naming it fails with the reason (the runtime would refuse it too)
        kube.kubectl("apply", "-n", NS, "-f", "-", input=_run(f"uses-{tool}", None, "http://127.0.0.1:9/v1", tools=[tool]))
        kube.kubectl("wait", "-n", NS, "--for=condition=Stalled", "--timeout=30s", f"agentrun/uses-{tool}")
        run = get(kube, "agentrun", NS, f"uses-{tool}")
        assert condition(run, "Accepted")["reason"] == "ToolNotAllowed" and message in condition(run, "Failed")["message"]


def test_an_allowed_importable_tool_is_ready(kube: ControlPlane, tether_release: Release, operator: Operator) -> None:
    kube.kubectl("apply", "-n", NS, "-f", "-", input=_tool("refund", "shop.tools:refund"))
    kube.kubectl("wait", "-n", NS, "--for=condition=Ready", "--timeout=30s", "agenttool/refund")
