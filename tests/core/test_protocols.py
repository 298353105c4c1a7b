"""Wire protocols: usage read from real-shaped responses, canonical forms, model-turn routing."""

from __future__ import annotations

import json

import pytest

from tether.wire.protocols import ALL, anthropic, find, gemini, mistral, openai_chat, openai_responses
from tether.wire.protocols.base import Usage
from tether.wire.protocols.normalise import NORMALISED

CHAT = openai_chat.PROTOCOL
RESPONSES = openai_responses.PROTOCOL
ANTHROPIC = anthropic.PROTOCOL
GEMINI = gemini.PROTOCOL
MISTRAL_CHAT, MISTRAL_CONV = mistral.CHAT, mistral.CONVERSATIONS


def sse(*events: dict, done: bool = False, sep: str = "\n\n") -> bytes:
    """An SSE body; events with a "type" also get an `event:` line, as Anthropic/OpenAI send them."""
    blocks = [(f"event: {e['type']}\n" if "type" in e else "") + f"data: {json.dumps(e)}" for e in events]
    return (sep.join(blocks + (["data: [DONE]"] if done else [])) + sep).encode()


# ---------------------------------------------------------------- usage

CHAT_JSON = {
    "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
    "object": "chat.completion",
    "created": 1741569952,
    "model": "gpt-4.1-2025-04-14",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Hello!", "refusal": None}, "logprobs": None, "finish_reason": "stop"}
    ],
    "usage": {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 256,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
    "service_tier": "default",
    "system_fingerprint": None,
}
_chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1694268190, "model": "gpt-4o-mini"}
CHAT_SSE = sse(
    {**_chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}], "usage": None},
    {**_chunk, "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}], "usage": None},
    {**_chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": None},
    {
        **_chunk,
        "choices": [],
        "usage": {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29, "prompt_tokens_details": {"cached_tokens": 0}},
    },
    done=True,
)
RESPONSES_JSON = {
    "id": "resp_67ccd2bed1ec8190b14f964abc054267",
    "object": "response",
    "created_at": 1741476542,
    "status": "completed",
    "model": "gpt-4.1-2025-04-14",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hi", "annotations": []}],
        }
    ],
    "usage": {
        "input_tokens": 328,
        "input_tokens_details": {"cached_tokens": 128},
        "output_tokens": 52,
        "output_tokens_details": {"reasoning_tokens": 32},
        "total_tokens": 380,
    },
}
_resp = {"id": "resp_1", "object": "response", "created_at": 1741290958, "model": "gpt-4.1", "output": []}
RESPONSES_SSE = sse(
    {"type": "response.created", "sequence_number": 0, "response": {**_resp, "status": "in_progress", "usage": None}},
    {"type": "response.output_text.delta", "sequence_number": 4, "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "Hi"},
    {
        "type": "response.completed",
        "sequence_number": 7,
        "response": {
            **_resp,
            "status": "completed",
            "usage": {
                "input_tokens": 37,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 11,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 48,
            },
        },
    },
)
ANTHROPIC_JSON = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [{"type": "text", "text": "Hello!"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 12,
        "cache_creation_input_tokens": 2048,
        "cache_read_input_tokens": 4096,
        "cache_creation": {"ephemeral_5m_input_tokens": 2048, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 6,
        "service_tier": "standard",
    },
}
_msg = {
    "id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY",
    "type": "message",
    "role": "assistant",
    "content": [],
    "model": "claude-sonnet-4-5-20250929",
    "stop_reason": None,
    "stop_sequence": None,
}
_anthropic_body = (
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
    {"type": "content_block_stop", "index": 0},
)
ANTHROPIC_SSE = sse(
    {
        "type": "message_start",
        "message": {
            **_msg,
            "usage": {"input_tokens": 25, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1024, "output_tokens": 1},
        },
    },
    *_anthropic_body,
    {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 15}},
    {"type": "message_stop"},
)
# With server tools the final message_delta restates cumulative input/cache counts (null = unknown).
ANTHROPIC_SSE_SERVER_TOOLS = sse(
    {
        "type": "message_start",
        "message": {
            **_msg,
            "usage": {"input_tokens": 2679, "cache_creation_input_tokens": 512, "cache_read_input_tokens": 0, "output_tokens": 3},
        },
    },
    *_anthropic_body,
    {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {
            "input_tokens": 10682,
            "cache_creation_input_tokens": None,
            "cache_read_input_tokens": 1024,
            "output_tokens": 510,
            "server_tool_use": {"web_search_requests": 1},
        },
    },
    {"type": "message_stop"},
)
GEMINI_JSON = {
    "candidates": [{"content": {"parts": [{"text": "AI learns patterns."}], "role": "model"}, "finishReason": "STOP", "index": 0}],
    "usageMetadata": {
        "promptTokenCount": 1200,
        "candidatesTokenCount": 80,
        "totalTokenCount": 1400,
        "cachedContentTokenCount": 1000,
        "thoughtsTokenCount": 120,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 1200}],
    },
    "modelVersion": "gemini-2.5-flash",
    "responseId": "mAitaLmkHPPlz7IPvtfUqQ4",
}
_gem = {"modelVersion": "gemini-2.5-flash", "responseId": "x1"}
GEMINI_SSE = sse(  # Gemini separates SSE events with CRLF
    {
        **_gem,
        "candidates": [{"content": {"parts": [{"text": "The"}], "role": "model"}, "index": 0}],
        "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9},
    },
    {
        **_gem,
        "candidates": [{"content": {"parts": [{"text": " sky"}], "role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 25, "totalTokenCount": 70, "thoughtsTokenCount": 36},
    },
    sep="\r\n\r\n",
)
GEMINI_ARRAY = json.dumps(
    [  # streamGenerateContent without alt=sse: a JSON array of chunks
        {**_gem, "candidates": [{"content": {"parts": [{"text": "Per"}], "role": "model"}, "index": 0}]},
        {
            **_gem,
            "candidates": [{"content": {"parts": [{"text": "is."}], "role": "model"}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 40, "toolUsePromptTokenCount": 150, "totalTokenCount": 210},
        },
    ],
    indent=1,
).encode()
MISTRAL_JSON = {
    "id": "cmpl-e5cc70bb28c444948073e77776eb30ef",
    "object": "chat.completion",
    "model": "mistral-small-latest",
    "created": 1702256327,
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Bonjour"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1013, "completion_tokens": 42, "total_tokens": 1055, "prompt_tokens_details": {"cached_tokens": 1008}},
}
_mchunk = {"id": "f2b6", "object": "chat.completion.chunk", "created": 1702256327, "model": "mistral-small-latest"}
MISTRAL_SSE = sse(
    {**_mchunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
    {
        **_mchunk,
        "choices": [{"index": 0, "delta": {"content": "Bonjour"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "total_tokens": 16, "completion_tokens": 6},
    },
    done=True,
)
MISTRAL_CONV_JSON = {
    "object": "conversation.response",
    "conversation_id": "conv_06835b9dc0c7749180003b1ba5d5ed69",
    "outputs": [
        {
            "object": "entry",
            "type": "message.output",
            "created_at": "2025-05-27T13:38:01.720Z",
            "id": "msg_06835b9dc5c8736b8000a2cb2ce6a7e0",
            "agent_id": None,
            "model": "mistral-medium-2505",
            "role": "assistant",
            "content": "Astronomy is...",
        }
    ],
    "usage": {"prompt_tokens": 9, "completion_tokens": 350, "total_tokens": 359, "connector_tokens": None, "connectors": None},
}
MISTRAL_CONV_SSE = sse(
    {"type": "conversation.response.started", "conversation_id": "conv_0683", "created_at": "2025-05-27T13:38:01Z"},
    {
        "type": "message.output.delta",
        "output_index": 0,
        "id": "msg_0683",
        "content": "Hi",
        "model": "mistral-medium-2505",
        "agent_id": None,
        "role": "assistant",
        "content_index": 0,
        "created_at": "2025-05-27T13:38:01Z",
    },
    {
        "type": "conversation.response.done",
        "created_at": "2025-05-27T13:38:02Z",
        "usage": {"prompt_tokens": 18, "completion_tokens": 5, "total_tokens": 23, "connector_tokens": None, "connectors": None},
    },
)

USAGE_CASES = [
    (CHAT, json.dumps(CHAT_JSON).encode(), False, Usage(86, 300, 1920, 0)),
    (CHAT, CHAT_SSE, True, Usage(19, 10, 0, 0)),
    (RESPONSES, json.dumps(RESPONSES_JSON).encode(), False, Usage(200, 52, 128, 0)),
    (RESPONSES, RESPONSES_SSE, True, Usage(37, 11, 0, 0)),
    (ANTHROPIC, json.dumps(ANTHROPIC_JSON).encode(), False, Usage(12, 6, 4096, 2048)),
    (ANTHROPIC, ANTHROPIC_SSE, True, Usage(25, 15, 1024, 0)),
    (ANTHROPIC, ANTHROPIC_SSE_SERVER_TOOLS, True, Usage(10682, 510, 1024, 512)),
    (GEMINI, json.dumps(GEMINI_JSON).encode(), False, Usage(200, 200, 1000, 0)),
    (GEMINI, GEMINI_SSE, True, Usage(9, 61, 0, 0)),
    (GEMINI, GEMINI_ARRAY, True, Usage(170, 40, 0, 0)),
    (GEMINI, GEMINI_ARRAY, False, Usage(170, 40, 0, 0)),  # served as application/json, so the seam says "not streamed"
    (MISTRAL_CHAT, json.dumps(MISTRAL_JSON).encode(), False, Usage(5, 42, 1008, 0)),
    (MISTRAL_CHAT, MISTRAL_SSE, True, Usage(10, 6, 0, 0)),
    (MISTRAL_CONV, json.dumps(MISTRAL_CONV_JSON).encode(), False, Usage(9, 350, 0, 0)),
    (MISTRAL_CONV, MISTRAL_CONV_SSE, True, Usage(18, 5, 0, 0)),
]


@pytest.mark.parametrize(
    "protocol, body, streamed, expected",
    USAGE_CASES,
    ids=[f"{c[0].name}-{i}-{'stream' if c[2] else 'json'}" for i, c in enumerate(USAGE_CASES)],
)
def test_usage(protocol, body, streamed, expected):
    assert protocol.usage(body, streamed) == expected


GARBAGE = [
    b"",
    b"not json",
    b"[1, 2]",
    b"null",
    b"\xff\xfe\x00",
    b"[" * 100_000,
    b"data: {broken\n\n",
    b'{"usage": "lots", "usageMetadata": [1]}',
    b'{"usage": {"prompt_tokens": "9", "input_tokens": -3, "completion_tokens": true, "prompt_tokens_details": 4}}',
    b'data: {"type": "message_start", "message": {"usage": [1]}}\n\ndata: {"type": "response.completed", "response": 3}\n\n',
]


@pytest.mark.parametrize("protocol", ALL, ids=lambda p: p.name)
@pytest.mark.parametrize("streamed", [False, True])
def test_usage_of_garbage_is_zero(protocol, streamed):
    for body in GARBAGE:
        assert protocol.usage(body, streamed) == Usage(), body[:40]


# ---------------------------------------------------------------- canonical form


def canon(protocol, path, body, query=None, headers=None):
    return protocol.canonical_request(path, query or {}, headers or {}, body)


def fn(name, description="", nest=True):
    schema = {"name": name, "description": description, "parameters": {"type": "object", "properties": {}}}
    return {"type": "function", "function": schema} if nest else {"type": "function", **schema}


CHAT_BODY = {
    "model": "gpt-4.1",
    "temperature": 0.2,
    "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Refund order 42"}],
    "tools": [fn("lookup_order"), fn("refund")],
    "tool_choice": "auto",
}
RESPONSES_BODY = {
    "model": "gpt-4.1",
    "instructions": "You are terse.",
    "input": [{"role": "user", "content": "Refund order 42"}],
    "tools": [
        fn("lookup_order", nest=False),
        fn("refund", nest=False),
        {"type": "web_search"},
        {
            "type": "mcp",
            "server_label": "shop",
            "server_url": "https://mcp.shop.example/sse",
            "authorization": "tok-1",
            "require_approval": "never",
        },
    ],
    "previous_response_id": "resp_abc",
    "reasoning": {"effort": "low"},
}
ANTHROPIC_BODY = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 1024,
    "system": "You are terse.",
    "messages": [{"role": "user", "content": "Refund order 42"}],
    "tools": [
        {"name": "lookup_order", "description": "", "input_schema": {"type": "object"}},
        {"name": "refund", "description": "", "input_schema": {"type": "object"}},
    ],
    "mcp_servers": [{"type": "url", "url": "https://mcp.shop.example/sse", "name": "shop", "authorization_token": "tok-1"}],
}
ANTHROPIC_HEADERS = {
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "mcp-client-2025-04-04,context-1m-2025-08-07",
    "x-api-key": "sk-ant-1",
}
GEMINI_PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
GEMINI_BODY = {
    "contents": [{"role": "user", "parts": [{"text": "Refund order 42"}]}],
    "systemInstruction": {"parts": [{"text": "You are terse."}]},
    "tools": [
        {
            "functionDeclarations": [
                {"name": "lookup_order", "parameters": {"type": "OBJECT"}},
                {"name": "refund", "parameters": {"type": "OBJECT"}},
            ]
        },
        {"googleSearch": {}},
    ],
    "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_ONLY_HIGH"}],
    "generationConfig": {"temperature": 0.2, "thinkingConfig": {"thinkingBudget": 1024}},
}
GEMINI_SHUFFLED = {
    **GEMINI_BODY,
    "tools": [{"googleSearch": {}}, {"functionDeclarations": GEMINI_BODY["tools"][0]["functionDeclarations"][::-1]}],
}
MISTRAL_BODY = {**CHAT_BODY, "model": "mistral-small-latest", "safe_prompt": False}
MISTRAL_CONV_BODY = {
    "model": "mistral-medium-latest",
    "inputs": "Refund order 42",
    "instructions": "You are terse.",
    "tools": [fn("lookup_order"), fn("refund")],
    "completion_args": {"temperature": 0.2},
}


def reversed_tools(body):
    return {**body, "tools": body["tools"][::-1]}


# (protocol, path, base body, base query, base headers, [(why, body, query, headers) that must canonicalise alike])
SAME = [
    (
        CHAT,
        "/v1/chat/completions",
        CHAT_BODY,
        {},
        {},
        [
            (
                "identifiers",
                {**CHAT_BODY, "user": "u-1", "metadata": {"run": "7"}, "safety_identifier": "h", "prompt_cache_key": "k", "store": True},
                {},
                {},
            ),
            ("tier and cache policy", {**CHAT_BODY, "service_tier": "flex", "prompt_cache_retention": "24h"}, {}, {}),
            ("tool order", reversed_tools(CHAT_BODY), {}, {}),
            (
                "credential and telemetry headers",
                CHAT_BODY,
                {},
                {"Authorization": "Bearer sk-2", "OpenAI-Organization": "o", "X-Stainless-Retry-Count": "1", "Idempotency-Key": "x"},
            ),
        ],
    ),
    (
        RESPONSES,
        "/v1/responses",
        RESPONSES_BODY,
        {},
        {},
        [
            (
                "identifiers",
                {
                    **RESPONSES_BODY,
                    "user": "u-1",
                    "metadata": {"run": "7"},
                    "safety_identifier": "h",
                    "prompt_cache_key": "k",
                    "store": False,
                },
                {},
                {},
            ),
            (
                "tier, cache and stream options",
                {
                    **RESPONSES_BODY,
                    "service_tier": "priority",
                    "prompt_cache_retention": "24h",
                    "stream_options": {"include_obfuscation": False},
                },
                {},
                {},
            ),
            ("tool order", reversed_tools(RESPONSES_BODY), {}, {}),
            (
                "mcp credentials",
                {
                    **RESPONSES_BODY,
                    "tools": [
                        *RESPONSES_BODY["tools"][:3],
                        {**RESPONSES_BODY["tools"][3], "authorization": "tok-2", "headers": {"X-Key": "k"}},
                    ],
                },
                {},
                {},
            ),
        ],
    ),
    (
        ANTHROPIC,
        "/v1/messages",
        ANTHROPIC_BODY,
        {},
        ANTHROPIC_HEADERS,
        [
            ("metadata and tier", {**ANTHROPIC_BODY, "metadata": {"user_id": "u-9"}, "service_tier": "auto"}, {}, ANTHROPIC_HEADERS),
            ("tool order", reversed_tools(ANTHROPIC_BODY), {}, ANTHROPIC_HEADERS),
            (
                "mcp token",
                {**ANTHROPIC_BODY, "mcp_servers": [{**ANTHROPIC_BODY["mcp_servers"][0], "authorization_token": "tok-2"}]},
                {},
                ANTHROPIC_HEADERS,
            ),
            (
                "api key, header case, beta order",
                ANTHROPIC_BODY,
                {},
                {
                    "Anthropic-Version": "2023-06-01",
                    "Anthropic-Beta": "context-1m-2025-08-07, mcp-client-2025-04-04",
                    "X-Api-Key": "sk-ant-2",
                    "X-Stainless-Arch": "arm64",
                },
            ),
        ],
    ),
    (
        GEMINI,
        GEMINI_PATH,
        GEMINI_BODY,
        {"alt": "sse", "key": "AIza-1"},
        {},
        [
            ("api key", GEMINI_BODY, {"alt": "sse", "key": "AIza-2"}, {"x-goog-api-key": "AIza-2"}),
            ("labels", {**GEMINI_BODY, "labels": {"team": "support"}}, {"alt": "sse"}, {}),
            ("declaration and tool order", GEMINI_SHUFFLED, {"alt": "sse"}, {}),
        ],
    ),
    (
        MISTRAL_CHAT,
        "/v1/chat/completions",
        MISTRAL_BODY,
        {},
        {},
        [
            ("identifiers", {**MISTRAL_BODY, "prompt_cache_key": "conv-1", "metadata": {"run": "7"}}, {}, {}),
            ("tool order", reversed_tools(MISTRAL_BODY), {}, {"Authorization": "Bearer k2"}),
        ],
    ),
    (
        MISTRAL_CONV,
        "/v1/conversations",
        MISTRAL_CONV_BODY,
        {},
        {},
        [
            (
                "labels and storage",
                {**MISTRAL_CONV_BODY, "name": "run 7", "description": "at 12:00", "store": False, "metadata": {"run": "7"}},
                {},
                {},
            ),
            ("tool order", reversed_tools(MISTRAL_CONV_BODY), {}, {}),
        ],
    ),
]

# (protocol, path, base body, base query, base headers, [(why, path, body, query, headers) that must differ])
DIFFERENT = [
    (
        CHAT,
        "/v1/chat/completions",
        CHAT_BODY,
        {},
        {},
        [
            (
                "message",
                None,
                {**CHAT_BODY, "messages": [*CHAT_BODY["messages"][:1], {"role": "user", "content": "Refund 43"}]},
                None,
                None,
            ),
            ("temperature", None, {**CHAT_BODY, "temperature": 0.3}, None, None),
            ("tool schema", None, {**CHAT_BODY, "tools": [fn("lookup_order", "by id"), fn("refund")]}, None, None),
            ("model", None, {**CHAT_BODY, "model": "gpt-4.1-mini"}, None, None),
            ("usage chunk asked for", None, {**CHAT_BODY, "stream": True, "stream_options": {"include_usage": True}}, None, None),
            ("azure api-version", "/openai/deployments/d/chat/completions", None, {"api-version": "2024-10-21"}, None),
        ],
    ),
    (
        RESPONSES,
        "/v1/responses",
        RESPONSES_BODY,
        {},
        {},
        [
            ("previous response", None, {**RESPONSES_BODY, "previous_response_id": "resp_def"}, None, None),
            ("instructions", None, {**RESPONSES_BODY, "instructions": "You are chatty."}, None, None),
            ("reasoning effort", None, {**RESPONSES_BODY, "reasoning": {"effort": "high"}}, None, None),
            (
                "mcp server",
                None,
                {
                    **RESPONSES_BODY,
                    "tools": [*RESPONSES_BODY["tools"][:3], {**RESPONSES_BODY["tools"][3], "server_url": "https://mcp.other.example/sse"}],
                },
                None,
                None,
            ),
            ("streamed", None, {**RESPONSES_BODY, "stream": True}, None, None),
        ],
    ),
    (
        ANTHROPIC,
        "/v1/messages",
        ANTHROPIC_BODY,
        {},
        ANTHROPIC_HEADERS,
        [
            ("beta header", None, None, None, {**ANTHROPIC_HEADERS, "anthropic-beta": "mcp-client-2025-04-04"}),
            ("version header", None, None, None, {**ANTHROPIC_HEADERS, "anthropic-version": "2024-01-01"}),
            ("system", None, {**ANTHROPIC_BODY, "system": "You are chatty."}, None, None),
            ("thinking", None, {**ANTHROPIC_BODY, "thinking": {"type": "enabled", "budget_tokens": 2048}}, None, None),
        ],
    ),
    (
        GEMINI,
        GEMINI_PATH,
        GEMINI_BODY,
        {"alt": "sse", "key": "AIza-1"},
        {},
        [
            ("alt", None, None, {"key": "AIza-1"}, None),
            ("model in path", "/v1beta/models/gemini-2.5-pro:streamGenerateContent", None, None, None),
            ("safety settings", None, {**GEMINI_BODY, "safetySettings": []}, None, None),
            ("cached content", None, {**GEMINI_BODY, "cachedContent": "cachedContents/abc"}, None, None),
            ("temperature", None, {**GEMINI_BODY, "generationConfig": {"temperature": 0.9}}, None, None),
        ],
    ),
    (
        MISTRAL_CHAT,
        "/v1/chat/completions",
        MISTRAL_BODY,
        {},
        {},
        [
            ("safe prompt", None, {**MISTRAL_BODY, "safe_prompt": True}, None, None),
            ("seed", None, {**MISTRAL_BODY, "random_seed": 7}, None, None),
            ("agents endpoint", "/v1/agents/completions", {**MISTRAL_BODY, "agent_id": "ag_1"}, None, None),
        ],
    ),
    (
        MISTRAL_CONV,
        "/v1/conversations/conv_1",
        {"inputs": "and order 43?"},
        {},
        {},
        [
            ("conversation id", "/v1/conversations/conv_2", None, None, None),
            ("restart", "/v1/conversations/conv_1/restart", {"inputs": "and order 43?", "from_entry_id": "msg_1"}, None, None),
            ("inputs", None, {"inputs": "and order 44?"}, None, None),
        ],
    ),
]


@pytest.mark.parametrize("protocol, path, body, query, headers, variants", SAME, ids=[row[0].name for row in SAME])
def test_dropped_fields_do_not_change_the_canonical_form(protocol, path, body, query, headers, variants):
    base = canon(protocol, path, body, query, headers)
    for why, v_body, v_query, v_headers in variants:
        assert canon(protocol, path, v_body, v_query, v_headers) == base, why


@pytest.mark.parametrize("protocol, path, body, query, headers, variants", DIFFERENT, ids=[row[0].name for row in DIFFERENT])
def test_meaningful_fields_change_the_canonical_form(protocol, path, body, query, headers, variants):
    base = canon(protocol, path, body, query, headers)
    for why, v_path, v_body, v_query, v_headers in variants:
        variant = canon(
            protocol,
            v_path or path,
            body if v_body is None else v_body,
            query if v_query is None else v_query,
            headers if v_headers is None else v_headers,
        )
        assert variant != base, why


def test_canonical_form_drops_secrets_and_keeps_what_matters():
    form = canon(ANTHROPIC, "/v1/messages", ANTHROPIC_BODY, {"beta": "true"}, ANTHROPIC_HEADERS)
    assert form["headers"] == {"anthropic-version": "2023-06-01", "anthropic-beta": "context-1m-2025-08-07,mcp-client-2025-04-04"}
    assert form["query"] == {"beta": "true"} and form["path"] == "/v1/messages"
    assert "authorization_token" not in json.dumps(form)
    form = canon(GEMINI, GEMINI_PATH, GEMINI_BODY, {"alt": "sse", "key": "AIza-1"}, {"x-goog-api-key": "AIza-1"})
    assert form["query"] == {"alt": "sse"} and form["headers"] == {} and "AIza" not in json.dumps(form)
    tools = canon(GEMINI, GEMINI_PATH, GEMINI_SHUFFLED)["body"]["tools"]
    assert [[d["name"] for d in t.get("functionDeclarations", [])] for t in tools] == [[], ["lookup_order", "refund"]]
    assert "tok-1" not in json.dumps(canon(RESPONSES, "/v1/responses", RESPONSES_BODY))


@pytest.mark.parametrize("protocol", ALL, ids=lambda p: p.name)
def test_non_object_bodies_are_refused_and_odd_tools_tolerated(protocol):
    for body in (None, "text", [1], 3, b"{}"):
        with pytest.raises(ValueError):
            canon(protocol, "/v1/x", body)
    odd = {"tools": [1, "x", {"function": "not-a-dict"}, {"name": 5}, {"functionDeclarations": [{"name": None}, 2]}], "mcp_servers": "nope"}
    assert canon(protocol, "/v1/x", odd)["body"]["tools"]
    assert canon(protocol, "/v1/x", {"tools": "none"})["body"] == {"tools": "none"}


# ---------------------------------------------------------------- routing, streaming, model

TURNS = [
    ("openai", "POST", "/v1/chat/completions", "openai-chat"),
    ("openai", "POST", "/openai/deployments/gpt4o/chat/completions", "openai-chat"),
    ("openai", "POST", "/v1/responses", "openai-responses"),
    ("openai", "POST", "/v1/responses/compact", "openai-responses"),
    ("openai", "GET", "/v1/responses/resp_123", None),
    ("openai", "POST", "/v1/responses/resp_123/cancel", None),
    ("openai", "POST", "/v1/responses/input_tokens", None),
    ("openai", "GET", "/v1/chat/completions", None),
    ("openai", "POST", "/v1/chat/completions/chatcmpl-123", None),  # updates a stored completion's metadata
    ("openai", "GET", "/v1/models", None),
    ("openai", "POST", "/v1/embeddings", None),
    ("openai", "POST", "/v1/messages", None),
    ("anthropic", "POST", "/v1/messages", "anthropic"),
    ("anthropic", "POST", "/v1/messages?beta=true", "anthropic"),
    ("anthropic", "POST", "/v1/messages/count_tokens", None),
    ("anthropic", "POST", "/v1/messages/batches", None),
    ("anthropic", "GET", "/v1/models", None),
    ("gemini", "POST", "/v1beta/models/gemini-2.5-flash:generateContent", "gemini"),
    ("gemini", "POST", "/v1/models/gemini-2.5-flash:streamGenerateContent", "gemini"),
    ("gemini", "POST", "/v1alpha/models/gemini-2.0-flash-exp:generateContent", "gemini"),
    ("gemini", "POST", "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent", "gemini"),
    ("gemini", "POST", "/v1beta/models/gemini-2.5-flash:countTokens", None),
    ("gemini", "POST", "/v1beta/models/text-embedding-004:embedContent", None),
    ("gemini", "GET", "/v1beta/models", None),
    ("mistral", "POST", "/v1/chat/completions", "mistral-chat"),
    ("mistral", "POST", "/v1/chat/completions#stream", "mistral-chat"),
    ("mistral", "POST", "/v1/agents/completions", "mistral-chat"),
    ("mistral", "POST", "/v1/fim/completions", "mistral-chat"),
    ("mistral", "POST", "/v1/conversations", "mistral-conversations"),
    ("mistral", "POST", "/v1/conversations/conv_0683", "mistral-conversations"),
    ("mistral", "POST", "/v1/conversations/conv_0683/restart", "mistral-conversations"),
    ("mistral", "GET", "/v1/conversations", None),
    ("mistral", "GET", "/v1/conversations/conv_0683/history", None),
    ("mistral", "DELETE", "/v1/conversations/conv_0683", None),
    ("mistral", "POST", "/v1/embeddings", None),
    ("azure", "POST", "/v1/chat/completions", None),
]


@pytest.mark.parametrize("provider, method, path, expected", TURNS)
def test_find_picks_the_protocol_of_a_model_turn(provider, method, path, expected):
    found = find(provider, method, path)
    assert (found.name if found else None) == expected


STREAMING = [
    (CHAT, "/v1/chat/completions", {}, {"stream": True}, True),
    (CHAT, "/v1/chat/completions", {}, {"stream": False}, False),
    (RESPONSES, "/v1/responses", {}, {"stream": True}, True),
    (ANTHROPIC, "/v1/messages", {}, {"model": "claude-sonnet-4-5"}, False),
    (GEMINI, "/v1beta/models/gemini-2.5-flash:streamGenerateContent", {"alt": "sse"}, {}, True),
    (GEMINI, "/v1beta/models/gemini-2.5-flash:generateContent", {}, {"stream": True}, False),
    (MISTRAL_CONV, "/v1/conversations", {}, {"stream": True}, True),
    (MISTRAL_CHAT, "/v1/chat/completions", {}, [1], False),
]


@pytest.mark.parametrize("protocol, path, query, body, expected", STREAMING)
def test_is_streaming(protocol, path, query, body, expected):
    assert protocol.is_streaming(path, query, body) is expected


MODELS = [
    (CHAT, "/v1/chat/completions", {"model": "gpt-4.1"}, "gpt-4.1"),
    (ANTHROPIC, "/v1/messages", {"model": "claude-sonnet-4-5"}, "claude-sonnet-4-5"),
    (GEMINI, "/v1beta/models/gemini-2.5-flash:streamGenerateContent", {"model": "ignored"}, "gemini-2.5-flash"),
    (MISTRAL_CONV, "/v1/conversations/conv_1", {"inputs": "hi"}, ""),
    (RESPONSES, "/v1/responses", "garbage", ""),
]


@pytest.mark.parametrize("protocol, path, body, expected", MODELS)
def test_model(protocol, path, body, expected):
    assert protocol.model(path, body) == expected


# ---------------------------------------------------------------- the adapters' normaliser hook

# What a framework's client might write into its system prompt that changes from one day to the next.
DATED = {"model": "gpt-4.1", "messages": [{"role": "system", "content": "Today is 2026-12-03."}, {"role": "user", "content": "hi"}]}


def _undated(body: dict) -> dict:
    system = {**body["messages"][0], "content": body["messages"][0]["content"].replace("2026-12-03", NORMALISED)}
    return {**body, "messages": [system, *body["messages"][1:]]}


HERMES_PROMPT = (
    "You are Hermes Agent.\n\nActive Hermes profile: default. Other profiles (if any) live under /tmp/h/profiles/<name>/. "
    "Each profile has its own skills/, plugins/, cron/, and memories/ that affect a different session than this one. "
    "Do not modify another profile's skills/plugins/cron/memories unless the user explicitly directs you to."
    "\n\nConversation started: Thursday, December 03, 2026"
)
CLI_DATE = "<system-reminder>\nToday's date is 2026-12-03.\n</system-reminder>\n"


def test_the_runtime_alone_normalises_no_client():
    """The runtime names no framework: without the adapter's normaliser (a fresh protocol instance
    has none), even Hermes' and the Claude CLI's own requests are fingerprinted whole."""
    hermes = {"model": "m", "messages": [{"role": "system", "content": HERMES_PROMPT}, {"role": "user", "content": "hi"}]}
    cli = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": CLI_DATE}, {"type": "text", "text": "hi"}]}]}
    for protocol, agent, body in (
        (openai_chat.OpenAIChat(), "HermesAgent/0.19.0", hermes),
        (anthropic.Anthropic(), "claude-cli/2.1.332", cli),
    ):
        canonical = protocol.canonical_request("/v1/x", {}, {"user-agent": agent}, body)
        assert canonical["body"] == body and NORMALISED not in json.dumps(canonical)


def test_a_registered_normaliser_sees_its_clients_requests_only():
    protocol = openai_chat.OpenAIChat()  # its own instance: the shared one carries the adapters' normalisers
    protocol.normalise_requests_from("SomeAgent/", _undated)
    mine = protocol.canonical_request("/v1/chat/completions", {}, {"user-agent": "SomeAgent/1.0"}, DATED)
    other = protocol.canonical_request("/v1/chat/completions", {}, {"user-agent": "OpenAI/Python 2.24.0"}, DATED)
    assert mine["body"]["messages"][0]["content"] == f"Today is {NORMALISED}."
    assert other["body"] == DATED
    # The normaliser gets the canonical body: what the protocol drops never reaches it.
    seen: list[dict] = []
    protocol.normalise_requests_from("SomeAgent/", lambda body: seen.append(body) or body)
    protocol.canonical_request("/v1/chat/completions", {}, {"user-agent": "SomeAgent/1.0"}, {**DATED, "user": "u-1"})
    assert seen == [DATED]
