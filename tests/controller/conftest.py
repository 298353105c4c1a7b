"""Fixtures for the operator tests on a real kube-apiserver (tests/support/kube.py).

`tether_release` installs the Helm chart (CRDs, ServiceAccount, RBAC, Deployment: no pods run, as
there is no kubelet) serving two namespaces; `operator` runs `python -m tether_operator` as a
process authenticated with a token of the chart's ServiceAccount, so every test exercises the
chart's real RBAC, not admin rights.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.kube import ControlPlane, free_port, kube  # noqa: F401  (the session fixture)
from tests.support.wait import wait_for as support_wait_for

REPO = Path(__file__).resolve().parents[2]
TOOLBOX = Path(__file__).resolve().parent / "toolbox"  # the `shop` package the AgentTools name
CHART = REPO / "charts" / "tether"
RELEASE_NS = "tether-system"
SA = "tether"
SERVED = ("op-a", "op-b")
UNSERVED = "op-other"
# The fake providers listen on loopback, which the operator refuses as a baseURL unless the
# chart's providers.allowedBaseURLs (env TETHER_ALLOWED_BASE_URLS) lists it, as a dev install would.
LOOPBACK_PROVIDER = "http://127.0.0.1"


@dataclass
class Release:
    namespace: str
    service_account: str
    served: tuple[str, ...]
    unserved: str

    @property
    def subject(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


@pytest.fixture(scope="session")
def tether_release(kube: ControlPlane) -> Release:
    for ns in (*SERVED, UNSERVED):
        kube.kubectl("create", "namespace", ns, check=False)
    kube.helm(
        "upgrade",
        "--install",
        "tether",
        str(CHART),
        "-n",
        RELEASE_NS,
        "--create-namespace",
        "--set",
        "watchNamespaces={" + ",".join(SERVED) + "}",
        "--set",
        "gpuNodePools.A100.nodeSelector.gpu=a100",
        "--set",
        "providers.allowedBaseURLs={" + LOOPBACK_PROVIDER + "}",
        # The development executor, opted into explicitly (the chart's default is kubernetes;
        # test_kubernetes_executor.py installs a second release with it).
        "--set",
        "executor.kind=local",
        "--wait=false",
    )
    kube.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/agentruns.tether.dev",
        "crd/agenttools.tether.dev",
        "crd/agentapprovals.tether.dev",
    )
    wait_for_secret_access_policy(kube, "tether-secret-access")
    return Release(RELEASE_NS, SA, SERVED, UNSERVED)


def install_release(kube: ControlPlane, release: Release, *values: str, chart: str = str(CHART)) -> None:
    """The chart (this checkout's, or ``chart``: a .tgz, an oci:// reference) installed as a
    release of its own beside the session's (named after its ServiceAccount, the CRDs left to the
    session release) serving ``release.served``, with ``values`` (more Helm arguments); its
    namespaces are made first. Returns once its runs may be created (``wait_for_secret_access_policy``)."""
    for ns in (*release.served, release.unserved):
        if ns:
            kube.kubectl("create", "namespace", ns, check=False)
    kube.helm("upgrade", "--install", release.service_account, chart, "-n", release.namespace, "--create-namespace",
              "--set", "watchNamespaces={" + ",".join(release.served) + "}", "--set", "crds.enabled=false", *values,
              "--wait=false")  # fmt: skip
    wait_for_secret_access_policy(kube, f"{release.service_account}-secret-access")


def uninstall_release(kube: ControlPlane, release: Release) -> None:
    kube.helm("uninstall", release.service_account, "-n", release.namespace, "--wait=false", check=False)


def release_operator(kube: ControlPlane, release: Release, work: Path, **env: str) -> Operator:
    """The operator of an ``install_release`` release, started: authenticated with a token of the
    release's ServiceAccount, and given the admission policies the chart names for the release."""
    token = kube.kubectl("create", "token", release.service_account, "-n", release.namespace, "--duration=2h").stdout.strip()
    chart_env = {
        "TETHER_SECRET_ACCESS_POLICY": f"{release.service_account}-secret-access",
        "TETHER_APPROVAL_POLICY_BINDING": f"{release.service_account}-approvals",
    }
    op = Operator(kubeconfig_with_token(kube, token, work / "kubeconfig"), work, release.served, **{**chart_env, **env})
    op.start()
    return op


