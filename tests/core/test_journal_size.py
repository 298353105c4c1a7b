"""Journal size linear in the work (issue 27, item 8): a model turn's request is stored as a delta on
the request it continues, each step is stored once (a loose record goes once a durable pack holds
it), a kill between the pack and the removal loses nothing, and a journal written by main's code
before this format (tests/core/fixtures/journal-main) still resumes.

Real parts: the local store, a writer process SIGKILLed at the exact point, the real ``openai``
SDK through ``tether.testing.chat_loop`` against the fake provider.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.core.test_crash_trials import QUESTION, SCRIPT
from tether.canonical import fingerprint
from tether.errors import Superseded
from tether.journal import PACK_EVERY, Journal, Record, read_records
from tether.stores import LocalStore
from tether.testing import FakeProvider

FIXTURE = Path(__file__).parent / "fixtures" / "journal-main"
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def request(turn: int) -> dict[str, Any]:
    """Turn ``turn``'s request: every message so far (as a framework re-sends it) and its tools."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "go"}]
    for i in range(turn):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"i": i})}}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"result {i}: " + "x" * 200})
    return {
        "path": "/v1/chat/completions",
        "query": {},
        "headers": {},
        "body": {"model": "gpt-4o-mini", "messages": messages, "tools": TOOLS},
    }


def model_record(turn: int) -> Record:
    req = request(turn)
    return Record(
        "model", fingerprint("model", req), 1, "ok", req, {"status": 200, "headers": [], "streamed": False}, body=b'{"id":"r%d"}' % turn
    )


def stored(root: Path, scope: str) -> dict[str, int]:
    """Bytes per kind of object in a journal: pack, tail, loose records."""
    out = {"pack": 0, "tail": 0, "loose": 0}
    for path in (root / "journal" / scope).rglob("*"):
        if path.is_file() and not path.name.startswith("."):
            kind = "loose" if path.suffix == ".rec" else path.name
            if kind in out:
                out[kind] += path.stat().st_size
    return out


def test_a_turn_costs_the_same_bytes_wherever_it_is(tmp_path: Path) -> None:
    """Turn 200's record is no bigger than turn 20's: its request keeps what the previous one
    held by reference. Read back, every request is whole again and hashes to its fingerprint."""
    store = LocalStore(tmp_path, fsync=False)
    journal = Journal(store, "long").load()
    for turn in range(200):
        journal.append(model_record(turn))
    journal.close()
    sizes = [len(data) for data in journal._entries]
    assert max(sizes[150:]) <= 1.05 * max(sizes[10:50]), f"later turns store more: {sizes[10]} vs {sizes[-1]}"
    whole = len(model_record(199).encode())
    assert sizes[-1] * 20 < whole, "the last turn was stored whole"
    assert stored(tmp_path, "long")["loose"] == 0, "a step is stored twice"

    again = Journal(LocalStore(tmp_path), "long").load()
    assert len(again.records) == 200 and again.counters.corrupt == 0
    for turn in range(200):
        record = again.records[("model", fingerprint("model", request(turn)), 1)]
        assert record.request == request(turn) and fingerprint("model", record.request) == record.fingerprint
    viewed = read_records(LocalStore(tmp_path), "long")
    assert [r.request for r in viewed] == [request(turn) for turn in range(200)]


def test_interleaved_conversations_each_continue_their_own(tmp_path: Path) -> None:
    """Two sub-agents whose turns alternate: each request is a delta on its own conversation's."""
    journal = Journal(LocalStore(tmp_path, fsync=False), "two").load()
    for turn in range(30):
        for agent in ("a", "b"):
            req = request(turn)
            req["body"]["messages"][0]["content"] = f"You are agent {agent}."
            journal.append(Record("model", fingerprint("model", req), 1, "ok", req, body=b"{}"))
    assert max(len(d) for d in journal._entries[-10:]) * 10 < len(Record("model", "f", 1, "ok", request(29)).encode())
    journal.close()
    again = Journal(LocalStore(tmp_path), "two").load()
    assert len(again.records) == 60 and all(fingerprint("model", r.request) == r.fingerprint for r in again.records.values())


