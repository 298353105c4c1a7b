"""Unknown cost is not $0 (README "Cost"): a turn whose usage cannot be read, or whose model is not
in the price table, is counted as unknown in progress, status and the summary; ``maxCostUSD``
fails closed on it unless ``limits.unknownCost: ignore``; a malformed answer never corrupts the
journal. Real SDKs over real HTTP against the fake provider's malformed answers.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest
from pydantic import ValidationError

from tests.core.sdk_exchange import EXCHANGES, PROVIDER, connect
from tether.api import AgentRunSpec, Limits, Usage
from tether.commands import status
from tether.journal import Record, read_records
from tether.progress import ProgressWriter, read_progress, snapshot
from tether.run import Run
from tether.stores import open_store
from tether.testing import FakeProvider, Fault
from tether.wire.transport import AsyncWireTransport

ANSWER = "It is sunny in Paris."
SCRIPT = {
    "conversations": [
        {"match": "weather", "turns": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}, {"text": ANSWER}]},
        {"match": "hello", "turns": [{"text": "hi"}]},
        {"match": "again", "turns": [{"text": "hi again"}]},
    ]
}


@pytest.fixture
def provider():
    with FakeProvider(SCRIPT) as p:
        yield p


def new_run(provider: FakeProvider, store: str, scope: str, **kwargs) -> Run:
    return Run(scope, store, upstreams={"openai": provider.url + "/openai"}, **kwargs)


def ask(run: Run, text: str, model: str = "gpt-4o") -> str:
    async def go() -> str:
        http = httpx.AsyncClient(transport=AsyncWireTransport("openai", run))
        client = openai.AsyncOpenAI(base_url=run.upstreams["openai"] + "/v1", api_key="k", max_retries=0, http_client=http)
        r = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": text}])
        return r.choices[0].message.content or ""

    return asyncio.run(go())


def model_records(store: str, scope: str) -> list[Record | None]:
    return [r for r in read_records(open_store(store), scope) if r.kind == "model"]


# -- the limit fails closed on unknown cost, or open when told -----------------------------------
@pytest.mark.parametrize("why", ["unpriced-model", "no-usage", "garbled-usage"])
def test_cost_limit_refuses_the_turn_after_an_unknown_cost_turn(provider, tmp_path, why):
    store = str(tmp_path / "store")
    model = "my-finetune-7b" if why == "unpriced-model" else "gpt-4o"
    if why != "unpriced-model":
        provider.inject(Fault("malformed:" + ("no-usage" if why == "no-usage" else "usage")))
    run = new_run(provider, store, "u", max_cost_usd=5.0)
    assert ask(run, "hello", model) == "hi"  # the limit is far away: the turn runs, its cost unknown
    assert run.accounting.unknown_cost_live == 1 and run.accounting.live_cost_usd == 0
    with pytest.raises(openai.APIStatusError) as refused:
        ask(run, "again", model)
    assert refused.value.status_code == 402 and "cost of 1 live turn(s) is unknown" in str(refused.value)
    assert run.limit_exceeded and "unknownCost: ignore" in run.limit_exceeded
    assert provider.live_calls() == 1, "a refused turn reached the provider"
    usage = snapshot(run, "Failed").wire()["usage"]
    assert usage["unknownCostTurns"] == 1 and usage["unknownSavedTurns"] == 0
    assert usage["unpricedModels"] == (["my-finetune-7b"] if why == "unpriced-model" else [])

    # The recorded turn replays (free) in the next attempt and still counts as unknown, as saved.
    retry = new_run(provider, store, "u", max_cost_usd=5.0)
    assert ask(retry, "hello", model) == "hi" and retry.counters.model_replayed == 1
    assert (retry.accounting.unknown_cost_live, retry.accounting.unknown_cost_replayed) == (0, 1)


def test_unknown_cost_ignore_fails_open(provider, tmp_path):
    run = new_run(provider, str(tmp_path / "store"), "open", max_cost_usd=5.0, unknown_cost="ignore")
    assert ask(run, "hello", "my-finetune-7b") == "hi"
    assert ask(run, "again", "my-finetune-7b") == "hi again"
    assert run.limit_exceeded is None and run.accounting.unknown_cost_live == 2 and provider.live_calls() == 2


def test_without_a_limit_unknown_cost_is_counted_not_refused(provider, tmp_path):
    run = new_run(provider, str(tmp_path / "store"), "free")
    ask(run, "hello", "my-finetune-7b")
    ask(run, "again", "gpt-4o")  # priced: known cost
    assert run.accounting.unknown_cost_live == 1 and run.accounting.live_cost_usd > 0 and run.limit_exceeded is None


def test_unknown_switch_is_checked(tmp_path):
    with pytest.raises(ValueError, match="unknown_cost"):
        Run("bad", str(tmp_path), unknown_cost="maybe")


# -- a malformed answer never corrupts the journal -----------------------------------------------
def test_answer_that_is_not_json_is_not_recorded_and_counts_as_unknown(provider, tmp_path):
    store = str(tmp_path / "store")
    provider.inject(Fault("malformed:body"))
    run = new_run(provider, store, "garbage", max_cost_usd=5.0)
    with pytest.raises((openai.APIError, ValueError)):  # the SDK cannot parse it
        ask(run, "hello")
    assert model_records(store, "garbage") == [], "a body that is no answer was recorded"
    assert run.accounting.unknown_cost_live == 1, "a paid-for answer without a readable cost must not count as $0"
    with pytest.raises(openai.APIStatusError) as refused:
        ask(run, "hello")  # fail closed: the same attempt may not spend blind
    assert refused.value.status_code == 402

    retry = new_run(provider, store, "garbage")
    assert ask(retry, "hello") == "hi" and retry.counters.model_live == 1
    [record] = model_records(store, "garbage")
    assert record is not None and record.outcome == "ok" and record.usage


PROTOCOLS = ["openai-chat", "openai-responses", "anthropic", "gemini", "mistral-chat"]


@pytest.mark.parametrize("kind", ["malformed:usage", "malformed:no-usage"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_malformed_usage_is_unknown_cost_and_the_record_replays(provider, tmp_path, protocol, kind):
    """Whatever usage a provider sends (missing, strings, negatives, objects), the record is
    intact, the turn's cost is unknown (not $0), and the next attempt replays the same bytes."""
    store = str(tmp_path / "store")
    provider.inject(Fault(kind, match_protocol=protocol))
    p = PROVIDER[protocol]

    def attempt() -> tuple[Run, str]:
        run = Run("m", store, upstreams={p: f"{provider.url}/{p}"})

        async def go() -> str:
            http, base = connect(run, protocol, "transport")
            try:
                with run.activate():
                    return await EXCHANGES[protocol](http, base, False)
            except Exception as e:  # an SDK may refuse garbled usage: then it must refuse it the same way on replay
                return f"error: {type(e).__name__}"
            finally:
                await run.aclose()

        return run, asyncio.run(go())

    first, outcome = attempt()
    recs = model_records(store, "m")
    assert recs and all(r is not None for r in recs), "a malformed answer corrupted the journal"
    assert first.accounting.unknown_cost_live == 1
    calls = len(provider.ledger)
    second, again = attempt()
    assert again == outcome and len(provider.ledger) == calls
    assert second.accounting.unknown_cost_replayed == 1 and second.counters.model_live == 0


