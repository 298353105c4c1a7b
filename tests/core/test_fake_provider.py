"""The fake providers, driven by the real vendor SDKs over real HTTP.

Each SDK gets a small driver that asks the first question and sends tool results back, turning the
SDK's own parsed types into one shape so the behaviour (scripted tool calls, turn index, usage,
faults) is asserted once for every protocol, streamed and not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as gtypes
from mistralai.client import Mistral
from mistralai.client import errors as mistral_errors
from mistralai.client import models as mistral_models

from tether.testing import FakeProvider, Fault, LedgerEntry, Script, fetch_ledger, inject_remote

KEY = "test-key"
WEATHER = "What is the weather in Paris?"
SCRIPT = {
    "conversations": [
        {
            "match": "weather",
            "turns": [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                {"text": "It is sunny in Paris."},
            ],
        },
        {
            "match": "echo",
            "turns": [
                {"tool_calls": [{"name": "lookup", "arguments": {"q": "secret"}}]},
                {"text_from_tool_results": True},
            ],
        },
        {
            "match": "parallel",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "get_weather", "arguments": {"city": "Paris"}},
                        {"name": "get_weather", "arguments": {"city": "Rome"}},
                    ]
                },
                {"text": "Both are sunny."},
            ],
        },
        {
            "match": "mixed",
            "turns": [{"text": "Let me look that up.", "tool_calls": [{"name": "lookup", "arguments": {"q": "mixed"}}]}],
        },
    ]
}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "q": {"type": "string"}}}


@dataclass
class Call:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Usage:
    """Usage as the SDK parsed it; ``input`` counts all prompt tokens, cached included."""

    input: int
    output: int
    cached: int
    cache_write: int = 0


@dataclass
class Answer:
    calls: list[Call]
    text: str | None
    usage: Usage
    state: Any = None  # what the driver needs to continue the conversation


# --- one driver per SDK ---------------------------------------------------------------------------


class OpenAIChatDriver:
    protocol = "openai-chat"

    def __init__(self, p: FakeProvider):
        self.client = openai.OpenAI(base_url=p.base_url("openai"), api_key=KEY, max_retries=0)
        self.tools = [{"type": "function", "function": {"name": n, "parameters": SCHEMA}} for n in ("get_weather", "lookup")]

    def ask(self, question: str, stream: bool) -> Answer:
        return self._turn([{"role": "user", "content": question}], stream)

    def answer(self, previous: Answer, outputs: list[str], stream: bool) -> Answer:
        messages, message = previous.state
        messages = messages + [message.model_dump(exclude_none=True)]
        messages += [{"role": "tool", "tool_call_id": c.id, "content": o} for c, o in zip(previous.calls, outputs, strict=True)]
        return self._turn(messages, stream)

    def _turn(self, messages: list[dict[str, Any]], stream: bool) -> Answer:
        args = dict(model="gpt-4o-mini", messages=messages, tools=self.tools)
        if stream:
            with self.client.chat.completions.stream(**args, stream_options={"include_usage": True}) as s:
                completion = s.get_final_completion()
        else:
            completion = self.client.chat.completions.create(**args)
        message = completion.choices[0].message
        calls = [Call(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or ()]
        assert completion.choices[0].finish_reason == ("tool_calls" if calls else "stop")
        u = completion.usage
        usage = Usage(u.prompt_tokens, u.completion_tokens, u.prompt_tokens_details.cached_tokens)
        return Answer(calls, message.content, usage, (messages, message))


class OpenAIResponsesDriver:
    """Non-streamed turns resend the whole input; streamed ones chain ``previous_response_id``."""

    protocol = "openai-responses"

    def __init__(self, p: FakeProvider):
        self.events: list[str] = []  # event types of the last streamed turn
        self.client = openai.OpenAI(base_url=p.base_url("openai"), api_key=KEY, max_retries=0)
        self.tools = [{"type": "function", "name": n, "parameters": SCHEMA, "strict": False} for n in ("get_weather", "lookup")]

    def ask(self, question: str, stream: bool) -> Answer:
        return self._turn([{"role": "user", "content": question}], None, stream)

    def answer(self, previous: Answer, outputs: list[str], stream: bool) -> Answer:
        items, response = previous.state
        results = [{"type": "function_call_output", "call_id": c.id, "output": o} for c, o in zip(previous.calls, outputs, strict=True)]
        if stream:
            return self._turn(results, response.id, stream)
        history = items + [i.model_dump(exclude_none=True) for i in response.output]
        return self._turn(history + results, None, stream)

    def _turn(self, items: list[dict[str, Any]], previous_id: str | None, stream: bool) -> Answer:
        args: dict[str, Any] = dict(model="gpt-4.1", input=items, tools=self.tools)
        if previous_id:
            args["previous_response_id"] = previous_id
        if stream:
            with self.client.responses.stream(**args) as s:
                self.events = [e.type for e in s]
                response = s.get_final_response()
        else:
            response = self.client.responses.create(**args)
        calls = [Call(i.call_id, i.name, json.loads(i.arguments)) for i in response.output if i.type == "function_call"]
        u = response.usage
        usage = Usage(u.input_tokens, u.output_tokens, u.input_tokens_details.cached_tokens)
        return Answer(calls, response.output_text or None, usage, (items, response))


class AnthropicDriver:
    protocol = "anthropic"

    def __init__(self, p: FakeProvider):
        self.client = anthropic.Anthropic(base_url=p.base_url("anthropic"), api_key=KEY, max_retries=0)
        self.tools = [{"name": n, "description": n, "input_schema": SCHEMA} for n in ("get_weather", "lookup")]

    def ask(self, question: str, stream: bool) -> Answer:
        return self._turn([{"role": "user", "content": question}], stream)

    def answer(self, previous: Answer, outputs: list[str], stream: bool) -> Answer:
        messages, message = previous.state
        blocks = [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in previous.calls]
        results = [{"type": "tool_result", "tool_use_id": c.id, "content": o} for c, o in zip(previous.calls, outputs, strict=True)]
        return self._turn(messages + [{"role": "assistant", "content": blocks}, {"role": "user", "content": results}], stream)

    def _turn(self, messages: list[dict[str, Any]], stream: bool) -> Answer:
        args = dict(model="claude-sonnet-4-5", max_tokens=256, messages=messages, tools=self.tools)
        if stream:
            with self.client.messages.stream(**args) as s:
                message = s.get_final_message()
        else:
            message = self.client.messages.create(**args)
        calls = [Call(b.id, b.name, dict(b.input)) for b in message.content if isinstance(b, anthropic.types.ToolUseBlock)]
        text = "".join(b.text for b in message.content if isinstance(b, anthropic.types.TextBlock)) or None
        assert message.stop_reason == ("tool_use" if calls else "end_turn")
        u = message.usage
        total_input = u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
        usage = Usage(total_input, u.output_tokens, u.cache_read_input_tokens, u.cache_creation_input_tokens)
        return Answer(calls, text, usage, (messages, message))


class GeminiDriver:
    protocol = "gemini"

    def __init__(self, p: FakeProvider):
        options = gtypes.HttpOptions(base_url=p.base_url("gemini"), api_version="v1beta")
        self.client = genai.Client(api_key=KEY, http_options=options)
        declarations = [gtypes.FunctionDeclaration(name=n, parameters_json_schema=SCHEMA) for n in ("get_weather", "lookup")]
        self.config = gtypes.GenerateContentConfig(tools=[gtypes.Tool(function_declarations=declarations)])

    def ask(self, question: str, stream: bool) -> Answer:
        return self._turn([gtypes.Content(role="user", parts=[gtypes.Part(text=question)])], stream)

    def answer(self, previous: Answer, outputs: list[str], stream: bool) -> Answer:
        contents, model_content = previous.state
        parts = [
            gtypes.Part(function_response=gtypes.FunctionResponse(id=c.id, name=c.name, response={"result": o}))
            for c, o in zip(previous.calls, outputs, strict=True)
        ]
        return self._turn(contents + [model_content, gtypes.Content(role="user", parts=parts)], stream)

    def _turn(self, contents: list[gtypes.Content], stream: bool) -> Answer:
        args = dict(model="gemini-2.5-flash", contents=contents, config=self.config)
        chunks = list(self.client.models.generate_content_stream(**args)) if stream else [self.client.models.generate_content(**args)]
        parts = [p for c in chunks for p in c.candidates[0].content.parts or ()]
        calls = [Call(p.function_call.id, p.function_call.name, dict(p.function_call.args)) for p in parts if p.function_call]
        text = "".join(p.text for p in parts if p.text) or None
        u = chunks[-1].usage_metadata  # streamed: the last chunk carries the complete usage
        usage = Usage(u.prompt_token_count, u.candidates_token_count, u.cached_content_token_count or 0)
        return Answer(calls, text, usage, (contents, gtypes.Content(role="model", parts=parts)))


class MistralChatDriver:
    protocol = "mistral-chat"

    def __init__(self, p: FakeProvider):
        self.client = Mistral(api_key=KEY, server_url=p.base_url("mistral"))
        self.tools = [{"type": "function", "function": {"name": n, "parameters": SCHEMA}} for n in ("get_weather", "lookup")]

    def ask(self, question: str, stream: bool) -> Answer:
        return self._turn([{"role": "user", "content": question}], stream)

    def answer(self, previous: Answer, outputs: list[str], stream: bool) -> Answer:
        messages = previous.state
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in previous.calls
        ]
        messages = messages + [{"role": "assistant", "content": "", "tool_calls": calls}]
        messages += [
            {"role": "tool", "tool_call_id": c.id, "name": c.name, "content": o} for c, o in zip(previous.calls, outputs, strict=True)
        ]
        return self._turn(messages, stream)

    def _turn(self, messages: list[dict[str, Any]], stream: bool) -> Answer:
        args = dict(model="mistral-small-latest", messages=messages, tools=self.tools)
        if stream:
            chunks = [event.data for event in self.client.chat.stream(**args)]
            assert all(isinstance(c, mistral_models.CompletionChunk) for c in chunks)
            deltas = [c.choices[0].delta for c in chunks]
            tool_calls = [t for d in deltas for t in d.tool_calls or ()]
            text = "".join(d.content for d in deltas if isinstance(d.content, str)) or None
            u = chunks[-1].usage
        else:
            response = self.client.chat.complete(**args)
            assert isinstance(response, mistral_models.ChatCompletionResponse)
            message = response.choices[0].message
            tool_calls, text, u = message.tool_calls or [], message.content or None, response.usage
        calls = [Call(t.id, t.function.name, _arguments(t.function.arguments)) for t in tool_calls]
        usage = Usage(u.prompt_tokens, u.completion_tokens, u.prompt_tokens_details["cached_tokens"])
        return Answer(calls, text, usage, messages)


class MistralConversationsDriver:
    protocol = "mistral-conversations"

    def __init__(self, p: FakeProvider):
        self.conversations = Mistral(api_key=KEY, server_url=p.base_url("mistral")).beta.conversations
        self.tools = [
            {"type": "function", "function": {"name": n, "description": n, "parameters": SCHEMA}} for n in ("get_weather", "lookup")
        ]

    def ask(self, question: str, stream: bool) -> Answer:
        args = dict(model="mistral-medium-latest", inputs=question, tools=self.tools)
        if stream:
            return self._from_events(self.conversations.start_stream(**args), None)
        return self._from_response(self.conversations.start(**args))

    def answer(self, previous: Answer, outputs: list[str], stream: bool) -> Answer:
        results = [{"type": "function.result", "tool_call_id": c.id, "result": o} for c, o in zip(previous.calls, outputs, strict=True)]
        args = dict(conversation_id=previous.state, inputs=results)
        if stream:
            return self._from_events(self.conversations.append_stream(**args), previous.state)
        return self._from_response(self.conversations.append(**args))

    def _from_response(self, response: mistral_models.ConversationResponse) -> Answer:
        calls = [
            Call(o.tool_call_id, o.name, _arguments(o.arguments))
            for o in response.outputs
            if isinstance(o, mistral_models.FunctionCallEntry)
        ]
        texts = [o.content for o in response.outputs if isinstance(o, mistral_models.MessageOutputEntry)]
        u = response.usage
        usage = Usage(u.prompt_tokens, u.completion_tokens, 0)
        return Answer(calls, "".join(texts) or None, usage, response.conversation_id)

    def _from_events(self, stream: Any, conversation_id: str | None) -> Answer:
        data = [event.data for event in stream]
        assert data[0].type == "conversation.response.started" and data[-1].type == "conversation.response.done"
        arguments: dict[str, tuple[str, str]] = {}
        for d in data:
            if isinstance(d, mistral_models.FunctionCallEvent):
                name, so_far = arguments.get(d.tool_call_id, (d.name, ""))
                arguments[d.tool_call_id] = (name, so_far + d.arguments)
        calls = [Call(i, name, json.loads(a)) for i, (name, a) in arguments.items()]
        text = "".join(d.content for d in data if isinstance(d, mistral_models.MessageOutputEvent)) or None
        u = data[-1].usage
        return Answer(calls, text, Usage(u.prompt_tokens, u.completion_tokens, 0), conversation_id or data[0].conversation_id)


def _arguments(arguments: Any) -> dict[str, Any]:
    return json.loads(arguments) if isinstance(arguments, str) else dict(arguments)


DRIVERS = [
    OpenAIChatDriver,
    OpenAIResponsesDriver,
    AnthropicDriver,
    GeminiDriver,
    MistralChatDriver,
    MistralConversationsDriver,
]
DRIVER_IDS = [d.protocol for d in DRIVERS]


# --- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def provider():
    with FakeProvider(SCRIPT) as p:
        yield p


@pytest.fixture(autouse=True)
def _fresh(provider):
    provider.reset()
    yield


@pytest.fixture(scope="module")
def drivers(provider):
    return {d.protocol: d(provider) for d in DRIVERS}  # SDK clients are slow to build: share them


@pytest.fixture(params=DRIVER_IDS)
def driver(request, drivers):
    return drivers[request.param]


def expected_usage(entry: LedgerEntry, generated: str, cache_writes: bool) -> Usage:
    """What the documented formula gives for this ledger entry (independent of the server code)."""
    n = entry.body_bytes
    first = entry.turn == 0
    return Usage(
        input=max(1, n // 4),
        output=len(generated) // 4 + 1,
        cached=0 if first else n // 8,
        cache_write=max(1, n // 8) if first and cache_writes else 0,
    )


def generated_text(answer: Answer) -> str:
    return (answer.text or "") + "".join(json.dumps(c.arguments, separators=(",", ":")) for c in answer.calls)


# --- the two-turn tool exchange, every protocol, streamed and not ---------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_two_turn_tool_exchange(provider, driver, stream):
    first = driver.ask(WEATHER, stream)
    assert [(c.name, c.arguments) for c in first.calls] == [("get_weather", {"city": "Paris"})]
    assert first.calls[0].id

    second = driver.answer(first, ["22C and sunny"], stream)
    assert second.calls == []
    assert second.text == "It is sunny in Paris."

    entries = provider.ledger.snapshot()
    assert [(e.protocol, e.streamed, e.status, e.fault, e.turn) for e in entries] == [
        (driver.protocol, stream, 200, None, 0),
        (driver.protocol, stream, 200, None, 1),
    ]
    assert provider.live_calls() == provider.live_calls(driver.protocol) == 2
    cache_writes = driver.protocol == "anthropic"
    for answer, entry in zip((first, second), entries, strict=True):
        expected = expected_usage(entry, generated_text(answer), cache_writes)
        if driver.protocol == "mistral-conversations":
            expected.cached = 0  # the conversations SDK model has no field for cached tokens
        assert answer.usage == expected
        cached = 0 if entry.turn == 0 else entry.body_bytes // 8
        assert entry.usage == {  # normalised: input_tokens are the uncached ones
            "input_tokens": expected.input - cached - expected.cache_write,
            "output_tokens": expected.output,
            "cached_input_tokens": cached,
            "cache_write_tokens": expected.cache_write,
        }
    if cache_writes:
        assert first.usage.cache_write > 0 and second.usage.cached > 0


def test_responses_stream_sends_the_typed_event_sequence(provider):
    driver = OpenAIResponsesDriver(provider)
    driver.ask(WEATHER, stream=True)
    assert driver.events[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert driver.events[-1] == "response.completed"
    assert {
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    } <= set(driver.events)
    driver.answer(driver.ask(WEATHER, stream=True), ["22C"], stream=True)
    for kind in ("response.content_part.added", "response.output_text.delta", "response.output_text.done"):
        assert kind in driver.events


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_tool_output_reaches_the_model(provider, driver, stream):
    first = driver.ask("echo this", stream)
    assert [c.name for c in first.calls] == ["lookup"]
    second = driver.answer(first, ["XYZ-42"], stream)
    assert "XYZ-42" in second.text


def test_parallel_tool_calls_are_one_turn(provider, driver):
    first = driver.ask("parallel cities", stream=False)
    assert [c.arguments["city"] for c in first.calls] == ["Paris", "Rome"]
    assert len({c.id for c in first.calls}) == 2
    second = driver.answer(first, ["sunny", "sunny too"], stream=False)
    assert second.text == "Both are sunny."
    assert [e.turn for e in provider.ledger] == [0, 1]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_text_and_tool_calls_in_one_turn(provider, driver, stream):
    answer = driver.ask("mixed", stream)
    assert answer.text == "Let me look that up."
    assert [(c.name, c.arguments) for c in answer.calls] == [("lookup", {"q": "mixed"})]


def test_past_the_last_turn_the_last_turn_repeats(provider):
    client = openai.OpenAI(base_url=provider.base_url("openai"), api_key=KEY, max_retries=0)
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    tool_round = [
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "x"},
    ]
    completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": WEATHER}] + tool_round * 3)
    assert completion.choices[0].message.content == "It is sunny in Paris."
    assert provider.ledger[0].turn == 3


def test_anthropic_beta_query_is_accepted(provider):
    # Older SDKs' beta clients (and Claude Code) add ?beta=true; anthropic 2.x no longer does.
    client = anthropic.Anthropic(base_url=provider.base_url("anthropic"), api_key=KEY, max_retries=0, default_query={"beta": "true"})
    message = client.beta.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": WEATHER}])
    assert message.stop_reason == "tool_use"
    assert provider.ledger[0].query == ("beta",)


def test_gemini_default_api_version_and_key_in_query(provider):
    client = genai.Client(api_key=KEY, http_options=gtypes.HttpOptions(base_url=provider.base_url("gemini")))
    response = client.models.generate_content(model="gemini-2.5-flash", contents=WEATHER)
    assert response.function_calls[0].args == {"city": "Paris"}
    url = provider.base_url("gemini") + "/v1beta/models/gemini-2.5-flash:generateContent"
    raw = httpx.post(url, params={"key": KEY}, json={"contents": [{"role": "user", "parts": [{"text": WEATHER}]}]})
    assert raw.status_code == 200
    assert [e.path.split("/")[2] for e in provider.ledger] == [genai_default_version(), "v1beta"]
    assert "key" in provider.ledger[1].query and "x-goog-api-key" not in provider.ledger[1].headers


def genai_default_version() -> str:
    from google.genai import _api_client

    return _api_client.GOOGLE_AI_API_DEFAULT_VERSION


# --- faults ---------------------------------------------------------------------------------------

RATE_LIMIT = {
    "openai-chat": openai.RateLimitError,
    "openai-responses": openai.RateLimitError,
    "anthropic": anthropic.RateLimitError,
}
BAD_REQUEST = {
    "openai-chat": openai.BadRequestError,
    "openai-responses": openai.BadRequestError,
    "anthropic": anthropic.BadRequestError,
}


def assert_status_error(exc: BaseException, protocol: str, status: int) -> None:
    """Each SDK's own error type for ``status``, with the provider's error body parsed."""
    if protocol == "gemini":
        assert isinstance(exc, genai_errors.ClientError if status < 500 else genai_errors.ServerError)
        assert exc.code == status and exc.status in (
            "RESOURCE_EXHAUSTED",
            "INVALID_ARGUMENT",
            "UNAUTHENTICATED",
            "INTERNAL",
        )
    elif protocol.startswith("mistral"):
        assert isinstance(exc, mistral_errors.SDKError) and exc.status_code == status
        assert json.loads(exc.body)["object"] == "error"
    else:
        expected = {429: RATE_LIMIT, 400: BAD_REQUEST}.get(status)
        assert isinstance(exc, expected[protocol] if expected else (openai.APIStatusError, anthropic.APIStatusError))
        assert exc.status_code == status


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("status", [429, 400, 500])
def test_status_fault_raises_the_sdk_error_type(provider, driver, status, stream):
    provider.inject(Fault(f"status:{status}", match_protocol=driver.protocol))
    with pytest.raises(Exception) as info:
        driver.ask(WEATHER, stream)
    assert_status_error(info.value, driver.protocol, status)
    # The fault was used up: the same call now succeeds.
    assert driver.ask(WEATHER, stream).calls[0].name == "get_weather"
    assert [(e.status, e.fault) for e in provider.ledger] == [(status, f"status:{status}"), (200, None)]
    assert provider.live_calls() == 1


def assert_connection_error(exc: BaseException, protocol: str) -> None:
    """openai wraps transport errors in APIConnectionError (anthropic too, except mid-stream);
    google-genai and mistralai let the HTTP client's own transport error through."""
    import httpx2  # the HTTP client these SDK versions are built on

    if protocol.startswith("openai"):
        assert isinstance(exc, openai.APIConnectionError)
    else:
        assert isinstance(exc, (anthropic.APIConnectionError, httpx2.TransportError, httpx.TransportError))


