"""The Flyte e2e on the kind cluster `tether-flyte` (tests/e2e/run.sh flyte-test sets
TETHER_E2E_FLYTE=1 and its kubeconfig; elsewhere these files are not collected at all).

Everything runs in the cluster, installed by `run.sh flyte-install`: the open-source Flyte 2
backend with its PostgreSQL, the S3 server, the fake provider, the operator (the chart in Flyte
mode) and the runs' task pods.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pytest

if os.environ.get("TETHER_E2E_FLYTE") != "1":
    collect_ignore_glob = ["test_*.py"]

NS = "tether-e2e"
RELEASE = "tether"
RUNTIME_IMAGE = "tether-flyte/examples-openai:e2e"  # this checkout's runtime (flyte.sh flyte_build)
FLYTE_ENDPOINT = "flyte-binary-http.flyte.svc.cluster.local:8090"  # backend.yaml
FAKE = "http://fake-provider.tether-e2e-infra.svc.cluster.local:8080"


@dataclass
class Fake:
    """The fake provider in the cluster (its control API reached from inside its pod)."""

    url: str = FAKE

    def call(self, path: str, method: str = "GET") -> Any:
        from tests.e2e.cluster import fake_provider

        return fake_provider(path, method)

    def ledger(self) -> list[dict[str, Any]]:
        out = self.call("/_control/ledger")
        return list(out["calls"] if isinstance(out, dict) and "calls" in out else out)


class FlyteAPI:
    """The backend's API through the flyte SDK, from the operator's pod (in-cluster endpoint)."""

    def phase(self, run_name: str) -> str:
        code = f"import asyncio, flyte.remote; print(asyncio.run(flyte.remote.Run.get.aio({run_name!r})).phase.value)"
        return self._python(code).strip().splitlines()[-1]

    def ensure_secret(self, name: str, value: str) -> None:
        """A Flyte secret of the runs' namespace's project (the operator's `tether-{namespace}`).
        The backend's embedded secret manager names a secret by its name alone, scoped by
        org/project/domain; the operator asks for `<Secret>__<key>` (operator/README.md)."""
        code = (
            f"try:\n    flyte.remote.Secret.create(name={name!r}, value={value!r})\n"
            "except Exception as e:\n    assert 'exists' in str(e).lower(), e"
        )
        self._python(code)

    def _python(self, code: str) -> str:
        from tests.e2e.cluster import kubectl

        init = f"import flyte, flyte.remote\nflyte.init(endpoint='dns:///{FLYTE_ENDPOINT}', insecure=True, project='tether-{NS}', domain='development')\n"
        return kubectl("exec", "-n", NS, f"deploy/{RELEASE}", "--", "python", "-c", init + code)


@pytest.fixture(scope="session")
def fake() -> Fake:
    return Fake()


@pytest.fixture(scope="session")
def flyte_api() -> FlyteAPI:
    """The operator ready; the examples' provider key (any value: the fake provider wants one
    sent) as the Flyte secret the backend's pod webhook injects into the task pods."""
    from tests.e2e.cluster import kubectl

    if not kubectl("get", "deploy", "flyte-binary", "-n", "flyte", "--ignore-not-found", "-o", "name").strip():
        pytest.fail("no Flyte backend in the cluster: run tests/e2e/run.sh flyte-install first")
    kubectl("rollout", "status", f"deploy/{RELEASE}", "-n", NS, "--timeout=120s", timeout=150)
    api = FlyteAPI()
    # The examples' Secret `openai`, key `api-key`, and the runs' store credentials
    # (store.runnerCredentialsSecret `tether-store`), as the namespace's Flyte secrets.
    api.ensure_secret("openai__api-key", "fake-key-no-real-model")
    api.ensure_secret("tether-store__AWS_ACCESS_KEY_ID", "e2e")
    api.ensure_secret("tether-store__AWS_SECRET_ACCESS_KEY", "e2e")
    return api
