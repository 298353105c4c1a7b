"""Every adapter, the same runs (issue 3, conformance 1–8). Each test runs real agents of the
framework over real HTTP against the fake provider, in separate processes per attempt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.approvals import decide, list_approvals
from tether.stores import open_store
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script

from .agents import MEET_SECRETS, PARALLEL_CALLS, TURNS, script_for


@pytest.mark.parametrize("k", range(1, TURNS["multi"] + 1))
def test_kill_after_turn_k_resumes_without_repeating(runner, fake, k):
    """1. Killed after turn k: turns ≤ k are replayed (0 live calls), completed tools never run
    again, the answer is the one an uninterrupted run gives."""
    reference = runner("multi", "reference")
    assert reference["status"] == "succeeded" and reference["model_live"] == TURNS["multi"]
    calls_before, reference_tools = fake.live_calls(), len(runner.executions())
    runner("multi", f"killed-{k}", kill_after_turn=k, expect_killed=True)
    assert fake.live_calls() - calls_before == k
    tools_after_kill = runner.executions()
    retry = runner("multi", f"killed-{k}")
    assert retry["model_replayed"] == k
    assert retry["model_live"] == TURNS["multi"] - k
    assert fake.live_calls() - calls_before == TURNS["multi"]  # each turn paid exactly once
    assert retry["output"] == reference["output"]
    executed = runner.executions()[len(tools_after_kill) :]
    done_before = {json.dumps(e["arguments"], sort_keys=True) + e["tool"] for e in tools_after_kill[reference_tools:]}
    assert len(executed) + len(tools_after_kill) - reference_tools == 2  # each tool ran once in all
    assert all(json.dumps(e["arguments"], sort_keys=True) + e["tool"] not in done_before for e in executed)
    assert retry["attempt"] == 2


def test_fingerprints_identical_in_two_processes(kit, runner, tmp_path):
    """2. The same run in two processes (two fake providers with one seed, so provider-made ids
    match) produces the same model fingerprints, in the same order."""
    fingerprints = []
    for i in range(2):
        with FakeProvider(Script.from_dict(script_for(kit)), seed=11) as provider:
            runner.fake = provider
            result = runner("multi", f"twin-{i}")
            assert result["model_live"] == TURNS["multi"]
        records = sorted(runner.records(f"twin-{i}"), key=lambda r: r.started_at)
        fingerprints.append([(r.fingerprint, r.occurrence) for r in records])
    assert len(fingerprints[0]) == TURNS["multi"]
    assert fingerprints[0] == fingerprints[1]


def test_streamed_run_replays(runner, fake):
    """3. A streamed run records its streams and replays them with no upstream call."""
    first = runner("multi", "streamed", stream=True)
    assert first["status"] == "succeeded" and first["model_live"] == TURNS["multi"]
    assert all(r.response.get("streamed") for r in runner.records("streamed"))
    calls = fake.live_calls()
    second = runner("multi", "streamed", stream=True)
    assert fake.live_calls() == calls
    assert second["model_replayed"] == TURNS["multi"] and second["output"] == first["output"]


def test_tool_error_reaches_the_model_and_loop_goes_on(runner, fake):
    """4. A raising tool becomes a tool error the framework hands to the model; the run completes."""
    result = runner("broken", "broken")
    assert result["status"] == "succeeded"
    assert "the backend is down" in result["output"]
    assert len(runner.executions("broken")) == 1
    again = runner("broken", "broken")
    assert again["output"] == result["output"]
    assert len(runner.executions("broken")) == 1  # the recorded failure is replayed, not re-run


def test_memory_is_shared_and_never_duplicated(runner):
    """5. Two runs with one memory key: the second sends the first's conversation; a crash
    mid-run and a successful retry leave exactly one copy of each turn."""
    first = runner("memory1", "mem-1", memory_key="ada")
    assert first["status"] == "succeeded"
    runner("memory2", "mem-2", memory_key="ada", kill_after_turn=1, expect_killed=True)
    second = runner("memory2", "mem-2", memory_key="ada")
    assert second["status"] == "succeeded"
    first_request = json.dumps(sorted(runner.records("mem-2"), key=lambda r: r.started_at)[0].request)
    assert "my name is Ada" in first_request and "what is my name?" in first_request
    stored = b"".join(open_store(runner.store).get(k) or b"" for k in open_store(runner.store).list("memory/default/ada/segments/"))
    assert stored.count(b"remember that my name is Ada") == 1
    assert stored.count(b"what is my name?") == 1


def test_approval_suspends_then_approve_completes(runner):
    """6a. Pending approval → suspended, nothing executed; approve → the tool runs once, done."""
    first = runner("refund", "refund-yes")
    assert first["status"] == "suspended" and first["pending_approval"]
    assert runner.executions("issue_refund") == []
    [request] = list_approvals(open_store(runner.store), "refund-yes")
    assert request["tool"] == "issue_refund" and "order A1" in request["prompt"]
    decide(open_store(runner.store), "refund-yes", request["id"], True, by="alice")
    done = runner("refund", "refund-yes")
    assert done["status"] == "succeeded" and "Refunded 20 USD on order A1" in done["output"]
    assert done["model_replayed"] >= 1
    assert len(runner.executions("issue_refund")) == 1


def test_approval_declined_tells_the_model(runner):
    """6b. Declined → the tool never runs and the model is told."""
    runner("refund", "refund-no")
    [request] = list_approvals(open_store(runner.store), "refund-no")
    decide(open_store(runner.store), "refund-no", request["id"], False, by="bob", reason="not eligible")
    done = runner("refund", "refund-no")
    assert done["status"] == "succeeded"
    assert "declined" in done["output"] and "not eligible" in done["output"]
    assert runner.executions("issue_refund") == []


def test_multi_agent_replays_like_a_single_agent(runner, fake):
    """7. Handoffs / sub-agents / multi-node graphs: killed after the first turn, resumed with
    that turn replayed; a second full run replays everything."""
    runner("delegate", "multi-agent", kill_after_turn=1, expect_killed=True)
    resumed = runner("delegate", "multi-agent")
    assert resumed["status"] == "succeeded" and resumed["model_replayed"] == 1
    assert resumed["model_live"] >= 1
    calls = fake.live_calls()
    again = runner("delegate", "multi-agent")
    assert fake.live_calls() == calls
    assert again["output"] == resumed["output"] and again["model_live"] == 0
    assert len({r.fingerprint for r in runner.records("multi-agent")}) >= 2


def test_usage_adds_up_and_replay_costs_nothing(runner):
    """8. Live tokens of the first attempt come back as replayed tokens, at $0 and shown as saved."""
    first = runner("multi", "usage")
    second = runner("multi", "usage")
    assert sum(first["usage_live"].values()) > 0 and sum(first["usage_replayed"].values()) == 0
    assert second["usage_replayed"] == first["usage_live"]
    assert sum(second["usage_live"].values()) == 0
    assert second["cost_usd"] == 0 and first["cost_usd"] > 0
    assert second["saved_usd"] == pytest.approx(first["cost_usd"])


def test_flyte_local_run_with_task_tools_resumes(runner, fake):
    """The same run under ``flyte.run`` (local mode), its tool a ``@tool``-over-``@env.task``
    that runs as a child Flyte task: killed after the first turn, resumed without repeating."""
    runner("flyte", "flyte-run", kill_after_turn=1, expect_killed=True)
    assert runner.executions("get_weather") == []
    resumed = runner("flyte", "flyte-run")
    assert resumed["status"] == "succeeded" and resumed["model_replayed"] == 1
    assert "sunny" in resumed["output"]
    [execution] = runner.executions("get_weather")
    assert execution["flyte_action"]  # it ran as a Flyte child action
    calls = fake.live_calls()
    again = runner("flyte", "flyte-run")
    assert fake.live_calls() == calls and again["output"] == resumed["output"]
    assert len(runner.executions("get_weather")) == 1


def parallel(kit) -> bool:
    """Whether the framework runs one turn's tool calls concurrently (the kit says when it does not)."""
    return getattr(kit, "PARALLEL_TOOL_CALLS", True)


