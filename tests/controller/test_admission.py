"""The apiserver and the runtime agree on every value, and what only the operator can judge (where
a provider URL really points, a spec the runtime refuses after admission) becomes a condition that
names the field."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kube import ControlPlane
from tether import api
from tether_operator.checks import check_base_url, check_mcp_url, url_allowed

from .conftest import SERVED, Operator, Release, condition, get, wait_for
from .test_crd_validation import RUN, TOOL, apply, dry_run, edit

# (document, path, value): each is sent to the apiserver and to tether.api; the verdicts must match.
AGREEMENT: list[tuple[dict[str, Any], str, Any]] = [
    *[
        (RUN, "spec.resources.cpu", q)
        for q in ("500m", "+500m", "2", ".5", "1.", "1e3", "1E3", "-0", "0.5Gi", "-1", "5ki", "1 ", "0x10", "two", "")
    ],
    *[(RUN, "spec.resources.memory", q) for q in ("4Gi", "+1Gi", "1e400", "1.5Mi", "-1Gi", "4GB")],
    *[(RUN, "spec.timeout", d) for d in ("90s", "1h30m", "250ms", "01m", "0s", "0h0m", "1d", "", "1.5h", "1h 30m")],
    *[(TOOL, "spec.timeout", d) for d in ("30s", "0ms", "5 minutes")],
    *[
        (RUN, "spec.model.baseURL", u)
        for u in (
            "http://127.0.0.1:8080/v1",
            "HTTPS://API.EXAMPLE.COM",
            "https://[::1]:8/v1",
            "http://h/@path",
            "http://h?x=@y",
            "http://",
            "http:///v1",
            "https://u:p@h",
            "https://token@h/v1",
            "ftp://h",
            "http://h:99999",
            "http://h:abc",
            "http://a b",
            "http://[::1/v1",
            "http://h/a b",
        )
    ],
    *[(RUN, "spec.input", s) for s in ("x", " ", "\t\n", "\u00a0", "")],
    *[(RUN, "spec.instructions", s) for s in ("be brief", "  ")],
    *[(TOOL, "spec.description", s) for s in ("Refund", " ")],
    *[(RUN, "spec.framework", f) for f in ("openai", "langgraph", "langchain", "pydantic-ai", "claude", "OpenAI")],
    *[
        (RUN, "spec.tolerations", [t])
        for t in (
            {"key": "spot", "operator": "Exists", "effect": ""},
            {"key": "spot", "operator": "Equal", "value": "yes", "effect": "NoSchedule"},
            {"operator": "Exists"},
            {"key": "spot", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
            {"key": "spot", "operator": "Exists", "value": "yes"},
            {"operator": "Equal", "value": "yes"},
            {"key": "spot", "operator": "Exists", "tolerationSeconds": 30},
            {"key": "spot", "value": "a b"},
        )
    ],
    *[(RUN, "spec.nodeSelector", {"disk": v}) for v in ("ssd", "", "fast ssd", "s" * 63, "s" * 64)],
    *[(RUN, "spec.retries", r) for r in (0, 20, 21, "2", 2.5)],
    *[(RUN, "spec.durable", b) for b in (True, "true")],
    *[(RUN, "spec.limits.maxCostUSD", c) for c in (0, 2.5, "2.5")],
    *[(RUN, "metadata.name", "r" * n) for n in (63, 64)],
    (
        TOOL,
        "spec.env",
        [{"name": "A", "secretKeyRef": {"name": "s", "key": "k"}}, {"name": "B", "secretKeyRef": {"name": "s", "key": "k"}}],
    ),
    (
        TOOL,
        "spec.env",
        [{"name": "A", "secretKeyRef": {"name": "s", "key": "k"}}, {"name": "A", "secretKeyRef": {"name": "t", "key": "k"}}],
    ),
]


# Documented as valid, so both must accept them (issue 13: `+500m` and `effect: ""` were not).
MUST_PASS: list[tuple[dict[str, Any], str, Any]] = [
    (RUN, "spec.resources.cpu", "+500m"),
    (RUN, "spec.tolerations", [{"key": "spot", "operator": "Exists", "effect": ""}]),
    (RUN, "spec.tolerations", [{"operator": "Exists"}]),
    (RUN, "metadata.name", "r" * 63),
]


def admitted(kube: ControlPlane, ns: str, doc: dict[str, Any]) -> bool:
    return dry_run(kube, ns, doc)[0] == 201


def runtime_accepts(doc: dict[str, Any]) -> bool:
    try:
        api.parse_manifest(doc)
    except api.ManifestError:
        return False
    return True


@pytest.mark.kube
def test_apiserver_and_runtime_give_the_same_verdict(kube: ControlPlane, tether_release: Release) -> None:
    disagreements = []
    for base, path, value in AGREEMENT:
        doc = edit(base, path, value)
        server, runtime = admitted(kube, tether_release.unserved, doc), runtime_accepts(doc)
        if server != runtime:
            verdict = f"apiserver {'accepts' if server else 'refuses'}, runtime {'accepts' if runtime else 'refuses'}"
            disagreements.append(f"{path}={value!r}: {verdict}")
    assert not disagreements, "\n".join(disagreements)
    for base, path, value in MUST_PASS:
        doc = edit(base, path, value)
        assert runtime_accepts(doc), f"{path}={value!r}"
        assert admitted(kube, tether_release.unserved, doc), f"{path}={value!r}"
    # both verdicts occur, so the table tests something
    verdicts = {runtime_accepts(edit(b, p, v)) for b, p, v in AGREEMENT}
    assert verdicts == {True, False}


# ------------------------------------------------------------------- provider endpoints (13.5)


def refusal(url: str, allowed: tuple[str, ...] = ()) -> str:
    problems = asyncio.run(check_base_url(url, allowed))
    assert all(p.terminal and p.reason == "BaseURLNotAllowed" for p in problems), problems
    return "; ".join(p.message for p in problems)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254 is a cloud metadata address"),
        ("http://[fd00:ec2::254]/v1", "fd00:ec2::254 is a cloud metadata address"),
        ("http://metadata.google.internal/computeMetadata/v1", "metadata.google.internal is a cloud metadata name"),
        ("http://169.254.10.1:8080/v1", "is a link-local address"),
        ("http://[fe80::1]/v1", "is a link-local address"),
        ("http://127.0.0.1:8080/v1", "127.0.0.1 is a loopback address"),
        ("http://127.9.9.9/v1", "is a loopback address"),
        ("http://[::1]:8080/v1", "is a loopback address"),
        ("http://localhost:8080/v1", "localhost is a loopback name"),
        ("http://LOCALHOST./v1", "localhost is a loopback name"),
        ("http://api.localhost/v1", "api.localhost is a loopback name"),
        ("http://0.0.0.0:8080/v1", "is an unspecified address"),
        ("http://[::]/v1", "is an unspecified address"),
        ("http://[::ffff:169.254.169.254]/v1", "is a cloud metadata address"),
        # names that only resolution reveals: the shorthand and decimal forms of 127.0.0.1
        ("http://127.1:8080/v1", "127.1 resolves to 127.0.0.1, is a loopback address"),
        ("http://2130706433/v1", "2130706433 resolves to 127.0.0.1, is a loopback address"),
    ],
)
def test_base_url_to_a_forbidden_address_is_refused(url: str, why: str) -> None:
    message = refusal(url)
    assert message.startswith(f"spec.model.baseURL {url!r}: "), message
    assert why in message and "providers.allowedBaseURLs" in message


def test_public_base_urls_pass_without_an_allowlist() -> None:
    assert asyncio.run(check_base_url("https://203.0.113.7/v1", ())) == []
    assert asyncio.run(check_base_url("http://[2001:db8::1]:8080/v1", ())) == []
    assert asyncio.run(check_base_url(None, ())) == []


def test_allowlist_is_exact_about_host_port_and_path() -> None:
    allowed = ("https://llm.internal/v1", "http://127.0.0.1")
    assert url_allowed("https://llm.internal/v1", allowed)
    assert url_allowed("https://llm.internal/v1/chat", allowed)
    assert url_allowed("https://LLM.internal:443/v1", allowed)  # any port when the entry names none
    assert url_allowed("http://127.0.0.1:8080/v1", allowed)  # the loopback fake provider of a dev install
    assert not url_allowed("https://llm.internal/v10", allowed)  # whole path segments only
    assert not url_allowed("https://llm.internal.evil.com/v1", allowed)
    assert not url_allowed("http://llm.internal/v1", allowed)  # scheme matters
    assert not url_allowed("https://other/v1", allowed)
    assert not url_allowed("http://127.0.0.1.nip.io/v1", allowed)
    assert url_allowed("http://h:8080/", ("http://h:8080",)) and not url_allowed("http://h:9090/", ("http://h:8080",))
    # with an allowlist, everything else is refused, public or not, and the message names the field
    message = refusal("https://api.openai.com/v1", allowed)
    assert message == (
        "spec.model.baseURL 'https://api.openai.com/v1' is not under an allowed base URL "
        "(chart value providers.allowedBaseURLs: https://llm.internal/v1, http://127.0.0.1)"
    )
    assert asyncio.run(check_base_url("http://127.0.0.1:8080/v1", allowed)) == []


def test_an_unresolvable_host_waits() -> None:
    (problem,) = asyncio.run(check_base_url("https://no-such-host.invalid/v1", ()))
    assert problem.reason == "BaseURLUnresolved" and not problem.terminal
    assert problem.message.startswith("spec.model.baseURL 'https://no-such-host.invalid/v1': cannot resolve no-such-host.invalid")


NS = SERVED[1]  # the session operator serves op-a; this module's own operator (no allowlist) op-b


def run_doc(name: str, base_url: str, **spec: Any) -> str:
    body = {"framework": "openai", "model": {"name": "gpt-4.1", "baseURL": base_url}, "input": "hello", "retries": 0, **spec}
    return json.dumps({"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "metadata": {"name": name}, "spec": body})


@pytest.fixture(scope="module")
def open_operator(operator_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    """An operator installed without providers.allowedBaseURLs (the chart's default)."""
    op = Operator(operator_kubeconfig, tmp_path_factory.mktemp("open-operator"), (NS,), TETHER_ALLOWED_BASE_URLS="[]")
    op.start()
    yield op
    op.stop()


def refused(kube: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    kube.kubectl("wait", "-n", ns, "--for=condition=Stalled", "--timeout=30s", f"agentrun/{name}")
    obj = get(kube, "agentrun", ns, name)
    accepted = condition(obj, "Accepted")
    assert (obj["status"]["phase"], accepted["status"], accepted["reason"]) == ("Failed", "False", "BaseURLNotAllowed")
    assert "execution" not in obj["status"], "a refused run must never be submitted"
    return accepted


@pytest.mark.kube
def test_operator_refuses_metadata_and_loopback_endpoints(kube: ControlPlane, tether_release: Release, open_operator: Operator) -> None:
    for name, url, why in (
        ("imds", "http://169.254.169.254/latest", "169.254.169.254 is a cloud metadata address"),
        ("loopback-short", "http://127.1:9/v1", "127.1 resolves to 127.0.0.1, is a loopback address"),
    ):
        kube.kubectl("apply", "-n", NS, "-f", "-", input=run_doc(name, url))
        message = refused(kube, NS, name)["message"]
        assert message.startswith(f"spec.model.baseURL {url!r}: ") and why in message, message


@pytest.mark.kube
def test_an_mcp_server_at_a_metadata_or_loopback_address_is_refused(
    kube: ControlPlane, tether_release: Release, open_operator: Operator
) -> None:
    """An AgentTool's remote MCP server gets the tool's calls and its Secret headers: like a
    provider's base URL, never a metadata or loopback address (a name resolving to one included)."""
    for name, url, why in (
        ("mcp-imds", "http://169.254.169.254/mcp", "169.254.169.254 is a cloud metadata address"),
        ("mcp-loopback", "http://127.1:9/mcp", "127.1 resolves to 127.0.0.1, is a loopback address"),
    ):
        tool = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentTool", "metadata": {"name": name},
                "spec": {"description": "a remote MCP server", "mcp": {"url": url, "tools": ["echo"]}}}  # fmt: skip
        kube.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(tool))
        kube.kubectl("wait", "-n", NS, "--for=condition=Stalled", "--timeout=30s", f"agenttool/{name}")
        stalled = condition(get(kube, "agenttool", NS, name), "Stalled")
        assert stalled["reason"] == "BaseURLNotAllowed" and why in stalled["message"], stalled
        kube.kubectl("apply", "-n", NS, "-f", "-", input=run_doc(f"{name}-run", "https://203.0.113.7/v1", tools=[name]))
        message = refused(kube, NS, f"{name}-run")["message"]
        assert f"spec.mcp.url {url!r} of AgentTool {name}: " in message and why in message, message
    assert asyncio.run(check_mcp_url("https://no-such-host.invalid/mcp", (), "t")) == []  # may be a Service created later
    assert asyncio.run(check_mcp_url("http://127.0.0.1:8080/mcp", ("http://127.0.0.1",), "t")) == []  # the admin's trusted entry
    assert asyncio.run(check_mcp_url("https://mcp.example.com/mcp", ("http://127.0.0.1",), "t")) == []  # the list is not a limit here