@pytest.mark.parametrize("stream", [False, True], ids=["before-response", "mid-stream"])
def test_reset_raises_a_connection_error(provider, driver, stream):
    provider.inject(Fault("reset", match_protocol=driver.protocol))
    with pytest.raises(Exception) as info:
        driver.ask(WEATHER, stream)
    assert_connection_error(info.value, driver.protocol)
    [entry] = provider.ledger
    assert (entry.fault, entry.status, entry.live) == ("reset", 200 if stream else 0, False)
    assert provider.live_calls() == 0
    assert driver.ask(WEATHER, stream).calls  # the next call is served normally


def test_reset_mid_stream_delivers_part_of_the_stream_first(provider):
    client = openai.OpenAI(base_url=provider.base_url("openai"), api_key=KEY, max_retries=0)
    provider.inject(Fault("reset"))
    received = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in client.chat.completions.create(model="m", stream=True, messages=[{"role": "user", "content": WEATHER}]):
            received.append(chunk)
    assert received and received[0].choices[0].delta.role == "assistant"
    assert all(c.choices[0].finish_reason is None for c in received)


def test_faults_apply_in_order_to_matching_calls_only(provider):
    provider.inject(Fault("status:500", times=2, match_protocol="anthropic"), Fault("status:429", match_protocol="openai"))
    chat = OpenAIChatDriver(provider)
    claude = AnthropicDriver(provider)
    with pytest.raises(openai.RateLimitError):
        chat.ask(WEATHER, False)
    assert chat.ask(WEATHER, False).calls
    for _ in range(2):
        with pytest.raises(anthropic.InternalServerError):
            claude.ask(WEATHER, False)
    assert claude.ask(WEATHER, False).calls
    assert provider.live_calls("openai") == provider.live_calls("anthropic") == 1


