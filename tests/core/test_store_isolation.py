"""Store isolation between namespaces (issue 13, item 6), enforced by a real S3 server's IAM.

A moto server of its own checks every request's signature and IAM policy. Two IAM users get the
policy operator/README.md tells admins to attach (read from the README itself, for namespaces
``team-a`` and ``team-b``), as the ``tether-store`` Secret of each namespace would hold them.
With team-a's credentials (the ``AWS_*`` variables a runner pod gets):

    team-a's own prefix works: a run records, replays, commits memory and loads it back
    team-b's journal, memory and progress cannot be read through run_agent, memory load or
    ``tether status``: each fails with a clear store error naming access denied, nothing runs
    live and nothing is written as if the prefix were empty
    every object team-b wrote (run by team-b's own credentials in another process) answers
    AccessDenied to a GetObject with team-a's keys, byte for byte

and credentials that may read their prefix but not write journal records end the attempt as
terminal (a retry would call the model live again, to be denied again).

Listing: moto 5.2.5 does not evaluate IAM ``Condition`` blocks for S3 requests (its
``check_action_permitted`` passes no request context, and ``StringLike`` is not implemented:
unknown operators count as met), so the ``s3:prefix`` condition on ``s3:ListBucket`` is not
enforced here and team-a can list team-b's key names on moto. AWS enforces it. What this test
does prove for listing is that a listed name gets team-a nothing: every read of it is denied.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.core.chat_adapter import ADAPTER
from tests.support.s3 import enforce_iam, iam_user, s3_server, set_aws_env
from tether.agent import run_agent, tool
from tether.contract import EXIT_TERMINAL
from tether.entrypoint import classify_exception
from tether.errors import StoreAccessDenied
from tether.memory import Memory
from tether.stores import open_store
from tether.stores.s3 import _client as s3_clients
from tether.testing import FakeProvider

REPO = Path(__file__).resolve().parents[2]
BUCKET, PREFIX = "runs", "tether"  # the README example's bucket and store prefix

SCRIPT = {
    "conversations": [
        {
            "match": "refund:",
            "turns": [
                {"tool_calls": [{"name": "lookup", "arguments": {"order": "A1"}}]},
                {"text_from_tool_results": True, "text": "Done:"},
            ],
        }
    ]
}


#: Credentials that may read their prefix and claim attempts, but not write journal records.
READ_ONLY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{BUCKET}/{PREFIX}/read-only/*"},
        {"Effect": "Allow", "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{BUCKET}/{PREFIX}/read-only/journal/*/attempts/*"},
        {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{BUCKET}"},
    ],
}


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: 20 EUR"


def documented_policy(namespace: str) -> dict[str, Any]:
    """The IAM policy operator/README.md's "Store isolation" section documents (for bucket
    ``runs``, store prefix ``tether``, namespace ``team-a``), for ``namespace``."""
    readme = (REPO / "operator" / "README.md").read_text()
    section = readme.split("## Store isolation", 1)[1]
    [policy] = re.findall(r"```json\n(.*?)```", section, re.S)[:1]
    return json.loads(policy.replace("team-a", namespace))


@pytest.fixture(scope="module")
def iam_server() -> Iterator[tuple[str, dict[str, dict[str, str]]]]:
    """A moto server enforcing IAM, with the bucket and one IAM user per namespace."""
    set_aws_env()  # the admin's keys, before IAM is enforced
    with s3_server() as endpoint:
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
        creds = {ns: iam_user(endpoint, ns, documented_policy(ns)) for ns in ("team-a", "team-b")}
        creds["read-only"] = iam_user(endpoint, "read-only", READ_ONLY)
        enforce_iam(endpoint)
        yield endpoint, creds


def store_url(endpoint: str, namespace: str) -> str:
    """What the operator hands a runner pod in ``namespace``: ``<store>/<namespace>``."""
    return f"s3://{BUCKET}/{PREFIX}/{namespace}?endpoint_url={endpoint}"


def become(monkeypatch: pytest.MonkeyPatch, creds: dict[str, str]) -> None:
    """This process is now a runner pod with ``creds`` in its environment. A pod has one identity
    for life, so the process caches credentials (boto3's default session, the store's clients
    per endpoint): both are emptied, and filled from the environment on next use."""
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    s3_clients.cache_clear()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", creds["AWS_ACCESS_KEY_ID"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", creds["AWS_SECRET_ACCESS_KEY"])


def s3_as(endpoint: str, creds: dict[str, str]) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
    )


def as_runner(creds: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    """A process with only a runner pod's store credentials in its environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(creds, AWS_DEFAULT_REGION="us-east-1")
    return subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


