"""The conformance suite: the same agent runs for every adapter (issue 3).

Run it in an adapter's environment, naming that adapter's kit:

    TETHER_KIT=adapters/openai/tests/kit.py python -m pytest tests/conformance

A kit (``adapters/<id>/tests/kit.py``) defines ``FRAMEWORK``, ``MODEL``, ``PROTOCOL`` and
``multi_agent(tools)`` — a bring-your-own multi-agent object (handoff, sub-agent, multi-node
graph) — and may define ``MULTI_SCRIPT`` (extra fake-provider conversations, listed before the
shared ones) and ``MULTI_PROMPT``, and ``PARALLEL_TOOL_CALLS = False`` where the framework runs
the tool calls of one turn one after the other (scenarios 9–10 then prove that order instead). Without ``TETHER_KIT`` the suite refuses to run (a usage error,
not zero tests): the core run leaves it out with ``--ignore=tests/conformance``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

if not os.environ.get("TETHER_KIT"):
    raise pytest.UsageError(
        "tests/conformance needs an adapter kit: TETHER_KIT=adapters/<id>/tests/kit.py "
        "(run it in that adapter's env: scripts/env.sh <id>); to run the other tests without it, pass --ignore=tests/conformance"
    )

from tests.support.zygote import Zygote
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script

from .agents import script_for
from .driver import load_kit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def kit():
    return load_kit(str(ROOT / os.environ["TETHER_KIT"]))


#: Constant for every attempt, so set before the zygote imports the framework.
ENV = {
    "OPENAI_API_KEY": "sk-conformance",
    "ANTHROPIC_API_KEY": "sk-conformance",
    "GEMINI_API_KEY": "conformance",
    "MISTRAL_API_KEY": "conformance",
    "OPENAI_AGENTS_DISABLE_TRACING": "1",
}


@pytest.fixture(scope="session")
def zygote(kit):
    """One warm process per adapter that forks a fresh process for every attempt (the imports of
    a framework cost seconds; a fork costs milliseconds)."""
    with Zygote("tests.conformance.driver:child", prepare="tests.conformance.driver:preload", env=ENV) as z:
        yield z


@pytest.fixture
def fake(kit):
    with FakeProvider(Script.from_dict(script_for(kit)), seed=7) as provider:
        yield provider


class Runner:
    """Runs the driver in a fresh process per attempt (forked from the zygote) and keeps what
    tests assert on."""

    def __init__(self, kit_path: str, fake: FakeProvider, tmp: Path, zygote: Zygote) -> None:
        self.kit_path, self.fake, self.zygote, self.tmp = kit_path, fake, zygote, tmp
        self.attempts = 0
        self.store = str(tmp / "store")
        self.tool_log = tmp / "tools.jsonl"
        self.tool_log.touch()

    def __call__(
        self, scenario: str, run_id: str, *, kill_after_turn: int = 0, expect_killed: bool = False, env: dict | None = None, **extra
    ) -> dict | None:
        args = {
            "kit": self.kit_path,
            "scenario": scenario,
            "run_id": run_id,
            "store": self.store,
            "origin": self.fake.url,
            "kill_after_turn": kill_after_turn,
            **extra,
        }
        self.attempts += 1
        proc = self.zygote.run(
            args, self.tmp, f"attempt{self.attempts}", env={"TETHER_TOOL_LOG": str(self.tool_log), **(env or {})}, timeout_s=180
        )
        assert not proc["timed_out"], f"attempt {self.attempts} ran over 180 s: {proc['stderr'][-3000:]}"
        if expect_killed:
            assert proc["signal"] == 9, f"expected SIGKILL, got {proc['signal'] or proc['exit']}: {proc['stderr'][-3000:]}"
            return None
        assert proc["exit"] == 0, proc["stderr"][-5000:]
        return json.loads(proc["stdout"].strip().splitlines()[-1])

    def executions(self, tool: str | None = None) -> list[dict]:
        lines = [json.loads(line) for line in self.tool_log.read_text().splitlines() if line.strip()]
        return [e for e in lines if tool is None or e["tool"] == tool]

    def records(self, run_id: str, kind: str = "model"):
        from tether.journal import read_records
        from tether.stores import LocalStore

        found = [r for r in read_records(LocalStore(self.store), run_id) if r.kind == kind]
        return sorted(found, key=lambda r: f"{r.fingerprint}-{r.occurrence}")


@pytest.fixture
def runner(kit, fake, tmp_path, zygote):
    return Runner(os.environ["TETHER_KIT"], fake, tmp_path, zygote)