def test_parallel_tool_calls_overlap_and_replay(kit, runner, fake):
    """9. The model asks for four tools in one turn (two async, two sync): each waits until all
    four have started, so they can only finish if the framework runs them concurrently through
    the tool seam; meanwhile each sees its own tool's secret only, and no secret is journaled.
    A framework that runs them one after the other (``PARALLEL_TOOL_CALLS = False``) meets each
    alone, in order. A second run replays all four without running any."""
    parties = PARALLEL_CALLS if parallel(kit) else 1
    first = runner("parallel", "parallel", env={"TETHER_MEET_PARTIES": str(parties)})
    assert first["status"] == "succeeded" and first["tool_live"] == PARALLEL_CALLS
    assert all(f"met {i}" in first["output"] for i in range(1, PARALLEL_CALLS + 1)), first["output"]
    assert "Error" not in first["output"]
    again = runner("parallel", "parallel")
    assert again["output"] == first["output"] and again["tool_replayed"] == PARALLEL_CALLS and again["tool_live"] == 0
    assert len(runner.executions("meet")) == PARALLEL_CALLS
    journal = b"".join(p.read_bytes() for p in (Path(runner.store) / "journal").rglob("*") if p.is_file())
    assert journal and not any(secret.encode() in journal for secret in MEET_SECRETS.values())


