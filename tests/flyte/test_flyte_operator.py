"""The operator with the Flyte executor, installed by the chart in Flyte mode (namespaced RBAC: its
own resources and Events only), against the real Flyte backend: an applied AgentRun becomes a
queued Flyte run (status names it, with its URL; Event Submitted); deleting the AgentRun aborts
the Flyte run and releases the finalizer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.controller.conftest import CHART, Operator, condition, get, kubeconfig_with_token
from tests.support.flyte_backend import Backend
from tests.support.kube import ControlPlane
from tests.support.wait import wait_for
from tether_operator import execution_name

pytestmark = pytest.mark.kube

NS = "fly-runs"
IMAGE = "registry.example/tether-runtime:operator-test"


@pytest.fixture(scope="module")
def flyte_operator(kube: ControlPlane, backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    kube.kubectl("create", "namespace", NS, check=False)
    kube.helm("upgrade", "--install", "tether-fly", str(CHART), "-n", "tether-fly-system", "--create-namespace",
              "--set", f"watchNamespaces={{{NS}}}", "--set", "store.s3.bucket=runs", "--set", "executor.kind=flyte",
              "--set", f"executor.flyte.endpoint={backend.endpoint}", "--wait=false")  # fmt: skip
    token = kube.kubectl("create", "token", "tether-fly", "-n", "tether-fly-system", "--duration=2h").stdout.strip()
    work = tmp_path_factory.mktemp("flyte-operator")
    op = Operator(kubeconfig_with_token(kube, token, work / "kubeconfig"), work, (NS,),
                  TETHER_EXECUTOR="flyte", TETHER_FLYTE_ENDPOINT=backend.endpoint, TETHER_FLYTE_INSECURE="1",
                  TETHER_RUNTIME_IMAGE=IMAGE, TETHER_POLL_SECONDS="0.5")  # fmt: skip
    op.start()
    yield op
    op.stop()


def phase_of(run_name: str) -> str:
    import flyte.remote

    async def get_phase() -> str:
        return str((await flyte.remote.Run.get.aio(run_name)).phase.value)

    return asyncio.new_event_loop().run_until_complete(get_phase())


def test_an_agentrun_becomes_a_flyte_run_and_deleting_it_aborts_the_run(
    kube: ControlPlane, backend: Backend, flyte_operator: Operator
) -> None:
    import flyte

    flyte.init(endpoint=f"dns:///{backend.endpoint}", insecure=True, project=f"tether-{NS}", domain="development")
    body = {"framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hello", "resources": {"gpu": {"type": "A100", "count": 1}}}
    doc = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "metadata": {"name": "on-flyte"}, "spec": body}
    kube.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(doc))
    uid = get(kube, "agentrun", NS, "on-flyte")["metadata"]["uid"]
    name = execution_name(uid)

    def submitted() -> dict[str, Any] | None:
        status = get(kube, "agentrun", NS, "on-flyte").get("status") or {}
        return status if (status.get("execution") or {}).get("url") else None

    status = wait_for(submitted, timeout=120, what="status.execution with the Flyte run's URL")
    assert status["execution"]["executor"] == "flyte" and status["execution"]["name"] == name
    assert status["execution"]["url"].endswith(f"/project/tether-{NS}/runs/{name}")  # the namespace's own project
    assert condition(get(kube, "agentrun", NS, "on-flyte"), "Accepted")["status"] == "True"
    assert phase_of(name) in ("queued", "initializing", "waiting_for_resources")
    events = json.loads(kube.kubectl("get", "events", "-n", NS, "-o", "json").stdout)["items"]
    assert any(e["reason"] == "Submitted" and name in e["message"] for e in events)

    kube.kubectl("delete", "agentrun", "on-flyte", "-n", NS, "--timeout=60s")
    wait_for(lambda: phase_of(name) == "aborted", timeout=60, what=f"Flyte run {name} aborted")
