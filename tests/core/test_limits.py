"""Run limits: a cost limit refuses further live turns with a clear, terminal error."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from tether.commands import status
from tether.entrypoint import EXIT_TERMINAL, classify_exception
from tether.errors import LimitExceeded
from tether.progress import snapshot, write_progress
from tether.run import Run
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script
from tether.wire.transport import AsyncWireTransport


def client_for(run: Run) -> openai.AsyncOpenAI:
    """The OpenAI SDK through the run's in-process wire transport."""
    http = httpx.AsyncClient(transport=AsyncWireTransport("openai", run))
    return openai.AsyncOpenAI(base_url=run.upstreams["openai"] + "/v1", api_key="k", http_client=http, max_retries=0)


def test_cost_limit_refuses_the_next_live_turn_and_replays_stay_free(tmp_path):
    with FakeProvider(Script.text("hello")) as fake:

        async def ask(run: Run) -> str:
            client = client_for(run)
            with run.activate():
                r = await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
                return r.choices[0].message.content

        upstreams = {"openai": fake.url + "/openai"}
        run = Run("limited", str(tmp_path), upstreams=upstreams, max_cost_usd=0.0000001)
        assert asyncio.run(ask(run)) == "hello"  # the first turn is below the limit when it starts
        with pytest.raises(openai.APIStatusError) as refused:
            asyncio.run(ask(run))  # a second, identical turn would be a new live call: refused
        assert refused.value.status_code == 402 and "cost limit" in str(refused.value)
        assert run.limit_exceeded and fake.live_calls() == 1
        # A new attempt replays the recorded turn for free even though the limit is reached.
        retry = Run("limited", str(tmp_path), upstreams=upstreams, max_cost_usd=0.0000001)
        assert asyncio.run(ask(retry)) == "hello" and retry.counters.model_replayed == 1


def test_limit_anywhere_in_the_chain_is_terminal():
    try:
        try:
            raise LimitExceeded("cost limit")
        except LimitExceeded as inner:
            raise ConnectionError("wrapped by an SDK") from inner
    except ConnectionError as outer:
        assert classify_exception(outer) == EXIT_TERMINAL


def test_progress_reports_the_runs_live_steps_over_every_attempt(tmp_path):
    """Each recorded step was live once, in the attempt that recorded it: a retry's progress
    reports the run's live turns, tool calls and tokens beside its own, so what reads only the
    newest progress (the operator's metrics, after an attempt killed before its last progress was
    read) counts every live step once. A result reused from another run's cache ran nothing."""
    from tether.tools import ToolSpec, call_tool

    script = {"conversations": [{"match": q, "turns": [{"text": f"answer {q}"}]} for q in ("one", "two")]}
    ran: list[str] = []

    async def charge(customer: str) -> str:
        ran.append(customer)
        return f"charged {customer}"

    spec = ToolSpec("charge", charge)
    with FakeProvider(script) as fake:
        upstreams = {"openai": fake.url + "/openai"}

        async def attempt(questions: list[str], calls: list[str]) -> Run:
            run = Run("counted", str(tmp_path), upstreams=upstreams)
            client = client_for(run)
            with run.activate():
                for q in questions:
                    await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": q}])
                for c in calls:
                    await call_tool(spec, {"customer": c}, run=run)
                await run.seam.written()
            return run

        first = asyncio.run(attempt(["one"], ["ann"]))  # killed: never closed
        first_tokens = first.accounting.live.total
        assert first_tokens > 0
        retry = asyncio.run(attempt(["one", "two"], ["ann", "bob"]))
        steps, usage = snapshot(retry, "Running").steps, snapshot(retry, "Running").usage
        assert (steps.model_live, steps.model_replayed, steps.run_model_live) == (1, 1, 2)
        assert (steps.tool_live, steps.tool_replayed, steps.run_tool_live) == (1, 1, 2)
        assert usage.live_tokens == retry.accounting.live.total and usage.run_live_tokens == first_tokens + usage.live_tokens
        assert fake.live_calls() == 2 and ran == ["ann", "bob"]
        wire = snapshot(retry, "Running").steps.wire()
        assert (wire["runModelLive"], wire["runToolLive"]) == (2, 2)

    cached = ToolSpec("charge", charge, cache="auto")

    async def reuse(scope: str) -> Run:
        run = Run(scope, str(tmp_path))
        with run.activate():
            await call_tool(cached, {"customer": "cy"}, run=run)
        return run

    asyncio.run(reuse("first-run"))  # runs it, cached for other runs
    other = asyncio.run(reuse("other-run"))  # reuses that result
    assert ran.count("cy") == 1 and other.counters.tool_replayed == 1
    again = asyncio.run(reuse("other-run"))  # its retry: the record it replays was never live in this run
    assert snapshot(again, "Running").steps.run_tool_live == 0 and again.counters.tool_replayed == 1


def test_cost_limit_counts_every_attempt_of_the_run(tmp_path, capsys):
    """A run retried N times must not spend N times its budget: the limit holds for the run's live
    spend over all attempts (a replayed turn is free, and was paid once, by the attempt that ran it)."""
    script = {"conversations": [{"match": q, "turns": [{"text": f"answer {q}"}]} for q in ("one", "two", "three")]}
    with FakeProvider(script) as fake:
        upstreams = {"openai": fake.url + "/openai"}

        async def ask(run: Run, question: str) -> str:
            client = client_for(run)
            with run.activate():
                r = await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": question}])
                return r.choices[0].message.content

        first = Run("budget", str(tmp_path), upstreams=upstreams)
        assert asyncio.run(ask(first, "one")) == "answer one"
        per_turn = first.accounting.live_cost_usd
        assert per_turn > 0
        asyncio.run(first.aclose())

        limit = per_turn * 1.5  # room for two turns to start, not three
        retry = Run("budget", str(tmp_path), upstreams=upstreams, max_cost_usd=limit)
        assert asyncio.run(ask(retry, "one")) == "answer one"  # replayed: $0 now, paid by attempt 1
        assert asyncio.run(ask(retry, "two")) == "answer two"  # the run has spent 1 turn: below the limit
        with pytest.raises(openai.APIStatusError) as refused:
            asyncio.run(ask(retry, "three"))  # the run has spent 2 turns (this attempt only 1): refused
        assert refused.value.status_code == 402
        message = str(refused.value)
        assert "maxCostUSD" in message and "over 2 attempt(s)" in message
        assert fake.live_calls() == 2 and retry.counters.model_replayed == 1
        assert retry.accounting.run_live_cost_usd == pytest.approx(2 * per_turn)
        assert retry.accounting.live_cost_usd == pytest.approx(per_turn)
        # Status and `tether status` show the run's total beside the last attempt's.
        write_progress(retry.store, "budget", snapshot(retry, "Failed"))
        usage = snapshot(retry, "Failed").usage.wire()
        assert usage["runLiveCostUSD"] == pytest.approx(2 * per_turn, abs=1e-6)
        assert usage["liveCostUSD"] == pytest.approx(per_turn, abs=1e-6)
        assert status.main(["budget", "--store", str(tmp_path)]) == 0
        shown = capsys.readouterr().out
        assert f"run total over all attempts: ${2 * per_turn:.6f} live" in shown
        assert "last attempt: tokens" in shown and f"cost ${per_turn:.6f} live" in shown