# -- shown in status and the summary -------------------------------------------------------------
def test_status_and_api_show_unknown_cost_turns(provider, tmp_path, capsys):
    store = str(tmp_path / "store")
    run = new_run(provider, store, "shown")
    ProgressWriter(run)
    ask(run, "hello", "my-finetune-7b")
    ProgressWriter(run).publish("Succeeded", result="hi")
    progress = read_progress(open_store(store), "shown")
    assert progress is not None
    usage = Usage.model_validate(progress["usage"])  # what the operator mirrors into the AgentRun status
    assert usage.unknown_cost_turns == 1 and usage.wire()["unknownCostTurns"] == 1
    assert status.main(["shown", "--store", store]) == 0
    assert "1 live turn(s) of unknown cost" in capsys.readouterr().out


def test_limits_api_default_is_fail_closed_and_refuses_other_values():
    assert Limits().unknown_cost == "stop"
    assert Limits.model_validate({"maxCostUSD": 1, "unknownCost": "ignore"}).unknown_cost == "ignore"
    with pytest.raises(ValidationError):
        Limits.model_validate({"unknownCost": "maybe"})
    assert "unknownCost" in AgentRunSpec.model_json_schema(by_alias=True)["$defs"]["Limits"]["properties"]


def test_progress_says_when_an_attempt_replayed_its_first_step(provider, tmp_path):
    """firstReplayAt: the operator's kill→first-replay latency ends there (tether_kill_to_first_replay_seconds)."""
    store = str(tmp_path / "store")
    first = new_run(provider, store, "resumed")
    ask(first, "hello")
    assert snapshot(first, "Running").first_replay_at is None  # all live
    second = new_run(provider, store, "resumed")
    before = time.time()
    ask(second, "hello")
    after = time.time()
    progress = snapshot(second, "Succeeded")
    assert progress.steps.model_replayed == 1 and progress.first_replay_at is not None
    assert before <= progress.first_replay_at <= after
    assert progress.wire()["firstReplayAt"] == progress.first_replay_at