@pytest.mark.parametrize("finished", [1, PARALLEL_CALLS])
def test_kill_between_parallel_tool_calls_reruns_only_the_unfinished(kit, runner, fake, finished):
    """10. Killed while parallel calls are running, after exactly one of them finished (the first
    or the last of the turn): the retry replays that one and runs only the others, whatever
    order they finish in now; the turn that asked for them is replayed. One after the other
    (``PARALLEL_TOOL_CALLS = False``): killed once the first or the last result is recorded, the
    retry replays every recorded call and runs only the others."""
    run_id = f"parallel-kill-{finished}"
    if parallel(kit):
        env = {"TETHER_MEET_PARTIES": str(PARALLEL_CALLS), "TETHER_MEET_FINISH": str(finished)}
        runner("parallel", run_id, kill_after_tool=True, expect_killed=True, env=env)
        expected_rerun = [i for i in range(1, PARALLEL_CALLS + 1) if i != finished]
        retry_env = {"TETHER_MEET_PARTIES": str(PARALLEL_CALLS - 1)}
    else:
        runner("parallel", run_id, kill_after_tool=finished, expect_killed=True, env={"TETHER_MEET_PARTIES": "1"})
        expected_rerun = []
        retry_env = {"TETHER_MEET_PARTIES": "1"}
    started = runner.executions("meet")
    retry = runner("parallel", run_id, env=retry_env)
    assert retry["status"] == "succeeded", retry
    assert retry["model_replayed"] == 1 and retry["model_live"] == 1
    rerun = sorted(e["arguments"]["i"] for e in runner.executions("meet")[len(started) :])
    if parallel(kit):
        assert sorted(e["arguments"]["i"] for e in started) == list(range(1, PARALLEL_CALLS + 1))  # all four were running
        assert retry["tool_replayed"] == 1 and retry["tool_live"] == PARALLEL_CALLS - 1
        assert rerun == expected_rerun
    else:
        # The kill lands once the n-th result is recorded; the next call may have started (never
        # recorded): it runs again, like every call after it, and no recorded call does.
        first = [e["arguments"]["i"] for e in started]
        assert len(first) >= finished and retry["tool_replayed"] >= finished
        assert retry["tool_replayed"] + retry["tool_live"] == PARALLEL_CALLS and len(rerun) == retry["tool_live"]
        assert set(first) | set(rerun) == set(range(1, PARALLEL_CALLS + 1)) and len(set(rerun)) == len(rerun)
    assert all(f"met {i}" in retry["output"] for i in range(1, PARALLEL_CALLS + 1)) and "Error" not in retry["output"], retry["output"]


#: Lines of the agent's instructions changed between attempts (old, new): a plain one, and ones
#: shaped like what a framework writes into its requests and the wire protocols normalise out of
#: the fingerprint — Hermes' date line and host block, the Claude CLI's date and environment
#: reminders. Dates far from today's, so the new line is told apart from the framework's own.
CHANGED_LINES = {
    "plain": ("Answer in English.", "Answer in French."),
    "hermes-date": ("Conversation started: Friday, January 01, 1999", "Conversation started: Saturday, January 02, 1999"),
    "hermes-host": (
        "Host: Linux (6.1.0-old)\nUser home directory: /home/old\nCurrent working directory: /srv/old",
        "Host: Linux (5.4.0-new)\nUser home directory: /home/new\nCurrent working directory: /srv/new",
    ),
    "claude-date": (
        "<system-reminder>\nToday's date is 1999-01-01.\n</system-reminder>",
        "<system-reminder>\nToday's date is 1999-01-02.\n</system-reminder>",
    ),
    "claude-environment": (
        "<system-reminder>\n# Environment\nYou have been invoked in the following environment: \n"
        " - Primary working directory: /srv/old\n - OS Version: Linux 6.1.0-old\n</system-reminder>",
        "<system-reminder>\n# Environment\nYou have been invoked in the following environment: \n"
        " - Primary working directory: /srv/new\n - OS Version: Linux 5.4.0-new\n</system-reminder>",
    ),
}


@pytest.mark.parametrize("line", CHANGED_LINES)
def test_changed_instructions_never_replay_an_old_answer(runner, fake, line):
    """11. Killed after turn 1; before attempt 2 one line of the instructions changes — also a
    line shaped like one the framework writes and the fingerprint normalises (issue 23). The
    changed turn goes live with the new line and so do the turns after it: an old answer never
    reaches a changed request."""
    old, new = CHANGED_LINES[line]
    run_id = f"instructions-{line}"
    runner("multi", run_id, kill_after_turn=1, expect_killed=True, instructions=f"You are a helpful assistant.\n{old}")
    calls, sent = fake.live_calls(), len(fake.ledger.snapshot())
    retry = runner("multi", run_id, instructions=f"You are a helpful assistant.\n{new}")
    assert retry["status"] == "succeeded", retry
    assert retry["model_replayed"] == 0 and retry["model_live"] == TURNS["multi"], retry
    assert retry["first_divergence"] is not None
    assert fake.live_calls() - calls == TURNS["multi"]
    first = json.loads(fake.ledger.snapshot()[sent].body)
    marker = new.splitlines()[-2 if new.endswith("</system-reminder>") else -1]
    assert marker in json.dumps(first), "the changed line did not reach the provider"
