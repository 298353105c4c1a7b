"""The chart in Flyte-executor mode on the real apiserver: its operator's rights, proved by
impersonation (namespaced mode gets Secrets' metadata in its namespaces only and makes no pods), and its declared
capabilities (a run asking for placement the Flyte executor does not pass through is refused,
Accepted=False naming the field, before anything is submitted). The executor's work against a
real Flyte backend is tests/flyte/."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support.kube import ControlPlane

from .conftest import CHART, Operator, Release, condition, get, install_release, release_operator, wait_for

pytestmark = pytest.mark.kube

NS, NS_B, OTHER = "fly-a", "fly-b", "fly-other"
RELEASE = Release("tether-fly-system", "tether-fly", (NS, NS_B), OTHER)


@pytest.fixture(scope="module")
def flyte_release(kube: ControlPlane, tether_release: Release) -> Release:
    install_release(kube, RELEASE, "--set", "store.s3.bucket=runs", "--set", "executor.kind=flyte",
                    "--set", "executor.flyte.endpoint=flyte.flyte.svc:8090")  # fmt: skip
    return RELEASE


def can(kube: ControlPlane, release: Release, verb: str, resource: str, ns: str | None = None, sub: str = "") -> bool:
    args = ["auth", "can-i", verb, resource, f"--as={release.subject}"] + ([f"--subresource={sub}"] if sub else [])
    args += ["-n", ns] if ns else ["--all-namespaces"]
    return kube.kubectl(*args, check=False).stdout.strip() == "yes"


def test_flyte_mode_rbac_is_its_own_resources_only(kube: ControlPlane, flyte_release: Release) -> None:
    release = flyte_release
    for ns in release.served:
        assert can(kube, release, "patch", "agentruns.tether.dev", ns) and can(
            kube, release, "patch", "agentruns.tether.dev", ns, sub="status"
        )
        assert can(kube, release, "create", "events", ns)
        assert can(kube, release, "get", "secrets", ns), "metadata only: the Secret a run names exists, labelled for Tether"
        for verb in ("list", "watch"):
            assert not can(kube, release, verb, "secrets", ns), (verb, ns)
        for resource in ("pods", "configmaps", "serviceaccounts"):
            assert not can(kube, release, "create", resource, ns), (resource, ns)
        assert not can(kube, release, "list", "pods", ns)
    for ns in (OTHER, "kube-system", release.namespace):
        assert not can(kube, release, "get", "secrets", ns), ns
        assert not can(kube, release, "list", "agentruns.tether.dev", ns), ns
    assert not can(kube, release, "get", "secrets")
    assert not can(kube, release, "list", "pods")


def test_flyte_mode_deployment_points_at_the_backend(kube: ControlPlane, flyte_release: Release) -> None:
    deploy = get(kube, "deployment", flyte_release.namespace, "tether-fly")
    env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TETHER_EXECUTOR"] == "flyte"
    assert (env["TETHER_FLYTE_ENDPOINT"], env["TETHER_FLYTE_PROJECT"], env["TETHER_FLYTE_DOMAIN"]) == (
        "flyte.flyte.svc:8090",
        "tether-{namespace}",  # a Flyte project per namespace: its secrets are its own
        "development",
    )
    failed = kube.helm("template", "x", str(CHART), "--set", "store.s3.bucket=runs", "--set", "executor.kind=flyte",
                       "--set", "watchNamespaces={a}", check=False)  # fmt: skip
    assert failed.returncode != 0 and "executor.flyte.endpoint" in failed.stderr
    # One project for every namespace would give them one set of Flyte secrets: refused.
    shared = kube.helm("template", "x", str(CHART), "--set", "store.s3.bucket=runs", "--set", "executor.kind=flyte",
                       "--set", "executor.flyte.endpoint=flyte:8090", "--set", "executor.flyte.project=tether", check=False)  # fmt: skip
    assert shared.returncode != 0 and "/executor/flyte/project" in shared.stderr and "{namespace" in shared.stderr


@pytest.fixture(scope="module")
def flyte_operator(kube: ControlPlane, flyte_release: Release, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    # No backend is reachable at this endpoint: a refused run never gets as far as submitting.
    op = release_operator(kube, flyte_release, tmp_path_factory.mktemp("flyte-operator"),
                          TETHER_EXECUTOR="flyte", TETHER_FLYTE_ENDPOINT="127.0.0.1:9", TETHER_FLYTE_INSECURE="1")  # fmt: skip
    yield op
    op.stop()


def test_placement_the_flyte_executor_does_not_pass_is_refused(kube: ControlPlane, flyte_operator: Operator) -> None:
    body = {"framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hi", "nodeSelector": {"pool": "fast"},
            "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}  # fmt: skip
    doc = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "metadata": {"name": "placed"}, "spec": body}
    kube.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(doc))
    kube.kubectl("wait", "-n", NS, "--for=condition=Stalled", "--timeout=60s", "agentrun/placed")
    accepted = condition(get(kube, "agentrun", NS, "placed"), "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "UnsupportedByExecutor")
    assert "the flyte executor does not honour spec.nodeSelector, spec.tolerations" in accepted["message"]
    assert "Submitted" not in flyte_operator.logs()


def test_the_flyte_executor_uses_only_labelled_secrets(kube: ControlPlane, flyte_operator: Operator) -> None:
    """The label is checked in every executor: here from the Secret's metadata (Flyte injects the value)."""
    kube.kubectl("create", "secret", "generic", "unlabelled", "-n", NS, "--from-literal=key=unlabelled-value-5120")
    model = {"name": "gpt-4.1", "apiKeySecretRef": {"name": "unlabelled", "key": "key"}}
    doc = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "metadata": {"name": "unlabelled"},
           "spec": {"framework": "openai", "model": model, "input": "hi"}}  # fmt: skip
    kube.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(doc))
    wait_for(
        lambda: condition(get(kube, "agentrun", NS, "unlabelled"), "Accepted").get("reason") == "SecretNotUsable", what="SecretNotUsable"
    )
    assert (
        f"Secret {NS}/unlabelled (model API key) is not labelled tether.dev/usable=true"
        in condition(get(kube, "agentrun", NS, "unlabelled"), "Accepted")["message"]
    )
    assert "Submitted" not in flyte_operator.logs() and "unlabelled-value-5120" not in flyte_operator.logs()
