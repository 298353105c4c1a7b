"""The Pydantic AI adapter against the fake provider over real HTTP: declarative and bring-your-own
agents, every provider, streaming, memory as message history, tool errors, approvals, delegation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest
from pydantic_ai import Agent, BinaryContent
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
from pydantic_ai.providers.openai import OpenAIProvider

from tests.support.adapter_tests import records
from tether import tool
from tether.approvals import decide, list_approvals
from tether.errors import ConfigError
from tether.stores import open_store
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script
from tether.wire.providers import API_KEY_ENV, PROVIDERS
from tether_pydantic_ai import pydantic_tool, run_agent
from tether_pydantic_ai.memory import dump, load

EXECUTED: list[str] = []


@tool
async def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    EXECUTED.append(f"get_weather:{city}")
    return f"The weather in {city} is sunny, 21 C."


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    EXECUTED.append(f"lookup:{topic}")
    return f"{topic} has two million people."


@tool
def broken(reason: str) -> str:
    """Always fails."""
    EXECUTED.append(f"broken:{reason}")
    raise RuntimeError(f"backend down ({reason})")


@tool(approval=True)
def refund(order: str) -> str:
    """Refund an order."""
    EXECUTED.append(f"refund:{order}")
    return f"Refunded {order}."


TOOLS = [get_weather, lookup, broken, refund]

SCRIPT = {
    "conversations": [
        {
            "match": "multi:",
            "turns": [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                {"tool_calls": [{"name": "lookup", "arguments": {"topic": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Answer:"},
            ],
        },
        {"match": "remember:", "turns": [{"text": "Noted, Ada."}]},
        {
            "match": "broken:",
            "turns": [
                {"tool_calls": [{"name": "broken", "arguments": {"reason": "x"}}]},
                {"text_from_tool_results": True, "text": "Tool said:"},
            ],
        },
        {
            "match": "parallel:",
            "turns": [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Rome"}}, {"name": "refund", "arguments": {"order": "A1"}}]},
                {"text_from_tool_results": True, "text": "Done:"},
            ],
        },
        {
            "match": "delegate:",
            "turns": [
                {"tool_calls": [{"name": "ask_weather_agent", "arguments": {"question": "Weather in Paris?"}}]},
                {"text_from_tool_results": True, "text": "Coordinator:"},
            ],
        },
        {
            "match": "",
            "turns": [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Done:"},
            ],
        },
    ]
}


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    for env in API_KEY_ENV.values():
        monkeypatch.setenv(env, "sk-test")
    EXECUTED.clear()


@pytest.fixture
def fake():
    with FakeProvider(Script.from_dict(SCRIPT), seed=3) as provider:
        yield provider


@pytest.fixture
def opts(fake, tmp_path):
    class Options:
        """``opts(run_id, **extra)``: run_agent's keyword arguments; ``opts.store``: the store."""

        store = str(tmp_path / "store")

        def __call__(self, run_id: str, **extra):
            return dict(store=self.store, run_id=run_id, upstreams={p: f"{fake.url}/{p}" for p in PROVIDERS}, **extra)

    return Options()


# -- declarative ------------------------------------------------------------------------------


async def test_declarative_run_records_turns_and_tools_then_replays(fake, opts):
    first = await run_agent("multi: weather and facts", model="gpt-4o-mini", tools=TOOLS, **opts("r1"))
    assert first.status == "succeeded"
    assert (first.model_live, first.tool_live) == (3, 2)
    assert fake.live_calls("openai-responses") == 3
    assert EXECUTED == ["get_weather:Paris", "lookup:Paris"]
    assert "two million" in (first.output or "")

    again = await run_agent("multi: weather and facts", model="gpt-4o-mini", tools=TOOLS, **opts("r1"))
    assert (again.model_live, again.model_replayed, again.tool_replayed) == (0, 3, 2)
    assert fake.live_calls() == 3  # no new upstream call
    assert EXECUTED == ["get_weather:Paris", "lookup:Paris"]  # no tool ran again
    assert again.output == first.output


