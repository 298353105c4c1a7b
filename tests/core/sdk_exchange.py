"""A two-turn tool exchange through one real provider SDK, run as its own process by the tests.

    python tests/core/sdk_exchange.py PROTOCOL STREAM(0|1) VIA(proxy|transport) STORE SCOPE FAKE_ORIGIN

Turn 1 asks a question, the fake provider answers with a tool call; turn 2 sends the tool result
back and gets the text. Every response byte the SDK received is hashed (a tap transport sits
between the SDK and whatever carries its traffic). Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import sys

from tether.run import Run
from tether.wire.proxy import shared_proxy
from tether.wire.transport import transports_for

KEY = "sk-secret-DO-NOT-STORE-1234"
PROVIDER = {
    "openai-chat": "openai",
    "openai-responses": "openai",
    "anthropic": "anthropic",
    "gemini": "gemini",
    "mistral-chat": "mistral",
    "mistral-conversations": "mistral",
}
QUESTION = "What is the weather in Paris?"
#: How the SDK clients are built: ``retries`` the SDK's own retries (0: none), ``timeout`` its
#: request timeout in seconds (None: the SDK's default). Tests set them in-process.
SDK: dict = {"retries": 0, "timeout": None}


def _timeout(scale: float = 1.0) -> dict:
    return {} if SDK["timeout"] is None else {"timeout": SDK["timeout"] * scale}


PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def tap(http, inner, digest):
    """A transport (of the SDK's httpx module) hashing every response byte handed to the SDK."""

    class Stream(http.AsyncByteStream):
        def __init__(self, stream):
            self.stream = stream

        async def __aiter__(self):
            async for chunk in self.stream:
                digest.update(chunk)
                yield chunk

        async def aclose(self):
            await self.stream.aclose()

    class Tap(http.AsyncBaseTransport):
        async def handle_async_request(self, request):
            response = await inner.handle_async_request(request)
            return http.Response(response.status_code, headers=response.headers, stream=Stream(response.stream), request=request)

    return Tap()


async def openai_chat(http, base, stream):
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base + "/v1", api_key=KEY, http_client=http, max_retries=SDK["retries"], **_timeout())
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}]
    messages = [{"role": "user", "content": QUESTION}]

    async def turn():
        if not stream:
            return (await client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)).choices[0].message
        async with client.chat.completions.stream(
            model="gpt-4o-mini", messages=messages, tools=tools, stream_options={"include_usage": True}
        ) as s:
            return (await s.get_final_completion()).choices[0].message

    first = await turn()
    call = first.tool_calls[0]
    messages.append(
        {
            "role": "assistant",
            "tool_calls": [{"id": call.id, "type": "function", "function": {"name": "get_weather", "arguments": call.function.arguments}}],
        }
    )
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
    return (await turn()).content


async def openai_responses(http, base, stream):
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base + "/v1", api_key=KEY, http_client=http, max_retries=SDK["retries"], **_timeout())
    tools = [{"type": "function", "name": "get_weather", "parameters": PARAMS}]
    items: list = [{"role": "user", "content": QUESTION}]

    async def turn():
        if not stream:
            return await client.responses.create(model="gpt-4o-mini", input=items, tools=tools)
        async with client.responses.stream(model="gpt-4o-mini", input=items, tools=tools) as s:
            return await s.get_final_response()

    first = await turn()
    call = next(o for o in first.output if o.type == "function_call")
    items += [
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
    ]
    return (await turn()).output_text


async def anthropic(http, base, stream):
    from anthropic import AsyncAnthropic

    client = AsyncAnthropic(base_url=base, api_key=KEY, http_client=http, max_retries=SDK["retries"], **_timeout())  # an httpx2 client
    tools = [{"name": "get_weather", "input_schema": PARAMS}]
    messages: list = [{"role": "user", "content": QUESTION}]

    async def turn():
        if not stream:
            return await client.messages.create(model="claude-sonnet-4-5", max_tokens=256, messages=messages, tools=tools)
        async with client.messages.stream(model="claude-sonnet-4-5", max_tokens=256, messages=messages, tools=tools) as s:
            return await s.get_final_message()

    first = await turn()
    use = next(b for b in first.content if b.type == "tool_use")
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]},
    ]
    return "".join(b.text for b in (await turn()).content if b.type == "text")


