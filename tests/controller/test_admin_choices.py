"""Images, agent modules and Secret use are the cluster admin's choice, on the real apiserver with
the chart installed, attacked by a user with only `create agentruns` (issue 22).

Two releases of the chart, each with its own operator process (as its ServiceAccount):
`tether-trust` (kubernetes executor, trust-k; images.allowed and agents.allowedModules set) and
`tether-trust-l` (local executor, trust-l, running agents with the openai environment).

- An image outside images.allowed (`spec.image: attacker.example/exfil:1` beside an AgentTool
  holding a Secret) is refused at admission, and by the operator when the admission policy is
  gone (ImageNotAllowed, no pod); an AgentTool with such an image is Ready=False. The admission
  policy's CEL and the operator's rule agree on a table of images.
- `spec.agent: os:system` is refused at admission (agents.allowedModules set) or Accepted=False
  (AgentNotAllowed, the default); the runtime's own refusal is in tests/core/test_tool_secrets.py.
- The kubernetes executor never mounts a Secret that is missing or not labelled
  tether.dev/usable=true (no pod until it is).
- With the Secret access policy's binding deleted, a run naming a Secret waits
  (AdmissionPolicyMissing) and the attacker's server hears nothing; restored, the run created
  meanwhile is refused for good (nobody checked it). `use` on a Secret lets a user name it
  without reading it. The chart refuses to disable the policy unless tenancy is single-tenant.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube import ControlPlane, ensure_k8s_tools
from tether.testing.fake_provider import FakeProvider
from tether_operator import execution_name
from tether_operator.images import refusal
from tether_operator.settings import ExecutorSettings, Settings

from .conftest import CHART, TOOLBOX, Operator, Release, condition, get, install_release, release_operator, uninstall_release, wait_for
from .test_e2e_openai import _agent_python

pytestmark = pytest.mark.kube

K8S_NS, LOCAL_NS = "trust-k", "trust-l"
K8S = Release("tether-trust-system", "tether-trust", (K8S_NS,), "")
LOCAL = Release("tether-trust-l-system", "tether-trust-l", (LOCAL_NS,), "")
RUNTIME_IMAGE = "ghcr.io/tether-dev/tether-runtime:test"  # the chart's runtime repository, as deployed
IMAGES = ("registry.example.com/team/", "ghcr.io/org/agents")  # chart value images.allowed
ALLOWED = Settings(allowed_images=IMAGES, executor=ExecutorSettings(runtime_image=RUNTIME_IMAGE)).images_allowed
EXFIL = "attacker.example/exfil:1"
MALLORY = "tether-test-user-3"  # a static-token user with no rights of its own
WEATHER_KEY = "weather-key-do-not-send-7731"
DB_PASSWORD = "db-password-do-not-send-9902"


def _doc(kind: str, name: str, spec: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "tether.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec})


def _run(name: str, **spec: Any) -> str:
    return _doc("AgentRun", name, {"framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hello", "retries": 0, **spec})


def _tool(name: str, secret: str | None = None, **spec: Any) -> str:
    env = [{"name": "KEY", "secretKeyRef": {"name": secret, "key": "key"}}] if secret else []
    return _doc("AgentTool", name, {"description": "a tool", "implementation": "shop.tools:crm", **({"env": env} if env else {}), **spec})


@pytest.fixture(scope="module")
def releases(kube: ControlPlane, tether_release: Release) -> Iterator[None]:
    """Both releases (CRDs come with the session release), a labelled Secret in each namespace,
    and Mallory, who may only create AgentRuns there. Uninstalled after the module: their
    cluster-wide admission policies would otherwise apply in other tests' namespaces."""
    install_release(kube, K8S, "--set", "store.s3.bucket=runs", "--set", "images.allowed={" + ",".join(IMAGES) + "}",
                    "--set", "agents.allowedModules={shop.agents}")  # fmt: skip
    install_release(kube, LOCAL, "--set", "executor.kind=local", "--set", "providers.allowedBaseURLs={http://127.0.0.1}")
    for ns, name, value in ((K8S_NS, "weather-key", WEATHER_KEY), (LOCAL_NS, "db-creds", DB_PASSWORD), (LOCAL_NS, "shared", "shared-7")):
        kube.kubectl("create", "secret", "generic", name, "-n", ns, f"--from-literal=key={value}")
        kube.kubectl("label", "secret", name, "-n", ns, "tether.dev/usable=true")  # labelled: only the creator's rights stop it
    for ns in (K8S_NS, LOCAL_NS):
        kube.kubectl("create", "role", "create-runs", "-n", ns, "--verb=create", "--resource=agentruns.tether.dev")
        kube.kubectl("create", "rolebinding", "mallory-creates-runs", "-n", ns, "--role=create-runs", f"--user={MALLORY}")
    wait_for(lambda: _policy_enforced(kube), what="the releases' admission policies")
    yield
    for release in (K8S, LOCAL):
        uninstall_release(kube, release)


