"""The chart as a registry serves it, and its `helm test`, on the real apiserver.

scripts/chart-package.sh makes tether-VERSION.tgz, its version and appVersion the
distributions' (a chart out of step stops it; nothing is packaged)
the .tgz installs with `helm install` and its test hooks are what `helm test` creates: hook
annotations, a ServiceAccount that may create, read and delete AgentRuns in the served
namespace and `use` the test's key Secret, nothing else
the test pod's own command (tether.testing.helm_test), run with that ServiceAccount's token,
creates the weather run (admitted by the Secret access policy), passes when the run is
Succeeded with the tool's answer and fails naming why otherwise; the test plays the operator
(no kubelet here; the kind e2e runs `helm test` for real)
with tools.allowedModules / providers.allowedBaseURLs set, the test's tool and provider are
added to them; tests.enabled=false renders no hook and keeps the lists as written
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube import ControlPlane, ensure_k8s_tools
from tether.testing.helm_test import EXPECTED

from .conftest import CHART, REPO, Release, install_release, uninstall_release, wait_for

pytestmark = pytest.mark.kube

RELEASE, RELEASE_NS, RUNS_NS = "tether-pkg", "tether-pkg", "pkg-runs"
TEST = "tether-pkg-test"  # the test objects' names: <fullname>-test
PKG = Release(RELEASE_NS, RELEASE, (RUNS_NS,), "")  # the release's ServiceAccount is named after it
VERSION = re.search(r'^version = "([^"]+)"', (REPO / "runtime" / "pyproject.toml").read_text(), re.M).group(1)  # type: ignore[union-attr]


def package(out: Path, root: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_K8S_BIN": str(ensure_k8s_tools())}
    return subprocess.run(
        ["bash", str(root / "scripts" / "chart-package.sh"), str(out)], env=env, capture_output=True, text=True, timeout=120
    )


def test_the_chart_is_at_the_distributions_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == VERSION


def test_a_chart_out_of_step_stops_packaging(tmp_path: Path) -> None:
    copy = tmp_path / "checkout"
    shutil.copytree(CHART, copy / "charts" / "tether")
    (copy / "runtime").mkdir()
    shutil.copy(REPO / "runtime" / "pyproject.toml", copy / "runtime" / "pyproject.toml")
    (copy / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "chart-package.sh", copy / "scripts" / "chart-package.sh")
    chart = copy / "charts" / "tether" / "Chart.yaml"
    chart.write_text(chart.read_text().replace(f'appVersion: "{VERSION}"', 'appVersion: "9.9.9"'))
    proc = package(tmp_path / "out", root=copy)
    assert proc.returncode == 1, proc.stderr
    assert f"charts/tether/Chart.yaml: appVersion 9.9.9, not {VERSION} (runtime/pyproject.toml)" in proc.stderr
    assert not list((tmp_path / "out").glob("*"))  # nothing packaged


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    proc = package(tmp_path_factory.mktemp("chart"))
    assert proc.returncode == 0, proc.stderr
    tgz = Path(proc.stdout.strip().splitlines()[-1])
    assert tgz.name == f"tether-{VERSION}.tgz"
    return tgz


def test_the_package_holds_the_chart_its_crds_and_its_test(packaged: Path) -> None:
    with tarfile.open(packaged) as archive:
        names = set(archive.getnames())
        chart = yaml.safe_load(archive.extractfile("tether/Chart.yaml").read())  # type: ignore[union-attr]
    assert chart["version"] == chart["appVersion"] == VERSION
    assert {"tether/values.schema.json", "tether/templates/tests/weather.yaml", "tether/files/crds/tether.dev_agentruns.yaml"} <= names


@pytest.fixture(scope="module")
def registry() -> Iterator[str]:
    """A real OCI registry on loopback (go-containerregistry's, scripts/oci-registry.sh): host:port."""
    where = (
        os.environ.get("TETHER_OCI_REGISTRY_BIN")
        or subprocess.run(["bash", str(REPO / "scripts" / "oci-registry.sh")], capture_output=True, text=True, check=True, timeout=900)
        .stdout.strip()
        .splitlines()[-1]
    )
    proc = subprocess.Popen([str(Path(where) / "oci-registry")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("READY "), line
    yield line.split()[1]
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def pushed(kube: ControlPlane, packaged: Path, registry: str) -> str:
    """`helm push` of the package, as docs/images.md says: the chart's oci:// reference."""
    out = kube.helm("push", str(packaged), f"oci://{registry}/charts", "--plain-http")
    assert f"Pushed: {registry}/charts/tether:{VERSION}" in out.stdout + out.stderr
    return f"oci://{registry}/charts/tether"


def test_the_pushed_chart_is_the_package(kube: ControlPlane, packaged: Path, pushed: str, tmp_path: Path) -> None:
    kube.helm("pull", pushed, "--version", VERSION, "--plain-http", "--destination", str(tmp_path))
    assert (tmp_path / packaged.name).read_bytes() == packaged.read_bytes()


@pytest.fixture(scope="module")
def installed(kube: ControlPlane, tether_release: Release, pushed: str) -> Iterator[dict[str, dict[str, Any]]]:
    """The chart installed from the registry (CRDs come with the session's release); its test hooks by kind."""
    install_release(kube, PKG, "--version", VERSION, "--plain-http", "--set", "store.s3.bucket=runs", chart=pushed)
    hooks = [d for d in yaml.safe_load_all(kube.helm("get", "hooks", RELEASE, "-n", RELEASE_NS).stdout) if d]
    yield {d["kind"]: d for d in hooks}
    uninstall_release(kube, PKG)


def test_the_installed_release_is_the_packaged_version(kube: ControlPlane, installed: dict[str, dict[str, Any]]) -> None:
    (release,) = json.loads(kube.helm("list", "-n", RELEASE_NS, "-o", "json").stdout)
    assert release["chart"] == f"tether-{VERSION}" and release["app_version"] == VERSION and release["status"] == "deployed"


def test_the_test_hooks_and_the_rights_they_carry(kube: ControlPlane, installed: dict[str, dict[str, Any]]) -> None:
    assert set(installed) == {"ServiceAccount", "Role", "RoleBinding", "Secret", "AgentTool", "Service", "Pod"}
    for kind, doc in installed.items():
        annotations = doc["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "test", kind
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded", kind
        assert doc["metadata"]["namespace"] == RUNS_NS, kind
        # created before the pod, which helm waits for
        assert int(annotations.get("helm.sh/hook-weight", "0")) == (0 if kind == "Pod" else -1), kind
        # not the operator's selector labels (its metrics Service selects by those)
        assert doc["metadata"]["labels"]["app.kubernetes.io/component"] == "test", kind
    pod = installed["Pod"]["spec"]
    assert pod["serviceAccountName"] == TEST and pod["securityContext"]["runAsNonRoot"] is True
    (sidecar,) = pod["initContainers"]
    assert sidecar["restartPolicy"] == "Always" and "startupProbe" in sidecar  # up before the test starts, stopped after
    assert (
        installed["Service"]["spec"]["selector"]
        == {"tether.dev/helm-test": TEST}
        == {k: v for k, v in installed["Pod"]["metadata"]["labels"].items() if k == "tether.dev/helm-test"}
    )
    assert installed["AgentTool"]["spec"]["implementation"] == "tether.testing.weather:get_weather"
    assert installed["Secret"]["metadata"]["labels"]["tether.dev/usable"] == "true"
    # The pod is one the apiserver takes in a namespace enforcing the `restricted` Pod Security Standard.
    kube.kubectl("label", "namespace", RUNS_NS, "pod-security.kubernetes.io/enforce=restricted", "--overwrite")
    try:
        apply_hooks(kube, installed)
        dry = kube.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(installed["Pod"]), check=False)
        assert dry.returncode == 0, dry.stderr
        assert "Warning" not in dry.stderr, dry.stderr
    finally:
        kube.kubectl("label", "namespace", RUNS_NS, "pod-security.kubernetes.io/enforce-")
    # Its ServiceAccount's rights, asked of the apiserver once the hooks exist (as helm creates them).
    who = f"--as=system:serviceaccount:{RUNS_NS}:{TEST}"

    def can(*args: str, ns: str = RUNS_NS) -> bool:
        return kube.kubectl("auth", "can-i", *args, "-n", ns, who, check=False).stdout.strip() == "yes"

    assert can("create", "agentruns.tether.dev") and can("get", "agentruns.tether.dev") and can("delete", "agentruns.tether.dev")
    assert can("use", f"secrets/{TEST}-key")
    assert not can("get", f"secrets/{TEST}-key")  # use, never read
    assert not can("list", "secrets") and not can("use", "secrets/llm") and not can("create", "agenttools.tether.dev")
    assert not can("patch", "agentruns.tether.dev") and not can("create", "pods")
    assert not can("create", "agentruns.tether.dev", ns="op-b")  # only the served namespace it tests


def apply_hooks(kube: ControlPlane, hooks: dict[str, dict[str, Any]]) -> None:
    """Every hook but the pod, as `helm test` creates them (no kubelet here runs the pod)."""
    items = [d for k, d in hooks.items() if k != "Pod"]
    kube.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def helm_test_command(kube: ControlPlane, hooks: dict[str, dict[str, Any]], tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    """The test pod's own command, with its ServiceAccount's token, from outside a pod."""
    (container,) = hooks["Pod"]["spec"]["containers"]
    argv = container["command"]
    assert argv[:4] == ["python", "-m", "tether.testing.helm_test", "run"], argv
    token = tmp_path / "token"
    token.write_text(kube.kubectl("create", "token", TEST, "-n", RUNS_NS, "--duration=1h").stdout.strip())
    host, port = kube.server.removeprefix("https://").rsplit(":", 1)
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
    return subprocess.Popen(
        [sys.executable, *argv[1:], f"--token-file={token}", f"--ca-file={kube.ca_file}", "--interval=0.2", *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def play_operator(kube: ControlPlane, name: str, status: dict[str, Any]) -> dict[str, Any]:
    """What the operator and the runner pod would do: the run's status, once it exists."""
    run = wait_for(lambda: json.loads(kube.kubectl("get", "agentrun", name, "-n", RUNS_NS, "-o", "json", check=False).stdout or "null"),
                   timeout=30, what=f"AgentRun {name}")  # fmt: skip
    kube.kubectl("patch", "agentrun", name, "-n", RUNS_NS, "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}))
    return run


ACCEPTED_FALSE = {
    "type": "Accepted",
    "status": "False",
    "reason": "ToolNotAllowed",
    "message": "module x",
    "lastTransitionTime": "2026-01-01T00:00:00Z",
}


def delete_run(kube: ControlPlane) -> None:
    kube.kubectl("delete", "agentrun", f"{TEST}-weather", "-n", RUNS_NS, "--ignore-not-found", "--wait=true")


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def test_helm_tests_command_passes_when_the_weather_run_succeeds_with_the_tools_answer(
    kube: ControlPlane, installed: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    apply_hooks(kube, installed)
    delete_run(kube)  # an earlier test's (its command would replace it, but the test must not patch that one)
    proc = helm_test_command(kube, installed, tmp_path)
    run = play_operator(kube, f"{TEST}-weather", {"phase": "Succeeded", "result": {"output": f"Here is the weather in Paris: {EXPECTED}"}})
    code, out, err = finish(proc)
    assert code == 0, out + err
    assert f"Succeeded: Here is the weather in Paris: {EXPECTED}" in out
    # The run it made: the test's tool, key Secret and fake provider (admitted by the Secret access
    # policy: its creator, the test's ServiceAccount, may `use` that Secret).
    spec = run["spec"]
    assert spec["tools"] == [f"{TEST}-weather"] and spec["framework"] == "openai"
    assert spec["model"]["baseURL"] == f"http://{TEST}-provider.{RUNS_NS}.svc:8080/openai/v1"
    assert spec["model"]["apiKeySecretRef"] == {"name": f"{TEST}-key", "key": "api-key"}
    gone = kube.kubectl("get", "agentrun", f"{TEST}-weather", "-n", RUNS_NS, "--ignore-not-found", "-o", "name").stdout
    assert gone.strip() == ""  # a passed test leaves no run behind


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (
            {"phase": "Succeeded", "result": {"output": "Here is the weather in Paris: (none)"}},
            "the AgentRun succeeded without the tool's answer",
        ),
        ({"phase": "Failed", "conditions": [ACCEPTED_FALSE]}, "the AgentRun failed: Accepted=False ToolNotAllowed: module x"),
    ],
)
def test_helm_tests_command_fails_naming_why(
    kube: ControlPlane, installed: dict[str, dict[str, Any]], tmp_path: Path, status: dict[str, Any], message: str
) -> None:
    apply_hooks(kube, installed)
    delete_run(kube)  # an earlier test's (its command would replace it, but the test must not patch that one)
    proc = helm_test_command(kube, installed, tmp_path)
    play_operator(kube, f"{TEST}-weather", status)
    code, out, err = finish(proc)
    assert code == 1 and f"helm test failed: {message}" in err, out + err
    # kept for a look; the next test replaces it
    assert kube.kubectl("get", "agentrun", f"{TEST}-weather", "-n", RUNS_NS, "-o", "name").stdout.strip()


def test_a_run_naming_another_secret_is_refused_to_the_tests_service_account(
    kube: ControlPlane, installed: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """The Role's `use` names one Secret: the test's identity cannot be used to hand the agent another."""
    apply_hooks(kube, installed)
    kube.kubectl("create", "secret", "generic", "llm", "-n", RUNS_NS, "--from-literal=api-key=real", check=False)
    kube.kubectl("label", "secret", "llm", "-n", RUNS_NS, "tether.dev/usable=true", "--overwrite")
    proc = helm_test_command(kube, installed, tmp_path, "--key-secret=llm", "--name=steal-llm")
    code, out, err = finish(proc)
    assert code == 1, out + err
    assert "creating the AgentRun pkg-runs/steal-llm was refused (403)" in err
    assert "secret-access' denied request" in err and "may not get every Secret this object names (llm)" in err
    assert kube.kubectl("get", "agentrun", "steal-llm", "-n", RUNS_NS, "--ignore-not-found", "-o", "name").stdout.strip() == ""


def render(*sets: str) -> list[dict[str, Any]]:
    argv = [str(ensure_k8s_tools() / "helm"), "template", "t", str(CHART), "-n", "tether-system"]
    for s in ("store.s3.bucket=runs", "watchNamespaces={team-a}", *sets):
        argv += ["--set", s]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def operator_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    return {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_the_allow_lists_gain_the_tests_tool_and_provider_only_when_set_and_tests_on() -> None:
    env = operator_env(render("tools.allowedModules={shop}", "providers.allowedBaseURLs={https://llm.internal/v1}"))
    assert env["TETHER_TOOL_MODULES"] == "shop,tether.testing.weather"
    assert json.loads(env["TETHER_ALLOWED_BASE_URLS"]) == ["https://llm.internal/v1", "http://t-tether-test-provider.team-a.svc:8080"]
    env = operator_env(render())  # empty lists allow both already: they stay empty
    assert "TETHER_TOOL_MODULES" not in env and json.loads(env["TETHER_ALLOWED_BASE_URLS"]) == []
    docs = render("tests.enabled=false", "tools.allowedModules={shop}", "providers.allowedBaseURLs={https://llm.internal/v1}")
    assert not [d for d in docs if "helm.sh/hook" in (d["metadata"].get("annotations") or {})]
    env = operator_env(docs)
    assert env["TETHER_TOOL_MODULES"] == "shop" and json.loads(env["TETHER_ALLOWED_BASE_URLS"]) == ["https://llm.internal/v1"]


def test_the_test_runs_in_the_namespace_and_image_asked_for() -> None:
    docs = render("tests.namespace=team-b", "tests.framework=langgraph", "executor.runtimeImage.repository=r.example/rt-langgraph",
                  "executor.runtimeImage.tag=v7", "tests.image.pullPolicy=Never")  # fmt: skip
    (pod,) = [d for d in docs if d["kind"] == "Pod"]
    assert pod["metadata"]["namespace"] == "team-b"
    assert {c["image"] for c in (*pod["spec"]["containers"], *pod["spec"]["initContainers"])} == {"r.example/rt-langgraph:v7"}
    assert {c["imagePullPolicy"] for c in (*pod["spec"]["containers"], *pod["spec"]["initContainers"])} == {"Never"}
    assert "--framework=langgraph" in pod["spec"]["containers"][0]["command"]
    assert "--base-url=http://t-tether-test-provider.team-b.svc:8080" in pod["spec"]["containers"][0]["command"]


def test_with_network_policies_runner_pods_reach_the_tests_provider_in_its_namespace_only() -> None:
    peers = {"cidr": "10.0.0.0/8", "ports": [443]}
    docs = render(
        "watchNamespaces={team-a,team-b}",
        "networkPolicy.enabled=true",
        f"networkPolicy.store[0].cidr={peers['cidr']}",
        "networkPolicy.store[0].ports[0]=443",
        f"networkPolicy.providers[0].cidr={peers['cidr']}",
        "networkPolicy.providers[0].ports[0]=443",
    )
    runners = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-runners")}
    to_test = {
        "to": [{"podSelector": {"matchLabels": {"tether.dev/helm-test": "t-tether-test"}}}],
        "ports": [{"protocol": "TCP", "port": 8080}],
    }
    assert to_test in runners["team-a"]["spec"]["egress"]
    assert to_test not in runners["team-b"]["spec"]["egress"]
