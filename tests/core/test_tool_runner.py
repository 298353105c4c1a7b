"""A tool holding a Secret runs in a tool runner apart from the agent (tether.toolrunner), as the
Kubernetes executor lays it out: two real processes, ``python -m tether exec`` (the agent: its
secrets directory holds the provider key only) and ``python -m tether tool-runner`` (the tool:
its own secrets directory holds the tool's Secret), talking over a Unix socket.

Checked: the tool sees its secret and the agent process never holds it (not in its environment,
not in its secrets directory, not anywhere in its memory — read through /proc/<pid>/mem while it
is paused inside a later call — and not in the journal or anything else in the store, nor sent to
the model); the agent's own key is found by the same memory scan (the scan works). A tool error
raised in the runner reaches the model as a tool error and is recorded as its own type. A kill
after the call was recorded replays it without sending it again; a kill after the tool's effect
but before the record sends it again under the identical idempotency key, the key an in-process
call of the same run gets. A runner that cannot be reached fails the attempt recoverably, records
nothing, and the next attempt runs once it is up.

What only a cluster shows (that the agent's container cannot open the tool's Secret file, which
its mount namespace does not have) is tests/e2e/test_kind.py's; here both processes share a
filesystem, so the agent's secrets directory is what is checked.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.tool_runner_pod import (
    DIGEST,
    MODEL_KEY,
    SCRIPT,
    WEATHER_KEY,
    Pod,
    finish,
    free_port,
    memory_holds,
    run_image_only_embed,
    stop,
    wait_file,
)
from tether.contract import EXIT_RECOVERABLE, EXIT_SUCCEEDED
from tether.testing import FakeProvider


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider(SCRIPT, seed=5) as provider:
        yield provider


def test_the_agent_never_holds_the_tools_secret_and_the_tool_does(tmp_path: Path, fake: FakeProvider) -> None:
    pod = Pod(tmp_path, fake.url, "weather: Paris and Atlantis?")
    runner = pod.runner()
    pause = tmp_path / "paused"
    try:
        agent = pod.agent(PAUSE=str(pause))
        wait_file(pause, agent)  # inside the in-process tool call that follows the forecasts
        pid = int(pause.read_text())
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert WEATHER_KEY.encode() not in environ
        assert not memory_holds(pid, WEATHER_KEY.encode()), "the tool's secret is in the agent's memory"
        assert memory_holds(pid, MODEL_KEY.encode()), "the scan finds the agent's own key (it works)"
        assert memory_holds(runner.pid, WEATHER_KEY.encode()), "the runner holds the tool's secret"
        (tmp_path / "paused.released").touch()
        code, outcome, err = finish(agent)
    finally:
        stop(runner)
    assert code == EXIT_SUCCEEDED, err
    assert outcome["status"] == "succeeded" and outcome["tool_live"] == 3
    # The tool ran in the runner's process and saw its secret, by tether.secret and os.environ.
    calls = {c["city"]: c for c in pod.seen()}
    assert set(calls) == {"Paris", "Atlantis"}
    assert {c["pid"] for c in calls.values()} == {runner.pid} != {pid}
    assert all(c["key_sha"] == DIGEST and c["environ"] for c in calls.values())
    # The agent's secrets directory has the provider key only.
    assert sorted(str(p.relative_to(pod.agent_secrets)) for p in pod.agent_secrets.rglob("*") if p.is_file()) == ["model/apiKey"]
    # The tool's error reached the model as a tool error, and is recorded as the tool's own type.
    sent = fake.ledger[1].body.decode()
    assert "Error: tool forecast failed: LookupError: no such city: Atlantis" in sent and "Paris: sunny" in sent
    records = {json.dumps(r["body"]): r["outcome"] for r in pod.tool_records()}
    assert records[json.dumps({"message": "no such city: Atlantis", "type": "LookupError"})] == "error"
    assert records[json.dumps("Paris: sunny")] == "ok"
    # The secret reached nothing the agent wrote or sent.
    assert WEATHER_KEY.encode() not in pod.store_bytes()
    assert all(WEATHER_KEY.encode() not in e.body for e in fake.ledger)


def test_a_kill_after_the_record_replays_without_calling_the_runner(tmp_path: Path, fake: FakeProvider) -> None:
    pod = Pod(tmp_path, fake.url, "oslo: weather?")
    runner = pod.runner()
    try:
        code, _, err = finish(pod.agent(TETHER_KILL_AFTER_STEP="2"))  # the model's turn, then the tool's record
        assert code == -signal.SIGKILL, err
        assert [c["city"] for c in pod.seen()] == ["Oslo"]
        code, outcome, err = finish(pod.agent())
    finally:
        stop(runner)
    assert code == EXIT_SUCCEEDED, err
    assert [c["city"] for c in pod.seen()] == ["Oslo"], "the recorded call was sent again"
    assert outcome["tool_replayed"] == 1 and outcome["tool_live"] == 0 and "Oslo: sunny" in outcome["output"]


def test_a_kill_between_effect_and_record_resends_under_the_same_idempotency_key(tmp_path: Path, fake: FakeProvider) -> None:
    pod = Pod(tmp_path, fake.url, "oslo: weather?")
    hold = tmp_path / "held"
    runner = pod.runner(HOLD=str(hold))
    try:
        agent = pod.agent()
        wait_file(hold, agent)  # the tool's effect happened; its answer has not reached the agent
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(30)
        (tmp_path / "held.released").touch()
        assert pod.tool_records() == []
        code, outcome, err = finish(pod.agent())
    finally:
        stop(runner)
    assert code == EXIT_SUCCEEDED, err
    first, second = pod.seen()
    assert first["idempotency_key"] == second["idempotency_key"] and re.fullmatch(r"[0-9a-f]{32}", first["idempotency_key"])
    assert outcome["tool_live"] == 1 and "Oslo: sunny" in outcome["output"]

    # The same call of the same run, in-process (no runner): the same key.
    alone = Pod(tmp_path / "in-process", fake.url, "oslo: weather?")
    env = alone.env(TETHER_SECRETS=json.dumps({"model": {"apiKey": MODEL_KEY}, "tools": {"forecast": {"WEATHER_KEY": WEATHER_KEY}}}))
    proc = subprocess.run([sys.executable, "-m", "tether", "exec", str(alone.request), "--store", str(alone.store)], env=env,
                          capture_output=True, text=True, timeout=120, cwd=alone.root)  # fmt: skip
    assert proc.returncode == EXIT_SUCCEEDED, proc.stderr
    [in_process] = alone.seen()
    assert in_process["idempotency_key"] == first["idempotency_key"] and in_process["pid"] != runner.pid


def test_a_runner_that_is_down_is_recoverable_and_records_nothing(tmp_path: Path, fake: FakeProvider) -> None:
    pod = Pod(tmp_path, fake.url, "oslo: weather?")
    code, outcome, err = finish(pod.agent(TETHER_TOOL_RUNNER_WAIT="0.5"))
    assert code == EXIT_RECOVERABLE, err
    assert "tool runner of forecast not reachable" in outcome["error"]
    assert pod.tool_records() == [] and pod.seen() == []
    runner = pod.runner()
    try:
        code, outcome, err = finish(pod.agent())
    finally:
        stop(runner)
    assert code == EXIT_SUCCEEDED, err
    assert outcome["model_replayed"] == 1 and outcome["tool_live"] == 1 and "Oslo: sunny" in outcome["output"]


def test_a_runner_serves_only_its_tool_from_an_allowed_module(tmp_path: Path, fake: FakeProvider) -> None:
    pod = Pod(tmp_path, fake.url, "x")
    argv = [sys.executable, "-m", "tether", "tool-runner", "--request", str(pod.request), "--socket", pod.socket]
    missing = subprocess.run([*argv, "--tool", "nope"], env=pod.env(), capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "AgentTool nope is not in the request" in missing.stderr
    refused = subprocess.run(
        [*argv, "--tool", "forecast"], env=pod.env(TETHER_TOOL_MODULES="other"), capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2 and "module weather_tools is not an allowed tool module" in refused.stderr
    assert not os.path.exists(pod.socket)


def test_a_tool_whose_module_only_its_image_has_is_described_by_its_runner(tmp_path: Path) -> None:
    """AgentTool image: the tool's module (and the library it needs) exist only in the runner's
    environment; the agent gets the tool's name, docstring and signature from the runner and
    offers the model that schema; the call runs in the runner."""
    image = tmp_path / "tool-image"
    image.mkdir()
    (image / "only_in_the_tool_image.py").write_text("def vector(text, dims):\n    return [float(len(text))] * dims\n")
    (image / "embed_tools.py").write_text(
        "from __future__ import annotations\nimport only_in_the_tool_image\n\n\n"
        "def embed(text: str, dims: int = 4, normalise: bool = True) -> list[float]:\n"
        '    """Embed a text with a library of the tool image."""\n'
        "    return only_in_the_tool_image.vector(text, dims)\n"
    )
    script = {"conversations": [{"match": "embed:", "turns": [
        {"tool_calls": [{"name": "embed", "arguments": {"text": "hello", "dims": 3}}]}, {"text_from_tool_results": True, "text": "Vector:"}]}]}  # fmt: skip
    with FakeProvider(script, seed=5) as fake:
        pod = Pod(tmp_path, fake.url, "embed: hello")
        code, outcome, err = run_image_only_embed(pod, image)
        assert code == EXIT_SUCCEEDED, err
        offered = json.loads(fake.ledger[0].body)["tools"][0]["function"]
    assert code == EXIT_SUCCEEDED, err
    assert "[5.0, 5.0, 5.0]" in outcome["output"], outcome
    assert offered["name"] == "embed" and offered["description"] == "Embed a text"
    assert offered["parameters"]["properties"] == {"text": {"type": "string"}, "dims": {"type": "integer"}, "normalise": {"type": "string"}}


def test_an_approval_is_asked_by_the_agent_before_the_runner_is_called(tmp_path: Path, fake: FakeProvider) -> None:
    """approval.required on a tool with a Secret: the agent's seam suspends the run (exit 3) and
    the runner is not called; once approved, the next attempt sends the call to the runner."""
    from tether.approvals import decide, list_approvals
    from tether.contract import EXIT_SUSPENDED
    from tether.stores import open_store

    pod = Pod(tmp_path, fake.url, "oslo: weather?")
    request = json.loads(pod.request.read_text())
    request["tools"]["forecast"]["approval"] = {"required": True}
    pod.request.write_text(json.dumps(request))
    runner = pod.runner()
    try:
        code, outcome, err = finish(pod.agent())
        assert code == EXIT_SUSPENDED, err
        assert pod.seen() == [], "the runner ran a call nobody approved"
        [pending] = list_approvals(open_store(str(pod.store)), pod.run_id)
        assert pending["tool"] == "forecast" and pending["arguments"] == {"city": "Oslo"}
        decide(open_store(str(pod.store)), pod.run_id, pending["id"], True, by="alice")
        code, outcome, err = finish(pod.agent())
    finally:
        stop(runner)
    assert code == EXIT_SUCCEEDED, err
    assert [c["city"] for c in pod.seen()] == ["Oslo"] and "Oslo: sunny" in outcome["output"]


def _frames(port: int, *docs: dict[str, object]) -> bytes:
    """Send frames to a runner on TCP as a stranger would; what came back before it closed."""
    chunks = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        try:
            for doc in docs:
                data = json.dumps(doc).encode()
                conn.sendall(struct.pack(">I", len(data)) + data)
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass  # the runner closed with our later frame unread: the kernel resets instead of closing
    return b"".join(chunks)


def test_a_runner_on_tcp_answers_only_the_attempts_token(tmp_path: Path, fake: FakeProvider) -> None:
    """A GPU tool's runner in a pod of its own listens on its pod IP, which any pod of the cluster
    can reach: only a frame carrying the attempt's token (a Secret only the agent's container and
    the tool's pod mount) is answered; any other gets no answer and runs nothing."""
    pod = Pod(tmp_path, fake.url, "oslo: weather?")
    token = secrets.token_urlsafe(32)
    (tmp_path / "tool-token").write_text(token)
    tokens = tmp_path / "agent-tokens"  # $TETHER_TOOL_TOKENS: one file per tool
    tokens.mkdir()
    port = free_port()
    runner = pod.runner(port=port, token_file=tmp_path / "tool-token")
    address = f"tcp://127.0.0.1:{port}"
    try:
        call = {"tool": "forecast", "arguments": {"city": "Oslo"}, "idempotencyKey": None}
        describe = {"op": "describe", "tool": "forecast"}
        # A stranger on the network: no token, a guessed one, a first frame too large to be a
        # token frame (refused unread): no answer at all.
        for docs in ([call], [{"token": "guess"}, call], [{"token": token[:-1]}, describe], [{"token": token, "pad": "x" * 2048}, call]):
            assert _frames(port, *docs) == b"", docs
        assert pod.seen() == [], "a call without the token ran the tool"
        # An agent holding the wrong token: the runner is unreachable for it (recoverable, nothing recorded).
        (tokens / "forecast").write_text("not-the-token")
        code, outcome, err = finish(pod.agent(address=address, TETHER_TOOL_TOKENS=str(tokens), TETHER_TOOL_RUNNER_WAIT="0.5"))
        assert code == EXIT_RECOVERABLE, err
        assert "tool runner of forecast" in outcome["error"] and pod.seen() == [] and pod.tool_records() == []
        # The attempt's token: the call runs once, in the runner, with the tool's secret.
        (tokens / "forecast").write_text(token)
        code, outcome, err = finish(pod.agent(address=address, TETHER_TOOL_TOKENS=str(tokens)))
        assert code == EXIT_SUCCEEDED, err
        assert outcome["tool_live"] == 1 and "Oslo: sunny" in outcome["output"]
        assert b'"name": "forecast"' in _frames(port, {"token": token}, describe)  # the same frame, after the token
        # A stranger who connects and says nothing is dropped after a few seconds, not held open.
        with socket.create_connection(("127.0.0.1", port), timeout=30) as silent:
            assert silent.recv(1) == b""
    finally:
        stop(runner)
    [seen] = pod.seen()
    assert seen["city"] == "Oslo" and seen["pid"] == runner.pid and seen["key_sha"] == DIGEST
    logs = runner.stderr.read() if runner.stderr else ""
    assert logs.count("refused a connection") == 4 and token not in logs, logs  # the silent one is not refused: it timed out
    assert token.encode() not in pod.store_bytes() and all(token.encode() not in e.body for e in fake.ledger)
