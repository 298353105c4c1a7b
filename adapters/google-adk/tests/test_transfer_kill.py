"""``transfer_to_agent`` across SIGKILLs: the router hands the conversation to its billing
sub-agent, and the process running the agent is killed after the transfer, after the billing
agent's turn and after its refund. Every attempt is a fresh process (as a node runs it; forked
from a warm zygote, adk_transfer_child.py) with ADK's real Runner and google-genai client against
the fake Gemini provider; each retry replays every turn an earlier attempt finished — 0 live calls
for them — and the refund runs once.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.zygote import Zygote
from tether.testing.fake_provider import FakeProvider, Fault
from tether.testing.script import Script

#: The router transfers (ADK's transfer_to_agent); the billing agent, picked by its instructions,
#: refunds and answers.
SCRIPT = {
    "conversations": [
        {
            "match": "transfer:",
            "system": "You issue refunds.",
            "turns": [
                {"tool_calls": [{"name": "refund", "arguments": {"order": "7"}}]},
                {"text_from_tool_results": True, "text": "Billing:"},
            ],
        },
        {"match": "transfer:", "turns": [{"tool_calls": [{"name": "transfer_to_agent", "arguments": {"agent_name": "billing"}}]}]},
    ]
}

HERE = Path(__file__).resolve().parent
NAMES = itertools.count(1)


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    """A warm process with ADK imported that forks one process per attempt (adk_transfer_child)."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), saved]))
    try:
        z = Zygote("adk_transfer_child:child", prepare="adk_transfer_child:preload", env={"GEMINI_API_KEY": "k"})
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = saved
    with z:
        yield z


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider(Script.from_dict(SCRIPT), seed=3) as provider:
        yield provider


def attempt(zygote: Zygote, fake: FakeProvider, tmp_path: Path, stream: bool, **kill: int) -> dict | None:
    args = {"origin": fake.url, "store": str(tmp_path / "store"), "stream": stream, **kill}
    proc = zygote.run(args, tmp_path, f"attempt{next(NAMES)}", env={"TETHER_TOOL_LOG": str(tmp_path / "tools.jsonl")}, timeout_s=180)
    assert not proc["timed_out"], proc["stderr"][-3000:]
    if kill:
        assert proc["signal"] == 9, proc["stderr"][-3000:]
        return None
    assert proc["exit"] == 0, proc["stderr"][-3000:]
    outcome: dict = json.loads(proc["stdout"].strip().splitlines()[-1])
    return outcome


def refunds(tmp_path: Path) -> int:
    log = tmp_path / "tools.jsonl"
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_kills_after_a_transfer_replay_every_finished_turn(zygote: Zygote, fake: FakeProvider, tmp_path: Path, stream: bool) -> None:
    live = []

    def live_calls() -> int:
        return fake.live_calls("gemini")

    # A live turn is recorded when the process turns to what follows it (here: the billing agent's
    # request), so hold that request back: the kill after the transfer lands before its answer.
    fake.inject(Fault("slow_first_byte:20", after=1, match_protocol="gemini"))
    for kill in ({"kill_after_turn": 1}, {"kill_after_turn": 2}, {"kill_after_tool": 1}):
        before = live_calls()
        attempt(zygote, fake, tmp_path, stream, **kill)
        live.append(live_calls() - before)
    # The transfer turn; the billing agent's turn (the transfer replayed); the refund, its turn
    # and the transfer both replayed: one live call each, none for a turn already recorded.
    assert live == [1, 1, 0]
    assert refunds(tmp_path) == 1

    result = attempt(zygote, fake, tmp_path, stream)
    assert result is not None
    assert result["status"] == "succeeded" and result["output"] == "Billing: Order 7 refunded."
    assert (result["model_replayed"], result["model_live"], result["tool_replayed"], result["tool_live"]) == (2, 1, 1, 0)
    assert refunds(tmp_path) == 1 and live_calls() == 3
    # The live calls: the router's turn, then the billing agent's two (its instructions picked them).
    assert [e.turn for e in fake.ledger.snapshot() if e.live] == [0, 0, 1]

    again = attempt(zygote, fake, tmp_path, stream)
    assert again is not None
    assert (again["model_replayed"], again["model_live"], again["tool_live"]) == (3, 0, 0) and again["output"] == result["output"]
    assert refunds(tmp_path) == 1 and live_calls() == 3