async def gemini(http, base, stream):
    from google import genai
    from google.genai import types

    retry = types.HttpRetryOptions(attempts=1 + SDK["retries"], initial_delay=0.01, max_delay=0.05) if SDK["retries"] else None
    options = types.HttpOptions(base_url=base, httpx_async_client=http, retry_options=retry, **_timeout(1000))  # ms
    client = genai.Client(api_key=KEY, http_options=options)
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(name="get_weather", parameters_json_schema=PARAMS)])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    contents: list = [types.Content(role="user", parts=[types.Part(text=QUESTION)])]

    async def turn():
        if not stream:
            return (
                (await client.aio.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config)).candidates[0].content
            )
        parts = []
        async for chunk in await client.aio.models.generate_content_stream(model="gemini-2.5-flash", contents=contents, config=config):
            if chunk.candidates and chunk.candidates[0].content and chunk.candidates[0].content.parts:
                parts += chunk.candidates[0].content.parts
        return types.Content(role="model", parts=parts)

    first = await turn()
    call = next(p.function_call for p in first.parts if p.function_call)
    contents += [
        first,
        types.Content(
            role="user", parts=[types.Part(function_response=types.FunctionResponse(name=call.name, response={"result": "sunny"}))]
        ),
    ]
    return "".join(p.text or "" for p in (await turn()).parts)


def mistral_client(http, base):
    from mistralai.client import Mistral
    from mistralai.client.utils import BackoffStrategy, RetryConfig

    options: dict = {"timeout_ms": int(SDK["timeout"] * 1000)} if SDK["timeout"] else {}
    if SDK["retries"]:
        options["retry_config"] = RetryConfig("backoff", BackoffStrategy(10, 50, 1.5, 10_000), True)
    return Mistral(api_key=KEY, server_url=base, async_client=http, **options)


async def mistral_chat(http, base, stream):
    client = mistral_client(http, base)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}]
    messages: list = [{"role": "user", "content": QUESTION}]

    async def turn():
        if not stream:
            return (await client.chat.complete_async(model="mistral-small-latest", messages=messages, tools=tools)).choices[0].message
        content, calls = "", {}
        async for event in await client.chat.stream_async(model="mistral-small-latest", messages=messages, tools=tools):
            delta = event.data.choices[0].delta
            content += delta.content or "" if isinstance(delta.content, str) or delta.content is None else ""
            for c in delta.tool_calls or []:
                calls[c.index or 0] = c
        return type("M", (), {"content": content, "tool_calls": list(calls.values()) or None})()

    first = await turn()
    call = first.tool_calls[0]
    args = call.function.arguments if isinstance(call.function.arguments, str) else json.dumps(call.function.arguments)
    messages += [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": call.id, "type": "function", "function": {"name": "get_weather", "arguments": args}}],
        },
        {"role": "tool", "tool_call_id": call.id, "name": "get_weather", "content": "sunny"},
    ]
    return (await turn()).content


async def mistral_conversations(http, base, stream):
    from mistralai.client import Mistral

    client = Mistral(api_key=KEY, server_url=base, async_client=http)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}]
    first = await client.beta.conversations.start_async(model="mistral-small-latest", inputs=QUESTION, tools=tools)
    call = next(o for o in first.outputs if o.type == "function.call")
    result = {"type": "function.result", "tool_call_id": call.tool_call_id, "result": "sunny"}
    second = await client.beta.conversations.append_async(conversation_id=first.conversation_id, inputs=[result])
    return "".join(o.content if isinstance(o.content, str) else "" for o in second.outputs if o.type == "message.output")


EXCHANGES = {
    "openai-chat": openai_chat,
    "openai-responses": openai_responses,
    "anthropic": anthropic,
    "gemini": gemini,
    "mistral-chat": mistral_chat,
    "mistral-conversations": mistral_conversations,
}


def connect(run: Run, protocol: str, via: str, digest=None):
    """``(http client, base URL)`` for ``protocol``'s SDK into ``run``, through the proxy or the
    in-process transport; ``digest`` (a hashlib object) gets every response byte the SDK received."""
    provider = PROVIDER[protocol]
    http_module = importlib.import_module("httpx2" if provider == "anthropic" else "httpx")
    if via == "proxy":
        base, inner = shared_proxy().base_url(run, provider), http_module.AsyncHTTPTransport()
    else:
        base, inner = run.upstreams[provider], transports_for(http_module)[0](provider, run)
    transport = tap(http_module, inner, digest) if digest is not None else inner
    return http_module.AsyncClient(transport=transport, timeout=30), base


async def main(protocol: str, stream: bool, via: str, store: str, scope: str, origin: str) -> dict:
    provider = PROVIDER[protocol]
    run = Run(scope, store, upstreams={provider: f"{origin}/{provider}"})
    digest = hashlib.sha256()
    http, base = connect(run, protocol, via, digest)
    with run.activate():
        answer = await EXCHANGES[protocol](http, base, stream)
    await run.aclose()
    c = run.counters
    return {
        "answer": answer,
        "digest": digest.hexdigest(),
        "model_live": c.model_live,
        "model_replayed": c.model_replayed,
        "attempt": run.attempt,
        "usage_live": run.accounting.live.total,
        "usage_replayed": run.accounting.replayed.total,
    }


if __name__ == "__main__":
    protocol, stream, via, store, scope, origin = sys.argv[1:7]
    print(json.dumps(asyncio.run(main(protocol, stream == "1", via, store, scope, origin))))