def test_a_fault_after_n_calls_lets_them_through_first(provider):
    """``after``: the fault is for a later call, counted as calls arrive (not as steps land)."""
    provider.inject(Fault("status:500", after=2, match_protocol="openai"))
    chat, claude = OpenAIChatDriver(provider), AnthropicDriver(provider)
    assert chat.ask(WEATHER, False).calls and claude.ask(WEATHER, False).calls and chat.ask(WEATHER, False).calls
    with pytest.raises(openai.InternalServerError):
        chat.ask(WEATHER, False)
    assert chat.ask(WEATHER, False).calls
    assert [e.status for e in provider.ledger] == [200, 200, 200, 500, 200]


def test_sdk_retries_see_the_faults_in_turn(provider):
    client = openai.OpenAI(base_url=provider.base_url("openai"), api_key=KEY, max_retries=2)
    provider.inject(Fault("status:429"), Fault("status:503"))
    completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": WEATHER}])
    assert completion.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert [(e.status, e.live) for e in provider.ledger] == [(429, False), (503, False), (200, True)]


def test_latency_is_honoured():
    with FakeProvider(SCRIPT, latency=0.3) as p:
        start = time.monotonic()
        OpenAIChatDriver(p).ask(WEATHER, stream=False)
        assert time.monotonic() - start >= 0.3


