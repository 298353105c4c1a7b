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

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.contract import EXIT_RECOVERABLE, EXIT_SUCCEEDED
from tether.testing import FakeProvider

REPO = Path(__file__).resolve().parents[2]
WEATHER_KEY = "wk-live-7f3a9c2e51d04b8e-tool-only"
MODEL_KEY = "sk-model-key-5501-agent-only"
DIGEST = hashlib.sha256(WEATHER_KEY.encode()).hexdigest()[:12]

TOOLS = '''
import hashlib, json, os, time
import tether


def forecast(city: str) -> str:
    """The weather forecast for a city."""
    key = tether.secret("WEATHER_KEY")
    seen = {"city": city, "pid": os.getpid(), "idempotency_key": tether.idempotency_key(),
            "key_sha": key and hashlib.sha256(key.encode()).hexdigest()[:12], "environ": os.environ.get("WEATHER_KEY") == key}
    with open(os.environ["EFFECTS"], "a") as f:
        f.write(json.dumps(seen) + "\\n")
    if city == "Atlantis":
        raise LookupError("no such city: Atlantis")
    hold = os.environ.get("HOLD")
    if hold and not os.path.exists(hold + ".released"):  # the effect happened: wait to be cut off
        open(hold, "w").close()
        while not os.path.exists(hold + ".released"):
            time.sleep(0.02)
    return f"{city}: sunny"


def pause() -> str:
    """Wait a moment."""
    marker = os.environ.get("PAUSE")
    if marker:
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        while not os.path.exists(marker + ".released"):
            time.sleep(0.02)
    return "paused"
'''

# The core environment has no framework (no tether_openai): a module of that name on the path is
# the runtime's test adapter (the raw openai SDK in a small loop), handing a tool error to the
# model as text as every real adapter does.
ADAPTER = '''
from tests.core.chat_adapter import ChatAdapter
from tether.agent import tool_error_text
from tether.errors import ToolError


class _ErrorsToModel:
    def __init__(self, tool):
        self.tool, self.name, self.fn, self.description = tool, tool.name, tool.fn, tool.description

    async def __call__(self, **kwargs):
        try:
            return await self.tool(**kwargs)
        except ToolError as e:
            return tool_error_text(e)


class Adapter(ChatAdapter):
    framework = "openai"

    def build(self, spec, session):
        spec.tools = [_ErrorsToModel(t) for t in spec.tools]
        return super().build(spec, session)


ADAPTER = Adapter()
'''

SCRIPT = {
    "conversations": [
        {
            "match": "weather:",
            "turns": [
                {"tool_calls": [{"name": "forecast", "arguments": {"city": "Paris"}}, {"name": "forecast", "arguments": {"city": "Atlantis"}}]},
                {"tool_calls": [{"name": "pause", "arguments": {}}]},
                {"text_from_tool_results": True, "text": "Report:"},
            ],
        },
        {
            "match": "oslo:",
            "turns": [{"tool_calls": [{"name": "forecast", "arguments": {"city": "Oslo"}}]}, {"text_from_tool_results": True, "text": "Oslo:"}],
        },
    ]
}


class Pod:
    """The files of one runner pod, laid out as the Kubernetes executor mounts them."""

    def __init__(self, root: Path, fake_url: str, prompt: str, run_id: str = "run-1") -> None:
        self.root = root
        (root / "mods").mkdir(parents=True, exist_ok=True)
        (root / "mods" / "weather_tools.py").write_text(TOOLS)
        (root / "mods" / "tether_openai.py").write_text(ADAPTER)
        self.agent_secrets, self.tool_secrets = root / "agent-secrets", root / "tool-secrets"
        (self.agent_secrets / "model").mkdir(parents=True, exist_ok=True)
        (self.agent_secrets / "model" / "apiKey").write_text(MODEL_KEY)
        (self.tool_secrets / "tools" / "forecast").mkdir(parents=True, exist_ok=True)
        (self.tool_secrets / "tools" / "forecast" / "WEATHER_KEY").write_text(WEATHER_KEY)
        self.socket = str(root / "sockets" / "0.sock")
        (root / "sockets").mkdir(exist_ok=True)
        self.effects = root / "effects.jsonl"
        self.store = root / "store"
        self.run_id = run_id
        tools = {
            "forecast": {"description": "The forecast", "implementation": "weather_tools:forecast", "env": [
                {"name": "WEATHER_KEY", "secretKeyRef": {"name": "weather", "key": "key"}}]},  # fmt: skip
            "pause": {"description": "Wait", "implementation": "weather_tools:pause"},
        }
        request = {
            "runId": run_id,
            "namespace": "ns",
            "name": run_id,
            "spec": {"framework": "openai", "model": {"name": "gpt-4o-mini", "baseURL": f"{fake_url}/openai/v1"}, "input": prompt,
                     "tools": list(tools)},  # fmt: skip
            "tools": tools,
        }
        self.request = root / "request.json"
        self.request.write_text(json.dumps(request))

    def env(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        path = os.pathsep.join([str(self.root / "mods"), str(REPO), *sys.path])
        return {**base, "PYTHONPATH": path, "TETHER_TOOL_MODULES": "weather_tools", "EFFECTS": str(self.effects), **extra}

    def runner(self, **extra: str) -> subprocess.Popen[str]:
        argv = ["-m", "tether", "tool-runner", "--request", str(self.request), "--tool", "forecast", "--socket", self.socket]
        env = self.env(TETHER_SECRETS_DIR=str(self.tool_secrets), **extra)
        proc = subprocess.Popen([sys.executable, *argv], env=env, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while not os.path.exists(self.socket):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.time() < deadline, "the tool runner did not start"
            time.sleep(0.05)
        return proc

    def agent(self, **extra: str) -> subprocess.Popen[str]:
        env = self.env(TETHER_SECRETS_DIR=str(self.agent_secrets), TETHER_TOOL_RUNNERS=json.dumps({"forecast": self.socket}), **extra)
        argv = ["-m", "tether", "exec", str(self.request), "--store", str(self.store)]
        return subprocess.Popen([sys.executable, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=self.root)

    def seen(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.effects.read_text().splitlines()] if self.effects.exists() else []

    def store_bytes(self) -> bytes:
        return b"".join(p.read_bytes() for p in sorted(self.store.rglob("*")) if p.is_file())

    def tool_records(self) -> list[dict[str, Any]]:
        from tether.journal import Journal
        from tether.stores import open_store

        journal = Journal(open_store(str(self.store)), self.run_id).load()
        return [{"outcome": r.outcome, "body": json.loads(r.body)} for r in journal.records.values() if r.kind == "tool"]


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, dict[str, Any], str]:
    out, err = proc.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return proc.returncode, (json.loads(lines[-1]) if lines else {}), err


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(10)


def wait_file(path: Path, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the agent ended early: {proc.communicate()}"
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def memory_holds(pid: int, needle: bytes) -> bool:
    """Whether any readable mapping of process ``pid`` contains ``needle`` (the parent may read
    its child's memory under Yama ptrace_scope 1)."""
    found = False
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("r"):
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                chunk = mem.read(end - start)
            except (OSError, OverflowError, ValueError):  # [vvar] and the like
                continue
            if needle in chunk:
                found = True
                break
    return found


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
    refused = subprocess.run([*argv, "--tool", "forecast"], env=pod.env(TETHER_TOOL_MODULES="other"), capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "module weather_tools is not an allowed tool module" in refused.stderr
    assert not os.path.exists(pod.socket)