async def _refund(store: str, fake_url: str, run_id: str, memory_key: str, namespace: str) -> Any:
    return await run_agent(
        ADAPTER,
        "refund: order A1 please",
        model="gpt-4o-mini",
        tools=[lookup],
        store=store,
        run_id=run_id,
        memory_key=memory_key,
        namespace=namespace,
        upstreams={"openai": fake_url + "/openai"},
        report=False,
    )


def record_a_run() -> None:
    """Entry point of the team-b process: one run with memory, on team-b's own prefix."""
    store, fake_url = sys.argv[1], sys.argv[2]
    result = asyncio.run(_refund(store, fake_url, "b-run", "b-customer", "team-b"))
    print(json.dumps({"status": result.status, "output": result.output}))


def test_a_namespace_reaches_only_its_own_prefix(iam_server, monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint, creds = iam_server
    a_url, b_url = store_url(endpoint, "team-a"), store_url(endpoint, "team-b")

    with FakeProvider(SCRIPT, seed=3) as fake:
        # team-b records a run and its memory with team-b's credentials, in a process of its own.
        proc = as_runner(creds["team-b"], "-c", "from tests.core.test_store_isolation import record_a_run; record_a_run()", b_url, fake.url)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.splitlines()[-1])["status"] == "succeeded"
        b_keys = [o["Key"] for o in s3_as(endpoint, creds["team-b"]).list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/team-b/")["Contents"]]
        assert any("/journal/b-run/" in k for k in b_keys) and any("/memory/team-b/b-customer/" in k for k in b_keys)

        # From here on, this process is a runner pod in team-a.
        become(monkeypatch, creds["team-a"])
        turns_before = len(fake.ledger)

        # Own prefix: a run records, then replays; memory commits and loads.
        first = asyncio.run(_refund(a_url, fake.url, "a-run", "a-customer", "team-a"))
        assert first.status == "succeeded" and "20 EUR" in first.output
        live = len(fake.ledger)
        assert live - turns_before == 2
        again = asyncio.run(_refund(a_url, fake.url, "a-run", "a-customer", "team-a"))
        assert again.output == first.output and len(fake.ledger) == live  # replayed, nothing live
        history = Memory(open_store(a_url), "team-a", "a-customer").load()
        assert [m["role"] for m in history][:1] == ["user"] and history[-1]["content"] == first.output

        # team-b's prefix through Tether's interfaces: a clear, terminal store error each time.
        for run_id in ("b-run", "new-run-in-b"):
            with pytest.raises(StoreAccessDenied, match=f"s3://{BUCKET}/{PREFIX}/team-b/journal/{run_id}/.*: access denied"):
                asyncio.run(_refund(b_url, fake.url, run_id, "b-customer", "team-b"))
        assert len(fake.ledger) == live  # nothing ran live against team-b's prefix
        with pytest.raises(StoreAccessDenied, match=f"/{PREFIX}/team-b/memory/team-b/b-customer/.*: access denied"):
            Memory(open_store(b_url), "team-b", "b-customer").load()
        status = as_runner(creds["team-a"], "-m", "tether", "status", "b-run", "--store", b_url)
        assert status.returncode == EXIT_TERMINAL and "access denied" in status.stderr, status.stderr
        assert "Traceback" not in status.stderr

    # Byte for byte: every object team-b wrote is denied to team-a's keys; team-b's keys read it.
    a_s3, b_s3 = s3_as(endpoint, creds["team-a"]), s3_as(endpoint, creds["team-b"])
    for key in b_keys:
        assert b_s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        with pytest.raises(a_s3.exceptions.ClientError, match="AccessDenied"):
            a_s3.get_object(Bucket=BUCKET, Key=key)
    # Nothing of team-a's attempts landed under team-b's prefix.
    after = [o["Key"] for o in b_s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/team-b/")["Contents"]]
    assert sorted(after) == sorted(b_keys)


def test_a_journal_write_denied_is_terminal(iam_server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials that cannot write the journal (revoked, or a policy too narrow): the attempt's
    first journal write (its claim on the run, before any model call) is denied, which ends the
    attempt as terminal, not recoverable (the next attempt would be denied again), and no model
    turn is paid for a run that could not record it."""
    endpoint, creds = iam_server
    become(monkeypatch, creds["read-only"])
    with FakeProvider(SCRIPT, seed=3) as fake:
        with pytest.raises(Exception) as failed:
            asyncio.run(_refund(store_url(endpoint, "read-only"), fake.url, "r-run", "r-customer", "read-only"))
        assert len(fake.ledger) == 0  # denied before the first model call
    chain, link = [], failed.value
    while link is not None:
        chain.append(link)
        link = link.__cause__ or link.__context__
    assert any(isinstance(x, StoreAccessDenied) and "journal/r-run/" in str(x) for x in chain), chain
    assert classify_exception(failed.value) == EXIT_TERMINAL
