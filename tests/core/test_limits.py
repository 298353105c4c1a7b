"""Run limits: a cost limit refuses further live turns with a clear, terminal error."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from tether.entrypoint import EXIT_TERMINAL, classify_exception
from tether.errors import LimitExceeded
from tether.run import Run
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script
from tether.wire.transport import AsyncWireTransport


def test_cost_limit_refuses_the_next_live_turn_and_replays_stay_free(tmp_path):
    with FakeProvider(Script.text("hello")) as fake:

        async def ask(run: Run) -> str:
            client = openai.AsyncOpenAI(
                base_url=run.upstreams["openai"] + "/v1",
                api_key="k",
                http_client=httpx.AsyncClient(transport=AsyncWireTransport("openai", run)),
                max_retries=0,
            )
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