@pytest.mark.parametrize(
    ("model", "protocol"),
    [
        ("openai:gpt-4o-mini", "openai-responses"),
        ("openai-chat:gpt-4o-mini", "openai-chat"),
        ("anthropic:claude-sonnet-4-5", "anthropic"),
        ("google:gemini-2.5-flash", "gemini"),
        ("gemini-2.5-flash", "gemini"),
        ("mistral:mistral-small-latest", "mistral-chat"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_every_provider_goes_through_the_seam_and_replays(fake, opts, model, protocol, stream):
    first = await run_agent("weather please", model=model, tools=[get_weather], stream=stream, **opts("p"))
    assert first.status == "succeeded" and first.model_live == 2 and "sunny" in (first.output or "")
    assert fake.live_calls(protocol) == 2 == fake.live_calls()
    again = await run_agent("weather please", model=model, tools=[get_weather], stream=stream, **opts("p"))
    assert again.model_replayed == 2 and again.output == first.output
    assert fake.live_calls() == 2


async def test_streamed_run_is_recorded_as_streams_and_replays(fake, opts):
    first = await run_agent("multi: go", model="gpt-4o-mini", tools=TOOLS, stream=True, **opts("s"))
    assert [e.streamed for e in fake.ledger] == [True, True, True]
    assert all(r.response["streamed"] for r in records(opts.store, "s"))
    again = await run_agent("multi: go", model="gpt-4o-mini", tools=TOOLS, stream=True, **opts("s"))
    assert fake.live_calls() == 3 and again.model_replayed == 3 and again.output == first.output


async def test_wire_bodies_carry_no_framework_ids_or_timestamps(fake, opts):
    await run_agent("multi: go", model="gpt-4o-mini", tools=TOOLS, **opts("w"))
    bodies = [json.dumps(r.request["body"]) for r in records(opts.store, "w")]
    assert len(bodies) == 3
    for body in bodies:
        assert "timestamp" not in body and "run_id" not in body and "pyd_ai" not in body


async def test_terminal_tool_error_is_tool_failed_the_model_sees(fake, opts):
    result = await run_agent("broken: try", model="gpt-4o-mini", tools=TOOLS, **opts("b"))
    assert result.status == "succeeded" and "backend down (x)" in (result.output or "")
    second = json.dumps(records(opts.store, "b")[1].request)
    assert "RuntimeError: backend down (x)" in second
    assert "Fix the errors and try again" not in second  # not a ModelRetry: the model is not asked to retry
    again = await run_agent("broken: try", model="gpt-4o-mini", tools=TOOLS, **opts("b"))
    assert again.output == result.output and EXECUTED == ["broken:x"]


async def test_approval_in_parallel_tool_calls_suspends_then_completes(fake, opts):
    first = await run_agent("parallel: weather and refund", model="gpt-4o-mini", tools=TOOLS, **opts("a"))
    assert first.status == "suspended" and first.pending_approval
    assert "refund:A1" not in EXECUTED
    [request] = list_approvals(open_store(opts.store), "a")
    decide(open_store(opts.store), "a", request["id"], True, by="test")
    done = await run_agent("parallel: weather and refund", model="gpt-4o-mini", tools=TOOLS, **opts("a"))
    assert done.status == "succeeded" and done.output is not None and "Refunded A1." in done.output and "sunny" in done.output
    assert EXECUTED.count("refund:A1") == 1 and EXECUTED.count("get_weather:Rome") == 1


async def test_max_turns_is_a_request_limit(fake, opts):
    with pytest.raises(UsageLimitExceeded):
        await run_agent("multi: go", model="gpt-4o-mini", tools=TOOLS, max_turns=1, **opts("m"))


# -- memory -----------------------------------------------------------------------------------


async def test_memory_is_the_message_history(fake, opts):
    first = await run_agent("remember: my name is Ada", model="gpt-4o-mini", memory_key="ada", **opts("m1"))
    assert first.output == "Noted, Ada."
    second = await run_agent("what is my name?", model="gpt-4o-mini", tools=[get_weather], memory_key="ada", **opts("m2"))
    assert second.status == "succeeded"
    sent = records(opts.store, "m2")[0].request["body"]["input"]
    assert [m.get("role") for m in sent[:3]] == ["user", "assistant", "user"]
    assert "remember: my name is Ada" in json.dumps(sent[0]) and "Noted, Ada." in json.dumps(sent[1])

    # The segments are Pydantic AI messages; a retry of the second run adds nothing twice.
    await run_agent("what is my name?", model="gpt-4o-mini", tools=[get_weather], memory_key="ada", **opts("m2"))
    store = open_store(opts.store)
    items = []
    for k in store.list("memory/default/ada/segments/"):
        segment = store.get(k)
        assert segment is not None
        items += json.loads(segment)
    messages = load(items)
    prompts = [cast(str, p.content) for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)]
    assert sorted(prompts) == ["remember: my name is Ada", "what is my name?"]
    assert isinstance(messages[-1], ModelResponse)


def test_message_items_round_trip_binary_content():
    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(content=["look", BinaryContent(data=b"\x89PNG\x00\xff", media_type="image/png")])]),
        ModelResponse(parts=[TextPart(content="a picture")]),
    ]
    items = dump(messages)
    assert json.loads(json.dumps(items)) == items
    back = load(items)
    request = back[0]
    assert isinstance(request, ModelRequest)
    prompt = request.parts[0]
    assert isinstance(prompt, UserPromptPart) and not isinstance(prompt.content, str)
    picture = prompt.content[1]
    assert isinstance(picture, BinaryContent) and picture.data == b"\x89PNG\x00\xff"
    assert dump(back) == items


# -- bring your own ---------------------------------------------------------------------------


async def test_byo_agent_object_is_routed_and_left_as_it_was(fake, opts):
    import pai_byo_agents

    agent = pai_byo_agents.agent
    model = agent.model
    assert isinstance(model, Model)
    base_url = model.base_url
    first = await run_agent("weather please", agent=agent, **opts("o"))
    assert first.status == "succeeded" and "sunny" in (first.output or "")
    assert fake.live_calls("openai-responses") == 2
    assert agent.model is model and agent.model.base_url == base_url  # override undone, model untouched
    again = await run_agent("weather please", agent=agent, **opts("o"))
    assert again.model_replayed == 2 and fake.live_calls() == 2 and again.output == first.output


