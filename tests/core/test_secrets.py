"""API keys never reach the store: not from a header, not from a query string, live or replayed.

The real SDKs send their key the way they do against the real providers (OpenAI, Mistral and
Anthropic 2.x ``Authorization: Bearer``, google-genai ``x-goog-api-key``), and plain REST calls
send Anthropic's ``x-api-key`` header and Gemini's ``?key=``. After a live attempt and a replaying one, every byte of the
store (every file, every S3 object) is read and searched. The fake provider records the credential
values it received, proving the key was forwarded upstream and not merely dropped.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.core import sdk_exchange
from tests.support.s3 import read_all_bytes
from tether.run import Run
from tether.testing import FakeProvider
from tether.wire.proxy import shared_proxy
from tether.wire.transport import AsyncWireTransport

KEY = sdk_exchange.KEY
FRAGMENTS = (KEY.encode(), b"DO-NOT-STORE")
SCRIPT = {
    "conversations": [
        {
            "match": "weather",
            "turns": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}, {"text": "It is sunny in Paris."}],
        }
    ]
}


class SeeingProvider(FakeProvider):
    """A fake provider that also keeps the credential values each model turn arrived with."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.credentials: list[dict[str, str]] = []

    async def _model_turn(self, request, protocol):
        seen = {h: request.headers[h] for h in ("Authorization", "x-api-key", "x-goog-api-key") if h in request.headers}
        if "key" in request.query:
            seen["?key"] = request.query["key"]
        self.credentials.append(seen)
        return await super()._model_turn(request, protocol)


@pytest.fixture
def provider():
    with SeeingProvider(SCRIPT) as p:
        yield p


def assert_no_secret(store_url: str) -> None:
    data = read_all_bytes(store_url)
    assert b"Paris" in data, "the scan found no records: it proves nothing"
    for fragment in FRAGMENTS:
        assert fragment not in data, f"{fragment!r} is stored"


SENT_AS = {
    "openai-chat": ("Authorization", f"Bearer {KEY}"),
    "openai-responses": ("Authorization", f"Bearer {KEY}"),
    "anthropic": ("Authorization", f"Bearer {KEY}"),  # anthropic 2.x sends its key as a bearer token
    "gemini": ("x-goog-api-key", KEY),
    "mistral-chat": ("Authorization", f"Bearer {KEY}"),
}


@pytest.mark.parametrize("via", ["transport", "proxy"])
@pytest.mark.parametrize("protocol", list(SENT_AS))
def test_key_in_a_header_is_never_stored(provider, store_url, protocol, via):
    for attempt in (1, 2):  # live, then replayed
        out = asyncio.run(sdk_exchange.main(protocol, False, via, store_url, f"secret-{protocol}", provider.url))
        assert out["attempt"] == attempt and out["model_live" if attempt == 1 else "model_replayed"] == 2
        assert_no_secret(store_url)
    header, value = SENT_AS[protocol]
    assert len(provider.credentials) == 2, "the replay reached the provider"
    assert all(seen.get(header) == value for seen in provider.credentials), provider.credentials


RAW = {
    # provider, path, query, headers, body, how the provider saw the key
    "anthropic-x-api-key": (
        "anthropic",
        "/v1/messages",
        "",
        {"x-api-key": KEY, "anthropic-version": "2023-06-01"},
        {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "What is the weather in Paris?"}]},
        {"x-api-key": KEY},
    ),
    "gemini-query-key": (
        "gemini",
        "/v1beta/models/gemini-2.5-flash:generateContent",
        f"key={KEY}",
        {},
        {"contents": [{"role": "user", "parts": [{"text": "What is the weather in Paris?"}]}]},
        {"?key": KEY},
    ),
    "gemini-query-key-stream": (
        "gemini",
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        f"alt=sse&key={KEY}",
        {},
        {"contents": [{"role": "user", "parts": [{"text": "What is the weather in Paris?"}]}]},
        {"?key": KEY},
    ),
}


@pytest.mark.parametrize("via", ["transport", "proxy"])
@pytest.mark.parametrize("case", list(RAW))
def test_key_in_x_api_key_or_query_is_never_stored(provider, store_url, case, via):
    name, path, query, headers, body, seen = RAW[case]

    async def call() -> tuple[Run, bytes]:
        run = Run(f"secret-{case}", store_url, upstreams={name: f"{provider.url}/{name}"})
        if via == "proxy":
            base, client = shared_proxy().base_url(run, name), httpx.AsyncClient()
        else:
            base, client = run.upstreams[name], httpx.AsyncClient(transport=AsyncWireTransport(name, run))
        async with client:
            response = await client.post(f"{base}{path}" + (f"?{query}" if query else ""), json=body, headers=headers)
        await run.aclose()
        assert response.status_code == 200, response.text
        return run, response.content

    run, live = asyncio.run(call())
    assert run.counters.model_live == 1
    run, replayed = asyncio.run(call())
    assert run.counters.model_replayed == 1 and replayed == live
    assert provider.credentials == [seen], "the key was not forwarded, or the replay went upstream"
    assert_no_secret(store_url)
