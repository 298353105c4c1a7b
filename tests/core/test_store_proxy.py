"""Store access scoped to one run (tether.stores.proxy): the agent's process has no store
credentials and reaches the store only through ``tether store-proxy``, which holds them and lets
the run touch its own keys only. Real processes, a real S3 server (moto on loopback).

The agent's attempt runs through the proxy to the end (journal, progress and memory land in S3)
with no ``AWS_*`` in its environment; through the same socket another run's journal, progress
and approvals cannot be read, listed or written, a decision cannot be written even for the run's
own approvals, and a key that climbs out of the run's prefix is refused — each a clear,
terminal "access denied". On today's main the runner pod's only container holds the
namespace's credentials, which read and write every run's keys.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.s3 import new_bucket, s3_server
from tests.support.tool_runner_pod import SCRIPT, Pod, finish, stop
from tether.contract import EXIT_SUCCEEDED
from tether.errors import StoreAccessDenied
from tether.stores import open_store
from tether.stores.proxy import ProxyStore, RunKeys
from tether.testing import FakeProvider


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    with s3_server() as endpoint:
        yield endpoint


def start_proxy(pod: Pod, store_url: str, socket_path: str) -> subprocess.Popen[str]:
    env = pod.env(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1")
    argv = [sys.executable, "-m", "tether", "store-proxy", "--request", str(pod.request), "--store", store_url, "--socket", socket_path]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not os.path.exists(socket_path):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.time() < deadline
        time.sleep(0.05)
    return proc


def test_a_run_reaches_only_its_own_keys_through_the_proxy(tmp_path: Path, s3: str) -> None:
    store_url = f"s3://{new_bucket(s3)}/tether/ns?endpoint_url={s3}"
    real = open_store(store_url)  # what the namespace's credentials reach: every run's keys
    real.put("journal/other-run/tail.bin", b"another run's conversation")
    real.put("runs/other-run/progress.json", b"{}")
    real.put("approvals/other-run/a1.request.json", b"{}")
    socket_path = str(tmp_path / "store.sock")
    with FakeProvider(SCRIPT, seed=5) as fake:
        pod = Pod(tmp_path, fake.url, "oslo: weather?")
        request = json.loads(pod.request.read_text())
        request["spec"]["memoryKey"] = "customer-1"
        pod.request.write_text(json.dumps(request))
        proxy, runner = start_proxy(pod, store_url, socket_path), pod.runner()
        try:
            env = pod.env(TETHER_SECRETS_DIR=str(pod.agent_secrets), TETHER_TOOL_RUNNERS=json.dumps({"forecast": pod.socket}))
            assert not [k for k in env if k.startswith("AWS_")]
            proc = subprocess.Popen([sys.executable, "-m", "tether", "exec", str(pod.request), "--store", f"tether+unix://{socket_path}"],
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)  # fmt: skip
            code, outcome, err = finish(proc)
            assert code == EXIT_SUCCEEDED, err
            assert "Oslo: sunny" in outcome["output"]

            # What it wrote is in the real store, under its own keys.
            keys = real.list("")
            assert any(k.startswith("journal/run-1/") for k in keys) and "runs/run-1/progress.json" in keys
            assert any(k.startswith("memory/ns/customer-1/") for k in keys)

            # Through the same socket, nothing of another run, and no decisions.
            agent_store = ProxyStore(socket_path)
            assert agent_store.get("runs/run-1/progress.json") is not None
            attempts = [
                lambda: agent_store.get("journal/other-run/tail.bin"),
                lambda: agent_store.get_many(["journal/run-1/tail.bin", "runs/other-run/progress.json"]),
                lambda: agent_store.list("journal/"),
                lambda: agent_store.list(""),
                lambda: agent_store.put("approvals/other-run/a1.decision.json", b'{"approved": true}'),
                lambda: agent_store.create("approvals/run-1/x.decision.json", b'{"approved": true, "by": "cfo"}'),
                lambda: agent_store.get("journal/run-1/../other-run/tail.bin"),
                lambda: agent_store.delete("runs/other-run/progress.json"),
                lambda: agent_store.write_if("journal/other-run/tail", b"taken over", None),
                lambda: agent_store.write_if("approvals/run-1/x.decision.json", b'{"approved": true}', None),
            ]
            for attempt in attempts:
                with pytest.raises(StoreAccessDenied, match="access denied"):
                    attempt()
        finally:
            stop(runner)
            stop(proxy)
    assert real.get("approvals/other-run/a1.decision.json") is None and real.get("approvals/run-1/x.decision.json") is None
    assert real.get("runs/other-run/progress.json") == b"{}"


def test_the_agent_may_start_before_the_proxy_listens(tmp_path: Path, s3: str) -> None:
    """In a runner pod the agent's container starts beside the store proxy, not once it listens:
    a store operation made before the proxy listens waits for its socket (ProxyStore), and a run
    started first goes through."""
    store_url = f"s3://{new_bucket(s3)}/tether/ns?endpoint_url={s3}"
    socket_path = str(tmp_path / "store.sock")
    with FakeProvider(SCRIPT, seed=5) as fake:
        pod = Pod(tmp_path, fake.url, "oslo: weather?")
        runner = pod.runner()
        proxy = None
        try:
            env = pod.env(TETHER_SECRETS_DIR=str(pod.agent_secrets), TETHER_TOOL_RUNNERS=json.dumps({"forecast": pod.socket}))
            proc = subprocess.Popen([sys.executable, "-m", "tether", "exec", str(pod.request), "--store", f"tether+unix://{socket_path}"],
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)  # fmt: skip
            early: list[object] = []
            waiting = threading.Thread(target=lambda: early.append(ProxyStore(socket_path).get("runs/run-1/early")))
            waiting.start()
            time.sleep(1)
            assert waiting.is_alive() and proc.poll() is None, "an operation before the proxy listens waits for it"
            proxy = start_proxy(pod, store_url, socket_path)
            waiting.join(30)
            assert early == [None], "answered once the proxy listens"
            code, outcome, err = finish(proc)
            assert code == EXIT_SUCCEEDED, err
            assert "Oslo: sunny" in outcome["output"]
            assert open_store(store_url).get("runs/run-1/progress.json") is not None
        finally:
            stop(runner)
            if proxy is not None:
                stop(proxy)


def test_run_keys() -> None:
    keys = RunKeys("r1", "team-a")
    allowed = [
        "journal/r1/tail.bin",
        "runs/r1/progress.json",
        "approvals/r1/a.request.json",
        "memory/team-a/k/HEAD",
        "cache/tools/lookup/c/x.rec",
    ]
    assert [keys.refusal("put", k) for k in allowed] == [None] * 5
    assert keys.refusal("get", "approvals/r1/a.decision.json") is None  # reading a decision is how a run resumes
    for op, key in [("put", "approvals/r1/a.decision.json"), ("get", "journal/r10/tail.bin"), ("get", "memory/team-b/k/HEAD"),
                    ("list", "cache/"), ("list", "journal/"), ("get", "journal/r1//x"), ("get", "/journal/r1/x")]:  # fmt: skip
        assert keys.refusal(op, key), (op, key)