@pytest.mark.parametrize(
    ("path", "protocol"),
    [
        ("pai_byo_agents:agent", "openai-responses"),
        ("pai_byo_agents:chat_agent", "openai-chat"),
        ("pai_byo_agents:make_agent", "mistral-chat"),
    ],
)
async def test_byo_import_path(fake, opts, path, protocol):
    result = await run_agent("weather please", agent=path, **opts("i"))
    assert result.status == "succeeded" and result.model_live == 2
    assert fake.live_calls(protocol) == 2 == fake.live_calls()


async def test_byo_delegation_routes_both_agents(fake, opts):
    import pai_byo_agents

    sub_model = pai_byo_agents.weather_agent.model
    first = await run_agent("delegate: ask about Paris", agent="pai_byo_agents:coordinator", **opts("d"))
    assert first.status == "succeeded" and "sunny" in (first.output or "")
    assert fake.live_calls("openai-responses") == 2 and fake.live_calls("anthropic") == 2
    assert pai_byo_agents.weather_agent.model is sub_model
    again = await run_agent("delegate: ask about Paris", agent="pai_byo_agents:coordinator", **opts("d"))
    assert (again.model_live, again.model_replayed) == (0, 4) and again.output == first.output
    assert fake.live_calls() == 4


async def test_byo_model_object_keeps_its_settings(fake, opts):
    own = OpenAIResponsesModel("gpt-4o-mini", provider=OpenAIProvider(api_key="sk-own"), settings={"temperature": 0.25})
    agent = Agent(own, tools=[pydantic_tool(get_weather)])
    await run_agent("weather please", agent=agent, **opts("k"))
    assert [r.request["body"]["temperature"] for r in records(opts.store, "k")] == [0.25, 0.25]
    assert agent.model is own and "api.openai.com" in own.base_url


async def test_byo_deferred_model_name(fake, opts):
    agent = Agent("openai:gpt-4o-mini", defer_model_check=True, tools=[pydantic_tool(get_weather)])
    result = await run_agent("weather please", agent=agent, **opts("n"))
    assert result.status == "succeeded" and fake.live_calls("openai-responses") == 2
    assert agent.model == "openai:gpt-4o-mini"


async def test_unroutable_provider_is_a_config_error(fake, opts):
    agent = Agent("groq:llama-3.3-70b-versatile", defer_model_check=True)
    with pytest.raises(ConfigError, match="groq"):
        await run_agent("hi", agent=agent, **opts("g"))
    with pytest.raises(ConfigError, match="not a pydantic_ai Agent"):
        await run_agent("hi", agent="pai_byo_agents:get_weather", **opts("g2"))


def _own_model(kind: str):
    """A model built the long way, with credentials given in code rather than the environment."""
    if kind == "openai":
        from openai import AsyncOpenAI

        client = AsyncOpenAI(api_key="sk-own", default_headers={"X-Team": "payments"})
        return OpenAIResponsesModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client)), "openai-responses"
    if kind == "anthropic":
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        return AnthropicModel("claude-sonnet-4-5", provider=AnthropicProvider(api_key="sk-own")), "anthropic"
    if kind == "google":
        from pydantic_ai.models.google import GoogleModel
        from pydantic_ai.providers.google import GoogleProvider

        return GoogleModel("gemini-2.5-flash", provider=GoogleProvider(api_key="own")), "gemini"
    from pydantic_ai.models.mistral import MistralModel
    from pydantic_ai.providers.mistral import MistralProvider

    return MistralModel("mistral-small-latest", provider=MistralProvider(api_key="own")), "mistral-chat"


@pytest.mark.parametrize("kind", ["openai", "anthropic", "google", "mistral"])
async def test_byo_model_keeps_its_own_credentials_and_headers(fake, opts, monkeypatch, kind):
    model, protocol = _own_model(kind)
    for env in (*API_KEY_ENV.values(), "GOOGLE_API_KEY"):
        monkeypatch.delenv(env, raising=False)  # the key can only come from the user's provider
    result = await run_agent("weather please", agent=Agent(model, tools=[pydantic_tool(get_weather)]), **opts(f"own-{kind}"))
    assert result.status == "succeeded" and fake.live_calls(protocol) == 2
    if kind == "openai":
        assert all("x-team" in e.headers for e in fake.ledger)


async def test_websocket_transport_is_refused_not_bypassed(fake, opts):
    agent = Agent("openai:gpt-4o-mini", model_settings=OpenAIResponsesModelSettings(openai_transport="websocket"))
    with pytest.raises(ConfigError, match="websocket"):
        await run_agent("hi", agent=agent, **opts("ws"))
    assert fake.live_calls() == 0


async def test_not_durable_still_goes_to_the_given_upstream(fake, opts):
    result = await run_agent("weather please", model="gpt-4o-mini", tools=[get_weather], durable=False, **opts("nd"))
    assert result.status == "succeeded" and fake.live_calls() == 2
    assert not (Path(opts.store) / "journal").exists()