def _policy_enforced(kube: ControlPlane) -> bool:
    probe = _tool("probe", image=EXFIL)
    return kube.kubectl("create", "--dry-run=server", "-n", K8S_NS, "-f", "-", input=probe, check=False).returncode != 0


@pytest.fixture(scope="module")
def k8s_operator(kube: ControlPlane, releases: None, tmp_path_factory) -> Iterator[Operator]:
    op = release_operator(kube, K8S, tmp_path_factory.mktemp("trust-k"), TETHER_EXECUTOR="kubernetes", TETHER_RUNTIME_IMAGE=RUNTIME_IMAGE,
                           TETHER_ALLOWED_IMAGES=json.dumps(IMAGES), TETHER_AGENT_MODULES="shop.agents", TETHER_RESYNC_SECONDS="1",
                           TETHER_RUNNER_OTEL=json.dumps({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel.obs:4318"}))  # fmt: skip
    yield op
    op.stop()


@pytest.fixture(scope="module")
def local_operator(kube: ControlPlane, releases: None, tmp_path_factory) -> Iterator[Operator]:
    op = release_operator(kube, LOCAL, tmp_path_factory.mktemp("trust-l"), TETHER_EXECUTOR="local", TETHER_EXEC_PYTHON=_agent_python(),
                           PYTHONPATH=str(TOOLBOX), TETHER_TOOL_MODULES="shop", OPENAI_AGENTS_DISABLE_TRACING="1")  # fmt: skip
    yield op
    op.stop()


@pytest.fixture(scope="module")
def mallory(kube: ControlPlane, releases: None) -> Path:
    return kube.kubeconfig_for(MALLORY)


@pytest.fixture(scope="module")
def attacker() -> Iterator[FakeProvider]:
    with FakeProvider({"conversations": [{"match": "hello", "turns": [{"text": "thanks"}]}]}) as provider:
        yield provider


def _create(kube: ControlPlane, ns: str, doc: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    return kube.kubectl("create", "-n", ns, "-f", "-", input=doc, kubeconfig=kubeconfig, check=False)


def _pod(kube: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    """The first pod of run `name` (the run's status in the message if none comes)."""
    try:
        return wait_for(lambda: (pods := _pods(kube, ns, get(kube, "agentrun", ns, name))) and pods[0], what="pod")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; run status: {json.dumps(get(kube, 'agentrun', ns, name).get('status'))}") from None


def _pods(kube: ControlPlane, ns: str, run: dict[str, Any]) -> list[dict[str, Any]]:
    selector = f"tether.dev/execution={execution_name(run['metadata']['uid'])}"
    return json.loads(kube.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json").stdout)["items"]


@contextmanager
def bindings_deleted(kube: ControlPlane, suffix: str, enforced: Any) -> Iterator[None]:
    """Delete every ValidatingAdmissionPolicyBinding named `*<suffix>` (every release's: they all
    apply), as an admin would by mistake or as on a cluster without the API; restore them after,
    until `enforced()` says the apiserver applies them again."""
    items = json.loads(kube.kubectl("get", "validatingadmissionpolicybindings", "-o", "json").stdout)["items"]
    gone = [b for b in items if b["metadata"]["name"].endswith(suffix)]
    assert gone
    for binding in gone:
        kube.kubectl("delete", "validatingadmissionpolicybinding", binding["metadata"]["name"])
    try:
        yield
    finally:
        for binding in gone:
            meta = {k: v for k, v in binding["metadata"].items() if k in ("name", "labels", "annotations")}
            restored = {k: v for k, v in binding.items() if k != "status"} | {"metadata": meta}
            kube.kubectl("create", "-f", "-", input=json.dumps(restored))
        wait_for(enforced, what="the admission policy enforced again")


def _created_despite_policy_lag(kube: ControlPlane, ns: str, doc: str, kubeconfig: Path) -> None:
    """The apiserver drops a deleted binding a moment later: create until admitted."""
    wait_for(lambda: _create(kube, ns, doc, kubeconfig).returncode == 0, what="admitted")


def test_an_image_outside_images_allowed_is_refused_at_admission_and_by_the_operator(
    kube: ControlPlane, k8s_operator: Operator, mallory: Path
) -> None:
    kube.kubectl("apply", "-n", K8S_NS, "-f", "-", input=_tool("weather", "weather-key"))  # the admin's tool, with a Secret
    can_i = ["auth", "can-i", "-n", K8S_NS, f"--as={MALLORY}"]
    assert kube.kubectl(*can_i, "create", "agentruns.tether.dev", check=False).returncode == 0
    assert kube.kubectl(*can_i, "get", "secrets/weather-key", check=False).returncode != 0

    # The attack: the admin's tool (its Secret mounted for its calls) in an image of Mallory's.
    exfil = _run("exfil", tools=["weather"], image=EXFIL)
    proc = _create(kube, K8S_NS, exfil, mallory)
    assert proc.returncode != 0
    allowed = f"chart value images.allowed: {', '.join(ALLOWED)}"
    assert f"spec.image {EXFIL} is not an allowed image ({allowed})" in proc.stderr, proc.stderr
    # Not a namespace admin's choice either: the admin's own AgentTool with that image is refused.
    proc = _create(kube, K8S_NS, _tool("exfil-tool", image=EXFIL))
    assert proc.returncode != 0 and f"spec.image {EXFIL} is not an allowed image" in proc.stderr, proc.stderr

    # The admission policy is only the second line: without it the operator refuses.
    with bindings_deleted(kube, "-allowed-code", lambda: _policy_enforced(kube)):
        _created_despite_policy_lag(kube, K8S_NS, exfil, mallory)
        _create(kube, K8S_NS, _tool("exfil-tool", image=EXFIL))
        kube.kubectl("wait", "-n", K8S_NS, "--for=condition=Stalled", "--timeout=30s", "agentrun/exfil")
        run = get(kube, "agentrun", K8S_NS, "exfil")
        accepted = condition(run, "Accepted")
        assert (accepted["status"], accepted["reason"], run["status"]["phase"]) == ("False", "ImageNotAllowed", "Failed")
        assert f"spec.image {EXFIL!r} is not an allowed image ({allowed})" in accepted["message"]
        kube.kubectl("wait", "-n", K8S_NS, "--for=condition=Stalled", "--timeout=30s", "agenttool/exfil-tool")
        ready = condition(get(kube, "agenttool", K8S_NS, "exfil-tool"), "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "ImageNotAllowed")
        assert f"spec.image of AgentTool exfil-tool {EXFIL!r} is not an allowed image" in ready["message"]
        assert not _pods(kube, K8S_NS, run), "no pod ran the attacker's image"
        assert kube.kubectl("get", "configmap", execution_name(run["metadata"]["uid"]), "-n", K8S_NS, check=False).returncode != 0

    # An allowed image runs, with the tool's Secret mounted for the tool.
    assert _create(kube, K8S_NS, _run("team-image", tools=["weather"], image="registry.example.com/team/agent:1"), mallory).returncode == 0
    pod = _pod(kube, K8S_NS, "team-image")
    assert pod["spec"]["containers"][0]["image"] == "registry.example.com/team/agent:1"
    assert WEATHER_KEY not in json.dumps(get(kube, "agentrun", K8S_NS, "exfil")) + k8s_operator.logs()


@pytest.mark.parametrize(
    ("image", "allowed"),
    [
        ("ghcr.io/tether-dev/tether-runtime:latest", True),  # the chart's runtime repository, any tag
        ("registry.example.com/team/agent:1", True),  # under a path prefix
        ("registry.example.com/team/sub/agent@sha256:" + "a" * 64, True),
        ("registry.example.com/team-evil/agent:1", False),  # a prefix ends at `/`
        ("registry.example.com/teamx", False),
        ("registry.example.com.evil.io/team/agent:1", False),
        ("ghcr.io/org/agents", True),  # one repository, any tag or digest
        ("ghcr.io/org/agents:2", True),
        ("ghcr.io/org/agents:2@sha256:" + "b" * 64, True),
        ("ghcr.io/org/agents-evil:2", False),
        ("ghcr.io/org/agents/sub:2", False),
        ("GHCR.io/org/agents:2", False),  # compared as written
        (EXFIL, False),
        ("registry.example.com/team/../x:1", False),  # not an image reference
        ("not an image ref !!", False),
    ],
)
def test_the_admission_policy_and_the_operator_agree_on_images(kube: ControlPlane, releases: None, image: str, allowed: bool) -> None:
    assert (refusal(image, ALLOWED, "spec.image") is None) == allowed
    proc = kube.kubectl("create", "--dry-run=server", "-n", K8S_NS, "-f", "-", input=_tool("parity", image=image), check=False)
    assert (proc.returncode == 0) == allowed, proc.stderr


def test_an_agent_module_not_allowed_is_refused(
    kube: ControlPlane, k8s_operator: Operator, local_operator: Operator, mallory: Path
) -> None:
    # agents.allowedModules set: refused at admission.
    proc = _create(kube, K8S_NS, _run("shell", agent="os:system"), mallory)
    assert proc.returncode != 0
    assert "spec.agent: module os is not an allowed agent module (allowed: shop.agents; chart value agents.allowedModules)" in proc.stderr
    assert _create(kube, K8S_NS, _run("byo", agent="shop.agents:triage"), mallory).returncode == 0
    pod = _pod(kube, K8S_NS, "byo")
    assert {"name": "TETHER_AGENT_MODULES", "value": "shop.agents"} in pod["spec"]["containers"][0]["env"]  # the runtime checks too
    # The chart's telemetry.otel reaches the runner pod (its traces: tether.telemetry).
    assert {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel.obs:4318"} in pod["spec"]["containers"][0]["env"]

    # The default (the image's declared agents): the operator refuses the standard library.
    assert _create(kube, LOCAL_NS, _run("shell", agent="os:system"), mallory).returncode == 0
    kube.kubectl("wait", "-n", LOCAL_NS, "--for=condition=Stalled", "--timeout=30s", "agentrun/shell")
    run = get(kube, "agentrun", LOCAL_NS, "shell")
    accepted = condition(run, "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "AgentNotAllowed")
    assert "spec.agent: os:system is in the Python standard library, which never provides agents" in accepted["message"]
    assert not (local_operator.workdir / "executions" / execution_name(run["metadata"]["uid"])).exists(), "nothing ran"


def test_the_kubernetes_executor_mounts_only_labelled_secrets(kube: ControlPlane, k8s_operator: Operator) -> None:
    kube.kubectl("create", "secret", "generic", "plain", "-n", K8S_NS, "--from-literal=key=plain-value-4471")
    kube.kubectl(
        "apply",
        "-n",
        K8S_NS,
        "-f",
        "-",
        input=_run("plain-key", model={"name": "gpt-4.1", "apiKeySecretRef": {"name": "plain", "key": "key"}}),
    )
    kube.kubectl("apply", "-n", K8S_NS, "-f", "-", input=_tool("plain-tool", "plain"))
    kube.kubectl("apply", "-n", K8S_NS, "-f", "-", input=_run("plain-via-tool", tools=["plain-tool"]))
    kube.kubectl(
        "apply",
        "-n",
        K8S_NS,
        "-f",
        "-",
        input=_run("ghost-key", model={"name": "gpt-4.1", "apiKeySecretRef": {"name": "ghost", "key": "key"}}),
    )
    reason = lambda name: condition(get(kube, "agentrun", K8S_NS, name), "Accepted").get("reason")  # noqa: E731
    wait_for(lambda: reason("plain-key") == "SecretNotUsable" and reason("plain-via-tool") == "SecretNotUsable", what="SecretNotUsable")
    wait_for(lambda: reason("ghost-key") == "MissingSecret", what="MissingSecret")
    assert (
        f"Secret {K8S_NS}/plain (model API key) is not labelled tether.dev/usable=true"
        in condition(get(kube, "agentrun", K8S_NS, "plain-key"), "Accepted")["message"]
    )
    tool = get(kube, "agenttool", K8S_NS, "plain-tool")
    assert condition(tool, "Ready")["reason"] == "SecretNotUsable" and condition(tool, "Reconciling")["status"] == "True"
    time.sleep(2)  # several accept rounds
    runs = {name: get(kube, "agentrun", K8S_NS, name) for name in ("plain-key", "plain-via-tool", "ghost-key")}
    assert all(not _pods(kube, K8S_NS, run) for run in runs.values()), "no pod mounts an unlabelled or missing Secret"
    assert all(run["status"]["phase"] == "Pending" for run in runs.values())  # waiting, not failed

    kube.kubectl("label", "secret", "plain", "-n", K8S_NS, "tether.dev/usable=true")
    pod = _pod(kube, K8S_NS, "plain-key")
    sources = next(v for v in pod["spec"]["volumes"] if v["name"] == "secrets")["projected"]["sources"]
    assert sources == [{"secret": {"name": "plain", "items": [{"key": "key", "path": "model/apiKey"}]}}]
    assert "plain-value-4471" not in k8s_operator.logs()


def _steal_probe(kube: ControlPlane, mallory: Path) -> bool:
    probe = _run("probe", model={"name": "gpt-4.1", "apiKeySecretRef": {"name": "db-creds", "key": "key"}})
    return (
        kube.kubectl("create", "--dry-run=server", "-n", LOCAL_NS, "-f", "-", input=probe, kubeconfig=mallory, check=False).returncode != 0
    )


def test_runs_naming_secrets_wait_while_the_secret_access_policy_is_missing(
    kube: ControlPlane, local_operator: Operator, mallory: Path, attacker: FakeProvider
) -> None:
    steal = _run(
        "steal", model={"name": "gpt-4.1", "baseURL": attacker.base_url("openai"), "apiKeySecretRef": {"name": "db-creds", "key": "key"}}
    )
    assert _create(kube, LOCAL_NS, steal, mallory).returncode != 0  # the policy holds: Mallory may not get db-creds

    with bindings_deleted(kube, "-secret-access", lambda: _steal_probe(kube, mallory)):
        _created_despite_policy_lag(kube, LOCAL_NS, steal, mallory)
        wait_for(
            lambda: condition(get(kube, "agentrun", LOCAL_NS, "steal"), "Accepted").get("reason") == "AdmissionPolicyMissing",
            what="AdmissionPolicyMissing",
        )
        run = get(kube, "agentrun", LOCAL_NS, "steal")
        message = condition(run, "Accepted")["message"]
        assert f"ValidatingAdmissionPolicyBinding {LOCAL.service_account}-secret-access not found" in message
        assert "chart value secretAccessPolicy.enabled: true" in message and "chart value tenancy: single-tenant" in message
        assert run["status"]["phase"] == "Pending" and condition(run, "Reconciling")["status"] == "True"
        time.sleep(3)  # several accept rounds
        assert attacker.ledger.snapshot() == [], "the attacker's server heard from the run"

    # Restored: the run admitted meanwhile was never checked, and never runs.
    kube.kubectl("wait", "-n", LOCAL_NS, "--for=condition=Stalled", "--timeout=30s", "agentrun/steal")
    accepted = condition(get(kube, "agentrun", LOCAL_NS, "steal"), "Accepted")
    assert accepted["reason"] == "AdmissionPolicyMissing"
    assert f"before ValidatingAdmissionPolicy {LOCAL.service_account}-secret-access and its binding were in place" in accepted["message"]
    assert "delete and recreate it" in accepted["message"]
    assert attacker.ledger.snapshot() == [], "the attacker's server heard from the run"
    everything = kube.kubectl("get", "agentruns,events", "-n", LOCAL_NS, "-o", "json").stdout + local_operator.logs()
    assert DB_PASSWORD not in everything


def test_use_on_a_secret_lets_a_user_name_it_without_reading_it(kube: ControlPlane, local_operator: Operator, mallory: Path) -> None:
    nowhere = {"name": "gpt-4.1", "baseURL": "http://127.0.0.1:9/v1", "apiKeySecretRef": {"name": "shared", "key": "key"}}
    assert _create(kube, LOCAL_NS, _run("shared-before", model=nowhere), mallory).returncode != 0
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "use-shared"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["shared"], "verbs": ["use"]}]}  # fmt: skip
    kube.kubectl("create", "-n", LOCAL_NS, "-f", "-", input=json.dumps(role))  # `kubectl create role` knows no `use`
    kube.kubectl("create", "rolebinding", "mallory-uses-shared", "-n", LOCAL_NS, "--role=use-shared", f"--user={MALLORY}")
    assert kube.kubectl("auth", "can-i", "get", "secrets/shared", "-n", LOCAL_NS, f"--as={MALLORY}", check=False).returncode != 0
    wait_for(lambda: _create(kube, LOCAL_NS, _run("shared-use", model=nowhere), mallory).returncode == 0, what="admitted")
    kube.kubectl("wait", "-n", LOCAL_NS, "--for=condition=Accepted", "--timeout=30s", "agentrun/shared-use")


def test_the_operator_reads_secret_metadata_and_its_policy_by_name_only(kube: ControlPlane, releases: None) -> None:
    who = f"--as=system:serviceaccount:{K8S.namespace}:{K8S.service_account}"

    def can(*args: str) -> bool:
        return kube.kubectl("auth", "can-i", *args, who, check=False).stdout.strip() == "yes"

    assert can("get", "secrets", "-n", K8S_NS)  # metadata only, by the operator's code (RBAC cannot say so)
    assert not can("list", "secrets", "-n", K8S_NS) and not can("watch", "secrets", "-n", K8S_NS)
    assert not can("get", "secrets", "-n", LOCAL_NS) and not can("get", "secrets", "-n", "kube-system")
    policy = f"{K8S.service_account}-secret-access"
    assert can("get", f"validatingadmissionpolicies.admissionregistration.k8s.io/{policy}")
    assert can("get", f"validatingadmissionpolicybindings.admissionregistration.k8s.io/{policy}")
    assert not can("get", "validatingadmissionpolicies.admissionregistration.k8s.io/other")
    assert not can("delete", f"validatingadmissionpolicybindings.admissionregistration.k8s.io/{policy}")
    assert not can("list", "validatingadmissionpolicies.admissionregistration.k8s.io")


def test_the_chart_refuses_to_disable_the_policy_unless_single_tenant() -> None:
    helm = ensure_k8s_tools() / "helm"
    argv = [str(helm), "template", "tether", str(CHART), "--set", "store.s3.bucket=runs", "--set", "watchNamespaces={team-a}"]
    argv += ["--set", "secretAccessPolicy.enabled=false"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode != 0 and "tenancy" in proc.stderr and "single-tenant" in proc.stderr, proc.stderr
    proc = subprocess.run([*argv, "--skip-schema-validation"], capture_output=True, text=True)  # the template says why too
    assert proc.returncode != 0 and "secretAccessPolicy.enabled=false needs tenancy=single-tenant" in proc.stderr, proc.stderr
    proc = subprocess.run([*argv, "--set", "tenancy=single-tenant"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert {d["metadata"]["name"] for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")} == {"tether-approvals"}
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TETHER_TENANCY"] == "single-tenant"
    proc = subprocess.run([*argv[:-2], "--set", "tenancy=shared"], capture_output=True, text=True)
    assert proc.returncode != 0 and "tenancy" in proc.stderr
