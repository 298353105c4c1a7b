"""A store outage mid-run on the real apiserver (issue 27 item 4(d)): the operator (local executor)
and the runtime it starts (`python -m tether exec`, the OpenAI Agents SDK research example against
the fake provider) reach a real S3 server (moto) through a TCP gate the test shuts for a while
once the run's first turn is journaled. The run waits and goes on in the same attempt (no turn
paid twice), the AgentRun says why while the store is away (ProgressReadable=False, reason
StoreUnreachable, a Warning Event), and it ends Succeeded with its result.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.support.kube import ControlPlane
from tests.support.s3 import Gate, new_bucket, s3_server, set_aws_env
from tether.journal import read_records
from tether.stores.s3 import S3Store
from tether.testing.fake_provider import FakeProvider

from .conftest import LOOPBACK_PROVIDER, Operator, Release, condition, get, install_release, release_operator, uninstall_release, wait_for
from .test_e2e_openai import EXAMPLES, _agent_python, live_bodies

pytestmark = pytest.mark.kube

NS = "so-a"
RELEASE = Release("tether-so-system", "tether-so", (NS,), "so-other")


class S3:
    def __init__(self, endpoint: str) -> None:
        self.bucket = new_bucket(endpoint)
        self.gate = Gate(int(endpoint.rsplit(":", 1)[1]))
        self.direct = S3Store(self.bucket, f"tether/{NS}", endpoint_url=endpoint)  # the namespace's runs, past the gate
        self.url = f"s3://{self.bucket}/tether?endpoint_url=http://127.0.0.1:{self.gate.port}"


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    set_aws_env()
    with s3_server() as endpoint:
        s = S3(endpoint)
        yield s
        s.gate.shut()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeProvider]:
    script = yaml.safe_load((EXAMPLES / "research.script.yaml").read_text())
    with FakeProvider(script, latency=0.2) as provider:
        yield provider


@pytest.fixture(scope="module")
def s3_operator(kube: ControlPlane, tether_release: Release, s3: S3, tmp_path_factory) -> Iterator[Operator]:
    install_release(kube, RELEASE, "--set", "executor.kind=local", "--set", "providers.allowedBaseURLs={" + LOOPBACK_PROVIDER + "}")
    kube.kubectl("create", "secret", "generic", "openai", "-n", NS, "--from-literal=api-key=fake-key-so-0123456789", check=False)
    kube.kubectl("label", "secret", "openai", "-n", NS, "tether.dev/usable=true", "--overwrite")
    op = release_operator(
        kube,
        RELEASE,
        tmp_path_factory.mktemp("so-operator"),
        TETHER_STORE_URL=s3.url,  # the operator's reads and the runtime's writes both pass the gate
        TETHER_EXEC_PYTHON=_agent_python(),
        PYTHONPATH=str(EXAMPLES),
        TETHER_TOOL_MODULES="example_tools",
        OPENAI_AGENTS_DISABLE_TRACING="1",
        TETHER_EXECUTOR="local",
    )
    yield op
    op.stop()
    uninstall_release(kube, RELEASE)


def apply_research(kube: ControlPlane, fake: FakeProvider, name: str) -> dict[str, Any]:
    docs = list(yaml.safe_load_all((EXAMPLES / "research.yaml").read_text()))
    run = next(d for d in docs if d["kind"] == "AgentRun")
    run["metadata"]["name"] = name
    run["spec"]["model"]["baseURL"] = fake.base_url("openai")
    run["spec"]["retries"] = 0  # an attempt lost to the outage would fail the run
    kube.kubectl("apply", "-n", NS, "-f", "-", input="\n---\n".join(json.dumps(d) for d in docs))
    return get(kube, "agentrun", NS, name)


def test_a_store_outage_mid_run_is_waited_out_and_said(kube: ControlPlane, fake: FakeProvider, s3: S3, s3_operator: Operator) -> None:
    start = len(fake.ledger)
    obj = apply_research(kube, fake, "research-store-outage")
    uid = obj["metadata"]["uid"]
    wait_for(lambda: any(r.kind == "model" for r in read_records(s3.direct, uid)), timeout=120, what="the first turn journaled")
    s3.gate.shut()
    shut_at = time.monotonic()
    down = wait_for(
        lambda: condition(o := get(kube, "agentrun", NS, obj["metadata"]["name"]), "ProgressReadable").get("status") == "False" and o,
        timeout=60,
        what="ProgressReadable=False while the store is away",
    )
    said = condition(down, "ProgressReadable")
    assert said["reason"] == "StoreUnreachable" and "the store does not answer" in said["message"], said
    assert down["status"]["phase"] == "Running"
    time.sleep(max(0.0, 10 - (time.monotonic() - shut_at)))  # a 10 s outage
    s3.gate.open()
    proc = kube.kubectl(
        "wait", "-n", NS, "--for=condition=Succeeded", "--timeout=180s", "agentrun/research-store-outage", check=False, timeout=190
    )
    obj = get(kube, "agentrun", NS, "research-store-outage")
    assert proc.returncode == 0, json.dumps(obj.get("status"), indent=1)
    st = obj["status"]
    assert st["attempts"] == 1, "the outage cost an attempt"
    assert condition(obj, "ProgressReadable")["status"] == "True"
    assert st["result"]["output"], st
    bodies = live_bodies(fake, start)
    assert len(bodies) == len(set(bodies)), "a turn was paid twice"
    assert st["steps"]["modelReplayed"] == 0 and st["steps"]["modelLive"] == len(bodies)
    events = kube.kubectl(
        "get", "events", "-n", NS, "--field-selector", f"involvedObject.name={obj['metadata']['name']}", "-o", "json"
    ).stdout
    assert "StoreUnreachable" in {e["reason"] for e in json.loads(events)["items"]}
