"""The Flyte e2e on the kind cluster `tether-flyte` (tests/e2e/run.sh flyte-test sets
TETHER_E2E_FLYTE=1 and its kubeconfig; elsewhere these files are not collected at all).

The task pods always run in the cluster, on its kubelet, from the runtime image
tether-e2e/examples-openai:e2e. Around them, one of two set-ups:

- in the cluster (`run.sh flyte-install` was run: the Deployment flyte/flyte-binary exists): the
  open-source Flyte 2 backend with its PostgreSQL, the S3 server, the fake provider and the
  operator installed by the chart in Flyte mode, all in pods;
- on this machine otherwise (the node's disk too small for the operator and S3 images), listening
  on the kind network's gateway, which the pods reach: the backend (tests/support/flyte_backend.py,
  the same binary, PostgreSQL and moto S3 as tests/flyte), the fake provider, and the operator
  with the Flyte executor, run with the token of the chart's ServiceAccount (the chart installed
  in Flyte mode, its Deployment scaled to zero).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

if os.environ.get("TETHER_E2E_FLYTE") != "1":
    collect_ignore_glob = ["test_*.py"]

REPO = Path(__file__).resolve().parents[3]
NS = "tether-e2e"
RELEASE = "tether"
RUNTIME_IMAGE = "tether-e2e/examples-openai:e2e"
FLYTE_ENDPOINT = "flyte-binary-http.flyte.svc.cluster.local:8090"  # in the cluster (backend.yaml)


class KindCluster:
    """What tests/support/flyte_backend.py needs of a cluster: kubectl and a kubeconfig."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        proc = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True, env=env, timeout=180)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def gateway(self) -> str:
        """The kind network's IPv4 gateway: this machine, as the pods reach it."""
        out = subprocess.run(["docker", "network", "inspect", "kind"], capture_output=True, text=True, check=True).stdout
        return next(c["Gateway"] for c in json.loads(out)[0]["IPAM"]["Config"] if "." in c.get("Gateway", ""))


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class Fake:
    url: str
    in_cluster: bool = False

    def call(self, path: str, method: str = "GET") -> Any:
        import urllib.request

        if self.in_cluster:
            from tests.e2e.cluster import fake_provider

            return fake_provider(path, method)

        req = urllib.request.Request(self.url + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read().decode()
        return json.loads(body) if body else None

    def ledger(self) -> list[dict[str, Any]]:
        out = self.call("/_control/ledger")
        return list(out["calls"] if isinstance(out, dict) and "calls" in out else out)


@pytest.fixture(scope="session")
def cluster() -> KindCluster:
    return KindCluster(Path(os.environ["KUBECONFIG"]))


@pytest.fixture(scope="session")
def in_cluster(cluster: KindCluster) -> bool:
    """Whether run.sh flyte-install put the backend and the operator in the cluster."""
    return bool(cluster.kubectl("get", "deploy", "flyte-binary", "-n", "flyte", "--ignore-not-found", "-o", "name").stdout.strip())


@dataclass
class FlyteAPI:
    """The backend's API as the flyte SDK reaches it: from here, or from the operator's pod."""

    endpoint: str
    in_cluster: bool

    def phase(self, run_name: str) -> str:
        code = (
            "import asyncio, flyte, flyte.remote; "
            f"flyte.init(endpoint='dns:///{self.endpoint}', insecure=True, project='tether', domain='development'); "
            f"print(asyncio.run(flyte.remote.Run.get.aio({run_name!r})).phase.value)"
        )
        return self._python(code).strip().splitlines()[-1]

    def ensure_secret(self, name: str, value: str) -> None:
        """A Flyte secret of the project. The backend's embedded secret manager names a secret by
        its key alone (scoped by org/project/domain; the group is not part of the name)."""
        code = (
            "import flyte, flyte.remote; "
            f"flyte.init(endpoint='dns:///{self.endpoint}', insecure=True, project='tether', domain='development')\n"
            f"try:\n    flyte.remote.Secret.create(name={name!r}, value={value!r})\n"
            "except Exception as e:\n    assert 'exists' in str(e).lower(), e"
        )
        self._python(code)

    def _python(self, code: str) -> str:
        if self.in_cluster:
            from tests.e2e.cluster import kubectl

            return kubectl("exec", "-n", NS, f"deploy/{RELEASE}", "--", "python", "-c", code)
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout


@pytest.fixture(scope="session")
def fake(cluster: KindCluster, in_cluster: bool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fake]:
    """The fake provider serving the examples' scripts (tests/e2e/fake_script.py)."""
    if in_cluster:
        from tests.e2e.cluster import FAKE

        yield Fake(FAKE, in_cluster=True)
        return
    work = tmp_path_factory.mktemp("fake")
    script = work / "script.yaml"
    script.write_text(subprocess.run([sys.executable, str(REPO / "tests/e2e/fake_script.py"), str(REPO / "examples")],
                                     capture_output=True, text=True, check=True).stdout)  # fmt: skip
    host = cluster.gateway()
    port = _free_port(host)
    with open(work / "fake.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tether.testing.fake_provider", "--script", str(script), "--host", host, "--port", str(port), "--latency", "0.2"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the fake provider did not start:\n{(work / 'fake.log').read_text()[-2000:]}") from None
            time.sleep(0.1)
    try:
        yield Fake(f"http://{host}:{port}")
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def backend(cluster: KindCluster, in_cluster: bool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.support.flyte_backend import flyte_backend

    if in_cluster:
        yield None
        return

    # AWS_*: the Tether store's credentials in every task pod (the moto server takes any).
    store_creds = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
    with flyte_backend(cluster, tmp_path_factory.mktemp("flyte-backend"), host=cluster.gateway(), pod_env=store_creds) as b:  # type: ignore[arg-type]
        yield b


def _operator_kubeconfig(cluster: KindCluster, token: str, path: Path) -> Path:
    cfg = yaml.safe_load(cluster.kubeconfig.read_text())
    cfg["users"] = [{"name": "operator", "user": {"token": token}}]
    for ctx in cfg["contexts"]:
        ctx["context"]["user"] = "operator"
    path.write_text(json.dumps(cfg))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="session")
def flyte_api(backend: Any, in_cluster: bool) -> FlyteAPI:
    return FlyteAPI(FLYTE_ENDPOINT if in_cluster else backend.endpoint, in_cluster)


@pytest.fixture(scope="session")
def operator(cluster: KindCluster, in_cluster: bool, backend: Any, fake: Fake, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The chart in Flyte mode (CRDs, RBAC, ServiceAccount). In the cluster: its operator pod,
    installed by run.sh flyte-install. Else the operator runs here with that ServiceAccount's
    token, the Flyte executor pointed at the backend."""
    from tests.controller.conftest import Operator
    from tests.support.s3 import new_bucket

    if in_cluster:
        cluster.kubectl("rollout", "status", f"deploy/{RELEASE}", "-n", NS, "--timeout=120s")
        # The examples' provider key (any value: the fake provider wants one sent), as the Flyte
        # secret the backend's pod webhook injects into the task pods.
        FlyteAPI(FLYTE_ENDPOINT, True).ensure_secret("api-key", "fake-key-no-real-model")
        yield None
        return

    store = f"s3://{new_bucket(backend.s3)}/tether?endpoint_url={backend.s3}"
    helm = ["helm", "upgrade", "--install", RELEASE, str(REPO / "charts/tether"), "-n", NS, "--create-namespace",
            "--set", f"watchNamespaces={{{NS}}}", "--set", "store.url=" + store.replace(",", "\\,"),
            "--set", "executor.kind=flyte", "--set", f"executor.flyte.endpoint={backend.endpoint}",
            "--set", "executor.flyte.insecure=true", "--wait=false"]  # fmt: skip
    subprocess.run(helm, check=True, capture_output=True, env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)})
    cluster.kubectl("scale", "deploy", RELEASE, "-n", NS, "--replicas=0")
    token = cluster.kubectl("create", "token", RELEASE, "-n", NS, "--duration=2h").stdout.strip()
    work = tmp_path_factory.mktemp("operator")
    op = Operator(
        _operator_kubeconfig(cluster, token, work / "kubeconfig"), work, (NS,),
        TETHER_EXECUTOR="flyte", TETHER_FLYTE_ENDPOINT=backend.endpoint, TETHER_FLYTE_INSECURE="1",
        TETHER_RUNTIME_IMAGE=RUNTIME_IMAGE, TETHER_STORE_URL=store, TETHER_POLL_SECONDS="0.5",
        TETHER_ALLOWED_BASE_URLS=json.dumps([fake.url]), TETHER_TOOL_MODULES="example_tools",
        AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1",
    )  # fmt: skip
    op.start()
    yield op
    op.stop()