def test_slow_first_byte_delays_but_answers(provider):
    provider.inject(Fault("slow_first_byte:0.3"))
    start = time.monotonic()
    answer = AnthropicDriver(provider).ask(WEATHER, stream=True)
    assert time.monotonic() - start >= 0.3
    assert answer.calls
    assert provider.ledger[0].fault == "slow_first_byte:0.3" and provider.live_calls() == 1


def test_a_held_back_answer_whose_caller_hung_up_is_not_answered(provider):
    """A caller killed while its answer is held back (a test killing a process mid-turn) was not
    answered: the call is in the ledger but not live; a fault never taken can be dropped."""
    provider.inject(Fault("slow_first_byte:0.5"), Fault("status:500", after=5))
    path, body = NO_KEY_REQUESTS["openai-chat"]
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(provider.url + path, json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=0.1)
    deadline = time.monotonic() + 5
    while not provider.ledger and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [(e.status, e.fault, e.live) for e in provider.ledger] == [(0, "slow_first_byte:0.5", False)]
    provider.clear_faults()
    assert OpenAIChatDriver(provider).ask(WEATHER, stream=False).calls  # the 500 was dropped
    assert provider.live_calls() == 1


# --- credentials ----------------------------------------------------------------------------------

NO_KEY_REQUESTS = {
    "openai-chat": ("/openai/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    "openai-responses": ("/openai/v1/responses", {"model": "m", "input": "hi"}),
    "anthropic": (
        "/anthropic/v1/messages",
        {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "gemini": ("/gemini/v1beta/models/m:generateContent", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
    "mistral-chat": ("/mistral/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    "mistral-conversations": ("/mistral/v1/conversations", {"model": "m", "inputs": "hi"}),
}


@pytest.mark.parametrize("protocol", list(NO_KEY_REQUESTS))
def test_request_without_a_key_gets_401_in_the_provider_shape(provider, protocol):
    path, body = NO_KEY_REQUESTS[protocol]
    response = httpx.post(provider.url + path, json=body)
    assert response.status_code == 401
    error = response.json()
    if protocol == "anthropic":
        assert error["type"] == "error" and error["error"]["type"] == "authentication_error"
    elif protocol == "gemini":
        assert error["error"]["status"] == "UNAUTHENTICATED"
    elif protocol.startswith("mistral"):
        assert error["object"] == "error"
    else:
        assert error["error"]["code"] == "invalid_api_key"
    assert [(e.status, e.live, e.turn) for e in provider.ledger] == [(401, False, None)]
    assert "authorization" not in provider.ledger[0].headers


def test_sdk_without_a_key_gets_its_authentication_error(provider):
    client = openai.OpenAI(base_url=provider.base_url("openai"), api_key=KEY, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        messages = [{"role": "user", "content": WEATHER}]
        client.chat.completions.create(model="m", messages=messages, extra_headers={"Authorization": openai.omit})


# --- ids, determinism -----------------------------------------------------------------------------


def test_tool_call_ids_are_random_unless_seeded(provider):
    def ids(p: FakeProvider) -> list[str]:
        d = OpenAIChatDriver(p)
        return [d.ask(WEATHER, False).calls[0].id for _ in range(2)]

    first, second = ids(provider)
    assert first != second
    assert provider.ledger[0].body_sha256 == provider.ledger[1].body_sha256
    with FakeProvider(SCRIPT, seed=7) as seeded:
        first, second = ids(seeded)
        assert first == second and first.startswith("call_")


def test_unscripted_request_is_a_400(provider):
    with pytest.raises(anthropic.BadRequestError, match="no scripted conversation"):
        AnthropicDriver(provider).ask("tell me a joke", stream=False)
    assert provider.ledger[0].status == 400


def test_previous_response_id_must_exist(provider):
    client = openai.OpenAI(base_url=provider.base_url("openai"), api_key=KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="not found"):
        client.responses.create(model="gpt-4.1", input="hi", previous_response_id="resp_missing")


# --- async clients --------------------------------------------------------------------------------


async def test_async_clients_share_the_threaded_server(provider):
    client = openai.AsyncOpenAI(base_url=provider.base_url("openai"), api_key=KEY, max_retries=0)
    claude = anthropic.AsyncAnthropic(base_url=provider.base_url("anthropic"), api_key=KEY, max_retries=0)
    completion = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": WEATHER}])
    async with claude.messages.stream(model="c", max_tokens=64, messages=[{"role": "user", "content": WEATHER}]) as s:
        message = await s.get_final_message()
    assert completion.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert message.content[0].input == {"city": "Paris"}
    assert provider.live_calls() == 2


# --- control endpoints, scripts, ledger file, separate process ------------------------------------


def test_control_endpoints(provider):
    inject_remote(provider.url, Fault("status:429", match_protocol="mistral"))
    with pytest.raises(mistral_errors.SDKError):
        MistralChatDriver(provider).ask(WEATHER, False)
    [entry] = fetch_ledger(provider.url)
    assert (entry.protocol, entry.status, entry.fault) == ("mistral-chat", 429, "status:429")
    assert httpx.post(provider.url + "/_control/faults", json={"kind": "boom"}).status_code == 400
    httpx.post(provider.url + "/_control/reset").raise_for_status()
    assert fetch_ledger(provider.url) == [] and len(provider.ledger) == 0


def test_openai_models_list(provider):
    client = openai.OpenAI(base_url=provider.base_url("openai"), api_key=KEY, max_retries=0)
    assert "gpt-4o-mini" in [m.id for m in client.models.list()]
    assert len(provider.ledger) == 0  # not a model turn


def test_script_loads_from_yaml_and_json(tmp_path):
    (tmp_path / "s.yaml").write_text(
        "conversations:\n  - match: hi\n    turns:\n      - tool_calls: [{name: t, arguments: {a: 1}}]\n      - text: bye\n"
    )
    (tmp_path / "s.json").write_text(json.dumps(SCRIPT))
    script = Script.from_yaml(tmp_path / "s.yaml")
    conversation = script.conversation_for("oh hi there")
    assert conversation.turn(0).tool_calls[0].arguments == {"a": 1}
    assert conversation.turn(5).text == "bye"
    assert script.conversation_for("unrelated") is None
    assert Script.from_json(tmp_path / "s.json") == Script.from_dict(SCRIPT)
    with pytest.raises(ValueError):
        Script.from_dict({"conversations": [{"match": "x", "turns": [{"txt": "typo"}]}]})
    with pytest.raises(ValueError):
        Fault("explode")


def test_ledger_file_is_appended_per_call(tmp_path):
    path = tmp_path / "ledger.jsonl"
    with FakeProvider(SCRIPT, ledger_path=path) as p:
        driver = GeminiDriver(p)
        driver.answer(driver.ask(WEATHER, True), ["22C"], True)
    lines = [LedgerEntry.from_dict(json.loads(line)) for line in path.read_text().splitlines()]
    assert [(e.protocol, e.turn, e.streamed) for e in lines] == [("gemini", 0, True), ("gemini", 1, True)]
    assert "x-goog-api-key" in lines[0].headers and KEY not in path.read_text()


def test_runs_as_its_own_process(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    ledger = tmp_path / "ledger.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [
        sys.executable,
        "-m",
        "tether.testing.fake_provider",
        "--script",
        str(script),
        "--port",
        "0",
        "--ledger",
        str(ledger),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = process.stdout.readline().strip()
        assert line.startswith("READY http://127.0.0.1:"), process.stderr.read() if not line else line
        url = line.split()[1]
        client = openai.OpenAI(base_url=url + "/openai/v1", api_key=KEY, max_retries=0)
        completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": WEATHER}])
        assert completion.choices[0].message.tool_calls[0].function.arguments == '{"city":"Paris"}'
        assert [e.live for e in fetch_ledger(url)] == [True]
        assert len(ledger.read_text().splitlines()) == 1
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
    assert "Warning" not in process.stderr.read()


def test_a_conversation_can_answer_only_the_agent_whose_instructions_match():
    """Multi-agent runs share the user's question: ``system`` picks the conversation by the asking
    agent's instructions, in every protocol's own place for them."""
    script = {
        "conversations": [
            {"match": "refund", "system": "billing agent", "turns": [{"text": "billing"}]},
            {"match": "refund", "turns": [{"text": "router"}]},
        ]
    }
    question = "Please refund order 7."
    with FakeProvider(script) as p:
        chat = openai.OpenAI(base_url=p.base_url("openai"), api_key=KEY, max_retries=0)
        claude = anthropic.Anthropic(base_url=p.base_url("anthropic"), api_key=KEY, max_retries=0)
        gemini = genai.Client(api_key=KEY, http_options=gtypes.HttpOptions(base_url=p.base_url("gemini")))

        def answers(system: str) -> list[str | None]:
            user = [{"role": "user", "content": question}]
            return [
                chat.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "system", "content": system}, *user])
                .choices[0]
                .message.content,
                chat.responses.create(model="gpt-4o-mini", instructions=system, input=question).output_text,
                claude.messages.create(model="claude-sonnet-4-5", max_tokens=64, system=system, messages=user).content[0].text,
                gemini.models.generate_content(
                    model="gemini-2.5-flash", contents=question, config=gtypes.GenerateContentConfig(system_instruction=system)
                ).text,
            ]

        assert answers("You are the billing agent.") == ["billing"] * 4
        assert answers("You route requests.") == ["router"] * 4
    with pytest.raises(ValueError, match="unknown conversation keys"):
        Script.from_dict({"conversations": [{"match": "x", "sytem": "typo", "turns": [{"text": "t"}]}]})