def wait_for_secret_access_policy(kube: ControlPlane, binding: str) -> None:
    """A run naming a Secret created within 2 s of a release's Secret access policy may have been
    admitted without it: the operator refuses such a run (AdmissionPolicyMissing, terminal). Tests
    create their runs once the binding is 3 s old."""
    got = kube.kubectl("get", "validatingadmissionpolicybinding", binding, "-o", "json", check=False)
    if got.returncode != 0:  # a release without the policy (single-tenant): nothing to wait for
        return
    found = json.loads(got.stdout)
    since = datetime.fromisoformat(found["metadata"]["creationTimestamp"].replace("Z", "+00:00")).timestamp()
    wait_for(lambda: time.time() > since + 3, timeout=10, what=f"{binding} in place for 3 s")


def kubeconfig_with_token(kube: ControlPlane, token: str, path: Path) -> Path:
    cfg = json.loads(kube.kubeconfig.read_text())
    cfg["users"] = [{"name": "operator", "user": {"token": token}}]
    cfg["contexts"][0]["context"]["user"] = "operator"
    path.write_text(json.dumps(cfg))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="session")
def operator_kubeconfig(kube: ControlPlane, tether_release: Release, tmp_path_factory) -> Path:
    token = kube.kubectl("create", "token", SA, "-n", RELEASE_NS, "--duration=2h").stdout.strip()
    return kubeconfig_with_token(kube, token, tmp_path_factory.mktemp("op") / "kubeconfig")


class Operator:
    """`python -m tether_operator` as a child process; restartable, killable."""

    def __init__(self, kubeconfig: Path, workdir: Path, namespaces: tuple[str, ...], **env: str) -> None:
        self.workdir = workdir
        self.store_url = f"file://{workdir}/store"
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "TETHER_NAMESPACES": ",".join(namespaces),
            "TETHER_STORE_URL": self.store_url,
            "TETHER_WORKDIR": str(workdir / "executions"),
            "TETHER_RECHECK_SECONDS": "0.5",
            "TETHER_MAX_RECHECK_SECONDS": "2",
            "TETHER_STATUS_INTERVAL_SECONDS": "0.5",
            "TETHER_TOOL_INTERVAL_SECONDS": "1",
            "TETHER_GPU_NODE_POOLS": json.dumps({"A100": {"nodeSelector": {"gpu": "a100"}}}),
            "TETHER_ALLOWED_BASE_URLS": json.dumps([LOOPBACK_PROVIDER]),
            # The development executor: runs execute beside the test (no kubelet on the bare
            # apiserver); test_kubernetes_executor.py asks for the kubernetes one.
            "TETHER_EXECUTOR": "local",
            **env,
        }
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def log(self) -> Path:
        return self.workdir / f"operator-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        self.env["TETHER_HEALTH_PORT"] = str(free_port())
        self.env["TETHER_METRICS_PORT"] = self.metrics_port = str(free_port())
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tether_operator"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 30
        while "Initial authentication has finished" not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"operator did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as when a node dies: no cleanup handlers run."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            try:
                self.proc.wait(20)  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                self.kill()

    def logs(self) -> str:
        return "\n".join((self.workdir / f"operator-{i}.log").read_text(errors="replace") for i in range(1, self.starts + 1))


@pytest.fixture(scope="session")
def operator(operator_kubeconfig: Path, tmp_path_factory) -> Iterator[Operator]:
    # op-a only: the end-to-end tests run their own operator (with an agent environment) on op-b.
    op = Operator(
        operator_kubeconfig,
        tmp_path_factory.mktemp("operator"),
        (SERVED[0],),
        PYTHONPATH=str(TOOLBOX),
        TETHER_TOOL_MODULES="shop",  # chart value tools.allowedModules
        TETHER_EXECUTOR="local",
    )
    op.start()
    yield op
    op.stop()


def get(kube: ControlPlane, kind: str, ns: str, name: str) -> dict[str, Any]:
    return json.loads(kube.kubectl("get", kind, name, "-n", ns, "-o", "json").stdout)


def wait_for(predicate: Any, timeout: float = 30.0, interval: float = 0.2, what: str = "condition") -> Any:
    return support_wait_for(predicate, timeout=timeout, interval=interval, what=what)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return c
    return {}