WRITER = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, sys.argv[4])
    from tests.core.test_journal_size import model_record
    from tether.journal import PACK_EVERY, Journal
    from tether.stores import LocalStore

    deletes_before_kill = int(sys.argv[3])
    deletes = 0

    class Dying(LocalStore):
        def delete(self, key):
            global deletes
            if deletes == deletes_before_kill:
                os.kill(os.getpid(), signal.SIGKILL)  # the pack is durable; its loose copies not all gone
            deletes += 1
            super().delete(key)

    journal = Journal(Dying(sys.argv[1]), sys.argv[2]).load()
    for turn in range(3 * PACK_EVERY):
        journal.append(model_record(turn))
        print(turn, flush=True)
    journal.close()
    """
)


def test_a_kill_between_the_pack_and_removing_its_loose_records_loses_nothing(tmp_path: Path) -> None:
    """The writer is SIGKILLed by its own store at its first (then its fifth) removal of a loose
    record, after the pack holding it became durable. The next attempt finds every step it
    acknowledged, whole; once it ends, no step is stored twice."""
    root = Path(__file__).resolve().parents[2]
    for deletes in (0, 4):
        scope = f"cut{deletes}"
        proc = subprocess.run(
            [sys.executable, "-c", WRITER, str(tmp_path), scope, str(deletes), str(root)], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
        acked = [int(line) for line in proc.stdout.split()]
        assert stored(tmp_path, scope)["pack"] > 0 and stored(tmp_path, scope)["loose"] > 0  # killed between the two

        journal = Journal(LocalStore(tmp_path), scope).load()
        assert journal.counters.corrupt == 0 and journal.attempt == 2
        for turn in acked:
            assert journal.records[("model", fingerprint("model", request(turn)), 1)].request == request(turn)
        journal.close()
        assert stored(tmp_path, scope)["loose"] == 0, "the next attempt left a step stored twice"
        assert len(Journal(LocalStore(tmp_path), scope).load().records) >= len(acked)


def test_a_journal_written_by_main_before_deltas_resumes(tmp_path: Path) -> None:
    """tests/core/fixtures/journal-main was written by main's code at fcaf3fb (whole requests,
    loose records beside the pack): a finished run replays every step with no live call, and a
    run killed after its fourth step replays those and goes on live. The new records continue
    the old ones as deltas; no step stays stored twice."""
    store = tmp_path / "store"
    shutil.copytree(FIXTURE, store)
    log = tmp_path / "tools.jsonl"
    with FakeProvider(SCRIPT) as provider:
        upstream = provider.url + "/openai"

        def resume(scope: str) -> dict[str, Any]:
            argv = ["--store", str(store), "--scope", scope, "--upstream", upstream, "--question", QUESTION]
            proc = subprocess.run(
                [sys.executable, "-m", "tether.testing.chat_loop", *argv],
                capture_output=True,
                text=True,
                timeout=120,
                env={**os.environ, "TETHER_TOOL_LOG": str(log)},
            )
            assert proc.returncode == 0, proc.stderr[-2000:]
            return json.loads(proc.stdout.strip().splitlines()[-1])

        finished = resume("finished")
        assert (finished["model_live"], finished["model_replayed"], finished["tool_live"], finished["tool_replayed"]) == (0, 3, 0, 4)
        assert finished["corrupt"] == 0 and finished["first_divergence"] is None
        killed = resume("killed")
        assert (killed["model_replayed"], killed["tool_replayed"], killed["model_live"], killed["tool_live"]) == (2, 2, 1, 2)
        assert killed["answer"] == finished["answer"] and killed["corrupt"] == 0
        assert provider.live_calls() == 1
    assert [json.loads(line)["tool"] for line in log.read_text().splitlines()] == ["get_weather", "flaky"]  # only the two not recorded

    for scope in ("finished", "killed"):
        assert stored(store, scope)["loose"] == 0, f"{scope}: a step stored twice"
        records = read_records(LocalStore(store), scope)
        assert len(records) == 7 and all(fingerprint(r.kind, r.request) == r.fingerprint for r in records if r.kind == "model")


def test_an_older_attempts_late_close_loses_no_record(tmp_path: Path) -> None:
    """A newer attempt starts while the older one still runs (the fence): the older attempt's
    close comes after the newer one loaded (its tail write is refused; its pack, written beside
    it, may land: the pack in the store is still the one both read). The newer attempt's packs
    are written by compare-and-swap (a changed pack is read and merged first), so the last pack
    holds both attempts' steps, each stored once, and the older attempt never writes again."""
    store = LocalStore(tmp_path, fsync=False)
    first = Journal(store, "rival").load()
    for i in range(PACK_EVERY - 1):
        first.append(Record("tool", f"a{i}", 1, "ok", {"i": i}, body=b'"a"'))
    second = Journal(store, "rival").load()
    assert (first.attempt, second.attempt) == (1, 2) and len(second.records) == PACK_EVERY - 1
    first.close()  # not told yet
    assert first.superseded_by is not None
    for i in range(2 * PACK_EVERY + 3):  # background packs, then the closing one
        second.append(model_record(i))
    second.close()
    assert stored(tmp_path, "rival")["loose"] == 0
    with pytest.raises(Superseded):
        first.append(Record("tool", "late", 1, "ok", {}, body=b'"a"'))
    again = Journal(LocalStore(tmp_path), "rival").load()
    assert len(again.records) == PACK_EVERY - 1 + 2 * PACK_EVERY + 3 and again.counters.corrupt == 0
    assert all(fingerprint("model", r.request) == r.fingerprint for r in again.records.values() if r.kind == "model")


def test_a_single_copy_journal_writes_no_loose_record_and_a_kill_loses_nothing(tmp_path: Path) -> None:
    """``single_copy``, as ``run_agent``'s runs (``Run(overlap_writes=True)``): a step counts once
    its tail is durable and no loose record is ever written. Killed (no ``close``) after background
    packs, the next attempt finds every step in the pack and the tail; closed, the pack holds them
    all, and the tail the next load takes over is empty (a load counts the pack's delta records as
    packed: the tail repeated every model record of the pack before)."""

    class Counting(LocalStore):
        loose = 0

        def create(self, key: str, data: bytes) -> bool:
            type(self).loose += key.endswith(".rec")
            return super().create(key, data)

        def put(self, key: str, data: bytes) -> None:
            type(self).loose += key.endswith(".rec")
            super().put(key, data)

    store = Counting(tmp_path, fsync=False)
    first = Journal(store, "single")
    first.single_copy = True
    first.load()
    steps = 2 * PACK_EVERY + 3
    for i in range(steps):
        first.append(model_record(i) if i % 2 else Record("tool", f"t{i}", 1, "ok", {"i": i}, body=b'"a"'))
    if first._packer is not None:
        first._packer.join()  # a background pack landed: the tail now holds only what it lacks
    second = Journal(store, "single")
    second.single_copy = True
    second.load()  # the first attempt was killed: no close
    assert len(second.records) == steps and second.counters.corrupt == 0 and second.attempt == 2
    second.close()
    assert Counting.loose == 0 and stored(tmp_path, "single")["loose"] == 0
    again = Journal(LocalStore(tmp_path), "single").load()
    assert len(again.records) == steps and len(store.get(again.tail_key) or b"") < 200  # the closing tail is empty