@pytest.mark.kube
def test_operator_with_an_allowlist_refuses_everything_else(kube: ControlPlane, tether_release: Release, operator: Operator) -> None:
    # the session operator is installed with providers.allowedBaseURLs=[http://127.0.0.1]
    ns = SERVED[0]
    kube.kubectl("apply", "-n", ns, "-f", "-", input=run_doc("elsewhere", "https://llm.example.com/v1"))
    message = refused(kube, ns, "elsewhere")["message"]
    assert message.startswith("spec.model.baseURL 'https://llm.example.com/v1' is not under an allowed base URL"), message
    # and the allowed loopback fake provider is accepted
    kube.kubectl("apply", "-n", ns, "-f", "-", input=run_doc("allowed-loopback", "http://127.0.0.1:9/v1"))
    kube.kubectl("wait", "-n", ns, "--for=condition=Accepted", "--timeout=30s", "agentrun/allowed-loopback")


# ------------------------------------------------- a spec refused only by the runtime (13.10)


@pytest.mark.kube
def test_spec_refused_after_admission_is_a_readable_condition(kube: ControlPlane, tether_release: Release, operator: Operator) -> None:
    """An object stored under a looser CRD (an older release) that this runtime refuses: the run
    fails with Accepted=False, reason InvalidSpec, naming the field in words, no pydantic dump."""
    ns = SERVED[0]

    def set_input_rules(rules: list[dict[str, str]] | None) -> list[dict[str, str]] | None:
        crd = json.loads(kube.kubectl("get", "crd", "agentruns.tether.dev", "-o", "json").stdout)
        field = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["input"]
        old = field.pop("x-kubernetes-validations", None)
        if rules is not None:
            field["x-kubernetes-validations"] = rules
        kube.kubectl("replace", "-f", "-", input=json.dumps(crd))
        return old

    blank = run_doc("blank-input", "http://127.0.0.1:9/v1", input="   ")
    generated = set_input_rules(None)  # as a looser CRD would: blank input passes admission
    try:
        wait_for(lambda: kube.kubectl("apply", "-n", ns, "-f", "-", input=blank, check=False).returncode == 0, what="the looser CRD served")
    finally:
        set_input_rules(generated)
    kube.kubectl("wait", "-n", ns, "--for=condition=Stalled", "--timeout=30s", "agentrun/blank-input")
    obj = get(kube, "agentrun", ns, "blank-input")
    accepted = condition(obj, "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "InvalidSpec")
    assert accepted["message"] == "spec.input: must not be blank"
    assert condition(obj, "Failed")["message"] == "invalid spec: spec.input: must not be blank"
    # the CRD is back as generated: blank input is refused at admission again
    wait_for(
        lambda: "must not be blank" in apply(kube, ns, edit(RUN, "spec.input", " "), "--dry-run=server").stderr,
        what="the generated CRD served again",
    )
