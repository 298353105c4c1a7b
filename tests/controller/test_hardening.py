"""Issue 22, item 6 (hardening): what a tenant's manifest or a default install can no longer do.

- every major cloud's metadata address, and NAT64/6to4 forms of refused IPv4 addresses, are refused
  as a provider endpoint without `providers.allowedBaseURLs`;
- the accepted-then-broken manifests (1e100 CPUs, 999Ei or zero memory, an image that is no
  reference, a timeout over activeDeadlineSeconds' range) are refused at admission, with the same
  verdict offline (`tether.api`);
- an install names its scope (watchNamespaces or clusterWide); cluster-wide, the operator never
  acts in kube-system, kube-public or kube-node-lease;
- runner pods carry only the AgentRun labels the chart allows, and default resources;
- the NetworkPolicy template renders and the apiserver accepts it.

The cluster-wide operator runs on a control plane of its own: on the shared one it would also pick
up every other module's runs.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube import ControlPlane, start_control_plane
from tether import api
from tether.api import AgentRunSpec, AgentToolSpec, Resources
from tether_operator import execution_name
from tether_operator.checks import check_base_url, check_run, check_tool
from tether_operator.executors.pods import container_resources
from tether_operator.placement import propagated
from tether_operator.settings import Settings

from .conftest import CHART, Operator, condition, kubeconfig_with_token, wait_for
from .test_chart import helm, of_kind, render  # noqa: F401  (helm: the fixture)
from .test_crd_validation import RUN, TOOL, edit

# ------------------------------------------------------------------------ provider endpoints


def _nat64_local_48(v4: str) -> str:
    """169.254.169.254 behind a /48 NAT64 prefix of 64:ff9b:1::/48 (RFC 6052 §2.2: bits 64-71 zero)."""
    b = ipaddress.IPv4Address(v4).packed
    return str(ipaddress.IPv6Address(bytes([0, 0x64, 0xFF, 0x9B, 0, 1, b[0], b[1], 0, b[2], b[3], 0, 0, 0, 0, 0])))


METADATA = [
    ("http://100.100.100.200/latest/meta-data/ram/security-credentials/", "100.100.100.200 is a cloud metadata address"),  # Alibaba
    ("http://168.63.129.16/machine?comp=goalstate", "168.63.129.16 is a cloud metadata address"),  # Azure WireServer
    ("http://169.254.169.254/metadata/instance", "169.254.169.254 is a cloud metadata address"),  # Azure IMDS (and AWS, GCP)
    ("http://192.0.0.192/2007-08-29/meta-data", "192.0.0.192 is a cloud metadata address"),  # Oracle
    ("http://instance-data/latest/meta-data", "instance-data is a cloud metadata name"),  # EC2's short name
    # NAT64, well-known prefix: the gateway forwards to the embedded IPv4 address
    ("http://[64:ff9b::a9fe:a9fe]/latest", "is a cloud metadata address (169.254.169.254) behind a NAT64 or 6to4 prefix"),
    ("http://[64:ff9b::6464:64c8]/latest", "is a cloud metadata address (100.100.100.200) behind a NAT64"),
    ("http://[64:ff9b::7f00:1]:8080/v1", "is a loopback address (127.0.0.1) behind a NAT64"),
    ("http://[64:ff9b::a9fe:1]/v1", "is a link-local address (169.254.0.1) behind a NAT64"),
    # NAT64, local-use prefix (RFC 8215), as a /96 and as a /48
    ("http://[64:ff9b:1::a9fe:a9fe]/latest", "is a cloud metadata address (169.254.169.254) behind a NAT64"),
    (f"http://[{_nat64_local_48('169.254.169.254')}]/latest", "is a cloud metadata address (169.254.169.254) behind a NAT64"),
    # 6to4
    ("http://[2002:a9fe:a9fe::1]/latest", "is a cloud metadata address (169.254.169.254) behind a NAT64 or 6to4 prefix"),
    ("http://[2002:7f00:1::1]/v1", "is a loopback address (127.0.0.1) behind a NAT64 or 6to4 prefix"),
]


@pytest.mark.parametrize(("url", "why"), METADATA)
def test_metadata_addresses_of_every_major_cloud_are_refused(url: str, why: str) -> None:
    problems = asyncio.run(check_base_url(url, ()))
    assert [(p.reason, p.terminal) for p in problems] == [("BaseURLNotAllowed", True)], problems
    assert problems[0].message.startswith(f"spec.model.baseURL {url!r}: ") and why in problems[0].message, problems[0].message
    assert "providers.allowedBaseURLs" in problems[0].message
    # the admin's allowlist still decides where one is set
    assert asyncio.run(check_base_url(url, (url,))) == []


def test_translated_forms_of_public_addresses_pass() -> None:
    for url in ("http://[64:ff9b::cb00:710a]/v1", "http://[64:ff9b:1::cb00:710a]/v1", "http://[2002:cb00:710a::1]/v1"):
        assert asyncio.run(check_base_url(url, ())) == [], url  # 203.0.113.10 behind NAT64 / 6to4


# ------------------------------------------------------------------------ admission bounds

# (document, path, value, admitted?): sent to the apiserver and to tether.api; both must say so.
BOUNDS: list[tuple[dict[str, Any], str, Any, bool]] = [
    *[(RUN, "spec.resources.cpu", q, ok) for q, ok in (("1024", True), ("1Ki", True), ("1m", True), ("1e3", True))],
    *[(RUN, "spec.resources.cpu", q, False) for q in ("1025", "1.1k", "1e100", "0", "-0", "0m")],
    *[(TOOL, "spec.resources.cpu", q, ok) for q, ok in (("8", True), ("1e100", False))],
    *[(RUN, "spec.resources.memory", q, ok) for q, ok in (("16Mi", True), ("16777216", True), ("64Ti", True), ("1Ti", True))],
    *[(RUN, "spec.resources.memory", q, False) for q in ("16777215", "65Ti", "999Ei", "0", "1", "1e400", "1e19")],
    *[(TOOL, "spec.resources.memory", q, ok) for q, ok in (("4Gi", True), ("0", False), ("999Ei", False))],
    *[(RUN, "spec.timeout", d, ok) for d, ok in (("8760h", True), ("525600m", True), ("8759h59m59s", True))],
    *[(RUN, "spec.timeout", d, False) for d in ("8760h1ms", "1000000h", "596524h", "99999999999999999h")],
    *[(TOOL, "spec.timeout", d, ok) for d, ok in (("30s", True), ("9000h", False))],
    *[
        (RUN, "spec.image", i, True)
        for i in (
            "ghcr.io/tether-dev/tether-runtime:0.1.0",
            "python:3.12-slim",
            "localhost:5000/shop/agent@sha256:" + "a" * 64,
            "registry.example/agents/shop:2@sha256:" + "0" * 64,
            "[::1]:5000/agent:1",
            "Registry.Example/agent",
        )
    ],
    *[
        (RUN, "spec.image", i, False)
        for i in ("not an image ref !!", "shop:1:2", "shop/Agent", "agent@sha256:abc", "agent:", "-agent", "a//b", "agent:tag with space")
    ],
    *[(TOOL, "spec.image", i, ok) for i, ok in (("registry.example/tools/gpu:1", True), ("not an image ref !!", False))],
]


def _admitted(kube: ControlPlane, doc: dict[str, Any]) -> tuple[bool, str]:
    plural = {"AgentRun": "agentruns", "AgentTool": "agenttools"}[doc["kind"]]
    status, body = kube.request("POST", f"/apis/tether.dev/v1alpha1/namespaces/default/{plural}?dryRun=All&fieldValidation=Strict", doc)
    return status == 201, body["message"] if isinstance(body, dict) and "message" in body else f"HTTP {status}"


def _offline(doc: dict[str, Any]) -> tuple[bool, str]:
    try:
        api.parse_manifest(doc)
    except api.ManifestError as exc:
        return False, str(exc)
    return True, ""


# ------------------------------------------------------------------------ namespaces served


def _spec() -> AgentRunSpec:
    return AgentRunSpec.model_validate({"framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hi"})


@pytest.mark.parametrize("namespace", ["kube-system", "kube-public", "kube-node-lease"])
def test_the_clusters_own_namespaces_are_never_served(namespace: str) -> None:
    # check_run returns before it asks the apiserver anything (no AgentTool, no Secret is read)
    (problem,) = asyncio.run(check_run(namespace, _spec(), {})).problems
    assert (problem.reason, problem.terminal) == ("NamespaceNotServed", True)
    assert problem.message.startswith(f"namespace {namespace}: Tether never serves kube-system, kube-public, kube-node-lease")
    tool = AgentToolSpec.model_validate({"description": "d", "implementation": "shop.tools:refund"})
    assert [p.reason for p in asyncio.run(check_tool(namespace, "refund", tool, {})).problems] == ["NamespaceNotServed"]


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        ({}, "no namespace to serve: set TETHER_NAMESPACES (chart value watchNamespaces) or TETHER_CLUSTER_WIDE=true"),
        ({"TETHER_NAMESPACES": "team-a,kube-system"}, "TETHER_NAMESPACES lists kube-system: Tether never serves"),
        ({"TETHER_NAMESPACES": "team-a", "TETHER_CLUSTER_WIDE": "true"}, "TETHER_CLUSTER_WIDE and TETHER_NAMESPACES are both set"),
        (
            {"TETHER_NAMESPACES": "team-a", "TETHER_DEFAULT_RESOURCES": '{"requests": {"memory": "4Gi"}, "limits": {"memory": "1Gi"}}'},
            "requests.memory is above limits.memory",
        ),
        (
            {"TETHER_NAMESPACES": "team-a", "TETHER_DEFAULT_RESOURCES": '{"limits": {"cpu": "1"}}'},
            "only requests.cpu, requests.memory and limits.memory may be set",
        ),
        ({"TETHER_CLUSTER_WIDE": "true", "TETHER_DEFAULT_RESOURCES": '{"requests": {"cpu": "two"}}'}, "requests.cpu 'two' is not a"),
    ],
)
def test_the_operator_refuses_to_start_without_an_explicit_safe_scope(env: dict[str, str], complaint: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_") and k != "KUBECONFIG"}
    proc = subprocess.run([sys.executable, "-m", "tether_operator"], env={**clean, **env}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and complaint in proc.stderr, proc.stderr
    assert Settings.from_env(env).startup_error() is not None
    assert Settings.from_env({"TETHER_NAMESPACES": "team-a"}).startup_error() is None
    assert Settings.from_env({"TETHER_CLUSTER_WIDE": "true"}).startup_error() is None


# ------------------------------------------------------------------------ labels, resources


def test_only_allowed_labels_reach_what_the_operator_creates() -> None:
    labels = {
        "app": "payments",  # would make a runner pod an endpoint of Service payments
        "team": "blue",
        "example.com/cost-center": "42",
        "tether.dev/execution": "someone-elses",  # the operator's own keys are never copied
        "app.kubernetes.io/instance": "shop",
    }
    assert propagated(labels, ()) == {}
    assert propagated(labels, ("team", "example.com/")) == {"team": "blue", "example.com/cost-center": "42"}
    assert propagated(labels, ("tether.dev/", "app.kubernetes.io/instance")) == {}


DEFAULTS = {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        (None, DEFAULTS),
        ({"cpu": "2"}, {"requests": {"cpu": "2", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}),
        ({"memory": "8Gi"}, {"requests": {"cpu": "250m", "memory": "8Gi"}, "limits": {"memory": "8Gi"}}),
        (
            {"memory": "256Mi", "gpu": {"type": "A100", "count": 1}},
            {"requests": {"cpu": "250m", "memory": "256Mi", "nvidia.com/gpu": "1"}, "limits": {"memory": "256Mi", "nvidia.com/gpu": "1"}},
        ),
    ],
)
def test_default_resources_fill_what_the_spec_leaves_out(resources: dict[str, Any] | None, expected: dict[str, Any]) -> None:
    spec = None if resources is None else Resources.model_validate(resources)
    assert container_resources(spec, DEFAULTS) == expected
    assert container_resources(spec, None) == container_resources(spec, {})  # no defaults: the spec's only
    assert container_resources(None, None) == {}


# ------------------------------------------------------------------------ the chart


def test_an_install_names_its_scope(helm: Path) -> None:
    refusals = {
        "": "at '/watchNamespaces': minItems: got 0, want 1",  # values.yaml's default: neither
        "watchNamespaces={kube-system}": "at '/watchNamespaces/0'",
        "watchNamespaces={team-a,kube-node-lease}": "at '/watchNamespaces/1'",
        "clusterWide=true,watchNamespaces={team-a}": "at '/watchNamespaces': maxItems: got 1, want 0",
    }
    for scope, complaint in refusals.items():
        said = render(helm, check=False, scope=scope)
        assert complaint in said, f"{scope or 'defaults'}: {said}"
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert defaults["watchNamespaces"] == [] and defaults["clusterWide"] is False
    # namespaced (the only way without clusterWide): Roles in the listed namespaces, no
    # ClusterRole beyond read-only discovery
    docs = render(helm, scope="watchNamespaces={team-a,team-b}")
    (discovery,) = of_kind(docs, "ClusterRole")
    assert {v for rule in discovery["rules"] for v in rule["verbs"]} == {"get", "list", "watch"}
    assert sorted(r["metadata"]["namespace"] for r in of_kind(docs, "Role")) == ["team-a", "team-b"]
    (deploy,) = of_kind(docs, "Deployment")
    env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["TETHER_NAMESPACES"], env["TETHER_CLUSTER_WIDE"]) == ("team-a,team-b", "false")
    # the chart's defaults for runner pods reach the operator
    assert json.loads(env["TETHER_DEFAULT_RESOURCES"]) == DEFAULTS and env["TETHER_PROPAGATED_LABELS"] == ""
    cluster = render(helm, "executor.propagatedLabels={team,example.com/}", scope="clusterWide=true")
    (deploy,) = of_kind(cluster, "Deployment")
    env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["TETHER_NAMESPACES"], env["TETHER_CLUSTER_WIDE"], env["TETHER_PROPAGATED_LABELS"]) == ("", "true", "team,example.com/")
    assert not of_kind(cluster, "Role") and len(of_kind(cluster, "ClusterRole")) == 2
    # the operator's own keys are never copied: allowing one is refused, not ignored
    assert "at '/executor/propagatedLabels/0'" in render(helm, "executor.propagatedLabels={tether.dev/run}", check=False)


NETWORK = [
    "networkPolicy.enabled=true",
    "networkPolicy.store[0].cidr=10.0.5.0/24",
    "networkPolicy.store[0].ports={443}",
    "networkPolicy.providers[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=llm-gateway",
    "networkPolicy.providers[0].ports={8080}",
    "networkPolicy.providers[1].cidr=203.0.113.10/32",
    "networkPolicy.providers[1].ports={443,8443}",
]


def test_network_policy_template(helm: Path) -> None:
    assert not of_kind(render(helm), "NetworkPolicy"), "off by default"
    docs = of_kind(render(helm, *NETWORK, scope="watchNamespaces={team-a,team-b}"), "NetworkPolicy")
    assert sorted((d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs) == [
        (ns, name) for ns in ("team-a", "team-b") for name in ("tether-runners", "tether-tool-pods")
    ]
    spec = docs[0]["spec"]
    assert spec["podSelector"] == {"matchExpressions": [{"key": "tether.dev/execution", "operator": "Exists"}]}
    assert spec["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in spec
    assert docs[0]["metadata"]["namespace"] == "team-a"  # helm test's namespace: its fake provider is reached too
    tool_pods, dns, store, gateway, provider, helm_test = spec["egress"]
    assert helm_test["ports"] == [{"protocol": "TCP", "port": 8080}]  # the rule itself: test_chart_package
    tool_pod = {"matchExpressions": [{"key": "tether.dev/tool-pod", "operator": "Exists"}]}
    assert tool_pods == {"to": [{"podSelector": tool_pod}], "ports": [{"protocol": "TCP", "port": 7070}]}
    # A GPU tool's pod of its own receives on its runner's port from the namespace's runner pods only.
    tools = docs[1]["spec"]
    assert tools["podSelector"] == tool_pod and tools["policyTypes"] == ["Ingress"]
    assert tools["ingress"] == [{"from": [{"podSelector": spec["podSelector"]}], "ports": [{"protocol": "TCP", "port": 7070}]}]
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert store == {"to": [{"ipBlock": {"cidr": "10.0.5.0/24"}}], "ports": [{"protocol": "TCP", "port": 443}]}
    assert gateway["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "llm-gateway"}}}]
    assert provider["ports"] == [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 8443}]
    # refused, never a policy that silently blocks every run or selects nothing
    for sets, complaint in (
        (("networkPolicy.enabled=true",), "at '/networkPolicy/store': minItems"),
        (("networkPolicy.enabled=true", "networkPolicy.store[0].cidr=10.0.5.0/24", "networkPolicy.store[0].ports={443}"), "providers"),
        ((*NETWORK, "networkPolicy.store[0].podSelector.matchLabels.app=s3"), "at '/networkPolicy/store/0'"),  # cidr and selector
        ((*NETWORK, "networkPolicy.providers[1].cidr=api.openai.com"), "at '/networkPolicy/providers/1"),  # no host names
        ((*NETWORK, "executor.kind=local"), "networkPolicy.enabled selects the kubernetes executor's runner pods"),
    ):
        said = render(helm, *sets, check=False)
        assert complaint in said, f"{sets}: {said}"
    said = render(helm, *NETWORK, check=False, scope="clusterWide=true")
    assert "networkPolicy.enabled needs watchNamespaces" in said, said


# ------------------------------------------------------------------- a cluster-wide install

RELEASE_NS, SA, TEAM = "tether-cw-system", "tether", "team-x"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with start_control_plane(tmp_path_factory.mktemp("cw-plane")) as cp:
        yield cp


@pytest.fixture(scope="module")
def cluster_wide(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    """The chart with clusterWide=true (kubernetes executor, its default resources) and its
    operator, authenticated as the chart's ServiceAccount."""
    plane.kubectl("create", "namespace", TEAM)
    plane.helm("install", "tether", str(CHART), "-n", RELEASE_NS, "--create-namespace", "--wait=false",
               "--set", "clusterWide=true", "--set", "store.s3.bucket=runs", "--set", "executor.propagatedLabels={team}")  # fmt: skip
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/agentruns.tether.dev")
    deploy = json.loads(plane.kubectl("get", "deployment", "tether", "-n", RELEASE_NS, "-o", "json").stdout)
    chart_env = {e["name"]: e["value"] for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"] if "value" in e}
    token = plane.kubectl("create", "token", SA, "-n", RELEASE_NS, "--duration=1h").stdout.strip()
    work = tmp_path_factory.mktemp("cw-operator")
    op = Operator(
        kubeconfig_with_token(plane, token, work / "kubeconfig"),
        work,
        (),
        **{k: chart_env[k] for k in ("TETHER_CLUSTER_WIDE", "TETHER_EXECUTOR", "TETHER_DEFAULT_RESOURCES", "TETHER_PROPAGATED_LABELS")},
        TETHER_RUNTIME_IMAGE="registry.example/tether-runtime:test",
        TETHER_RESYNC_SECONDS="1",
    )
    op.start()
    yield op
    op.stop()


def _run(plane: ControlPlane, ns: str, name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    doc = {
        "apiVersion": "tether.dev/v1alpha1",
        "kind": "AgentRun",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hello", **spec},
    }
    plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(doc))
    return json.loads(plane.kubectl("get", "agentrun", name, "-n", ns, "-o", "json").stdout)


def _get(plane: ControlPlane, kind: str, ns: str, name: str) -> dict[str, Any]:
    return json.loads(plane.kubectl("get", kind, name, "-n", ns, "-o", "json").stdout)


def _names(plane: ControlPlane, kind: str, ns: str) -> list[str]:
    return plane.kubectl("get", kind, "-n", ns, "-o", "name").stdout.split()


def _pod(plane: ControlPlane, run: dict[str, Any], ns: str = TEAM) -> dict[str, Any]:
    name = f"{execution_name(run['metadata']['uid'])}-1"
    return wait_for(lambda: name in " ".join(_names(plane, "pods", ns)) and _get(plane, "pod", ns, name), what=f"pod {name}")


@pytest.mark.kube
def test_a_cluster_wide_operator_never_acts_in_kube_system(plane: ControlPlane, cluster_wide: Operator) -> None:
    # The ClusterRole does grant pods there (it cannot leave a namespace out); the operator refuses.
    sa = f"system:serviceaccount:{RELEASE_NS}:{SA}"
    assert plane.kubectl("auth", "can-i", "create", "pods", "-n", "kube-system", f"--as={sa}", check=False).stdout.strip() == "yes"
    before = {kind: _names(plane, kind, "kube-system") for kind in ("pods", "configmaps", "serviceaccounts")}
    _run(plane, "kube-system", "in-kube-system")
    control = _run(plane, TEAM, "in-a-team")  # the same operator serves an ordinary namespace
    _pod(plane, control)
    plane.kubectl("wait", "-n", "kube-system", "--for=condition=Stalled", "--timeout=30s", "agentrun/in-kube-system")
    run = _get(plane, "agentrun", "kube-system", "in-kube-system")
    accepted = condition(run, "Accepted")
    assert (run["status"]["phase"], accepted["status"], accepted["reason"]) == ("Failed", "False", "NamespaceNotServed")
    assert accepted["message"].startswith("namespace kube-system: Tether never serves kube-system, kube-public, kube-node-lease")
    assert "execution" not in run["status"] and not run["metadata"].get("finalizers")
    after = {kind: _names(plane, kind, "kube-system") for kind in ("pods", "configmaps", "serviceaccounts")}
    assert after == before, "nothing created in kube-system (no runner pod, request ConfigMap or ServiceAccount)"


@pytest.mark.kube
def test_runner_pods_get_only_allowed_labels_and_default_resources(plane: ControlPlane, cluster_wide: Operator) -> None:
    labels = {"app": "payments", "team": "blue", "tether.dev/execution": "forged"}
    run = _run(plane, TEAM, "labelled", labels=labels)
    pod = _pod(plane, run)
    got = pod["metadata"]["labels"]
    assert "app" not in got, "a copied app label would make the pod an endpoint of Service payments"
    assert got["team"] == "blue"  # chart value executor.propagatedLabels: [team]
    assert got["tether.dev/execution"] == execution_name(run["metadata"]["uid"]) and got["tether.dev/run"] == "labelled"
    # a Service or NetworkPolicy selecting app=payments does not select it (the apiserver's own selector)
    selected = plane.kubectl("get", "pods", "-n", TEAM, "-l", "app=payments", "-o", "name").stdout.split()
    assert pod["metadata"]["name"] not in " ".join(selected)
    # the chart's default resources, and a spec's own cpu replacing only requests.cpu
    assert pod["spec"]["containers"][0]["resources"] == DEFAULTS
    sized = _pod(plane, _run(plane, TEAM, "sized", resources={"cpu": "2"}))
    assert sized["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "2", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}


@pytest.mark.kube
def test_the_network_policy_is_accepted_and_selects_runner_pods(plane: ControlPlane, cluster_wide: Operator, helm: Path) -> None:
    # No CNI here enforces it (a kind cluster with Calico or Cilium would): this checks the
    # apiserver accepts the rendered policy and that its selector picks the runner pods.
    policy, tool_pods = of_kind(render(helm, *NETWORK, scope=f"watchNamespaces={{{TEAM}}}"), "NetworkPolicy")
    for doc in (policy, tool_pods):
        plane.kubectl("apply", "-f", "-", input=json.dumps(doc))
    stored = _get(plane, "networkpolicy", TEAM, policy["metadata"]["name"])
    assert stored["spec"]["egress"] == policy["spec"]["egress"] and stored["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert _get(plane, "networkpolicy", TEAM, tool_pods["metadata"]["name"])["spec"]["ingress"] == tool_pods["spec"]["ingress"]
    pod = _pod(plane, _run(plane, TEAM, "fenced"))
    selected = plane.kubectl("get", "pods", "-n", TEAM, "-l", "tether.dev/execution", "-o", "name").stdout.split()
    assert f"pod/{pod['metadata']['name']}" in selected


@pytest.mark.kube
def test_apiserver_and_tether_api_agree_on_the_bounds(plane: ControlPlane, cluster_wide: Operator) -> None:
    # The CRD's bounds and formats only: which well-formed images a cluster allows is the chart's
    # image allowlist, another layer with its own tests (test_admin_choices.py), so its binding goes.
    plane.kubectl("delete", "validatingadmissionpolicybinding", "tether-allowed-code", "--ignore-not-found")
    wait_for(lambda: _admitted(plane, edit(RUN, "spec.image", "python:3.12-slim"))[0], what="the allowlist's binding gone")
    disagreements = []
    for base, path, value, expected in BOUNDS:
        doc = edit(base, path, value)
        (server, said), (offline, _) = _admitted(plane, doc), _offline(doc)
        if (server, offline) != (expected, expected):
            disagreements.append(f"{doc['kind']} {path}={value!r}: apiserver {server}, tether.api {offline}, expected {expected}: {said}")
        elif not expected:
            assert path.removeprefix("spec.") in said or path in said, f"{path}={value!r}: the message names no field: {said}"
    assert not disagreements, "\n".join(disagreements)


@pytest.mark.kube
def test_cluster_wide_operator_never_crashed(cluster_wide: Operator) -> None:
    assert cluster_wide.alive()
    assert "Traceback" not in cluster_wide.logs(), cluster_wide.logs()[-4000:]
