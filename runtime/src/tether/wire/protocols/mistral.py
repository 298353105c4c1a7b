"""Mistral: chat completions (``/v1/{chat,agents,fim}/completions``) and conversations.

Conversations: ``POST /v1/conversations`` (start), ``POST /v1/conversations/{id}`` (append),
``POST /v1/conversations/{id}/restart``. The conversation id is provider-generated and stays in the
canonical path: replay hands back the same id, so the next append is keyed alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from .base import (
    COMMON_DROPPED_KEYS,
    Usage,
    WireProtocol,
    drop_keys,
    get_path,
    kept_headers,
    kept_query,
    positive_int,
    route,
    sort_by_name,
    sse_data,
)

# Body keys that never change the answer (on top of COMMON_DROPPED_KEYS: user, metadata,
# safety_identifier, prompt_cache_key, store — who asks and what is kept, not what is asked).
# Kept on purpose: `safe_prompt` (prepends a system prompt), `random_seed`, `prompt_mode`,
# `agent_id`/`agent_version` (pick the agent's instructions and tools), `handoff_execution`,
# `from_entry_id` (provider-generated, replayed identically), `stream` (response shape).
CHAT_DROPPED_KEYS = COMMON_DROPPED_KEYS
CONVERSATION_DROPPED_KEYS = COMMON_DROPPED_KEYS | {
    "name",  # label of the stored conversation, never shown to the model
    "description",  # likewise
}

# Only headers that change the answer are kept; Mistral has none (authorization and SDK
# telemetry headers are dropped).
KEPT_HEADERS: frozenset[str] = frozenset()
# Query parameters that are credentials; Mistral sends none, but a gateway might.
DROPPED_QUERY = frozenset({"api-key", "api_key"})

_CHAT_TURN = re.compile(r"(^|/)(chat|agents|fim)/completions$")
_CONVERSATION_TURN = re.compile(r"(^|/)conversations(/[^/]+(/restart)?)?$")


def _tool_name(tool: Any) -> str:
    # Chat: {"type": "function", "function": {"name": ...}}; conversations' function tools the same,
    # built-in ones ({"type": "web_search"}) have no name and sort by their JSON.
    name = get_path(tool, "function", "name") or get_path(tool, "name")
    return name if isinstance(name, str) else ""


def _body(body: Any, dropped: frozenset[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValueError("mistral request body is not a JSON object")
    out = drop_keys(body, dropped)
    if "tools" in out:
        out["tools"] = sort_by_name(out["tools"], _tool_name)
    return out


def _usage(usage: Any) -> Usage:
    # prompt_tokens includes prompt_tokens_details.cached_tokens (prompt caching bills them at 10%).
    cached = positive_int(get_path(usage, "prompt_tokens_details", "cached_tokens"))
    return Usage(
        input_tokens=max(0, positive_int(get_path(usage, "prompt_tokens")) - cached),
        output_tokens=positive_int(get_path(usage, "completion_tokens")),
        cached_input_tokens=cached,
    )


def _stream_usage(body: bytes) -> Usage:
    # Chat: the final chunk carries `usage`; conversations: the conversation.response.done event.
    found = [event["usage"] for event in sse_data(body) if isinstance(get_path(event, "usage"), dict)]
    return _usage(found[-1]) if found else Usage()


class Mistral(WireProtocol):
    provider = "mistral"

    def __init__(self, name: str, turn: re.Pattern[str], dropped: frozenset[str]) -> None:
        self.name = name
        self._turn = turn
        self._dropped = dropped

    def is_model_turn(self, method: str, path: str) -> bool:
        return method.upper() == "POST" and bool(self._turn.search(route(path)))

    def canonical_request(self, path: str, query: Mapping[str, str], headers: Mapping[str, str], body: Any) -> dict[str, Any]:
        return {
            "path": path,
            "query": kept_query(query, DROPPED_QUERY),
            "headers": kept_headers(headers, KEPT_HEADERS),
            "body": _body(body, self._dropped),
        }

    def usage(self, body: bytes, streamed: bool) -> Usage:
        try:
            return _stream_usage(body) if streamed else _usage(get_path(json.loads(body), "usage"))
        except Exception:  # never raise: usage is bookkeeping, the response itself is fine
            return Usage()


CHAT = Mistral("mistral-chat", _CHAT_TURN, CHAT_DROPPED_KEYS)
CONVERSATIONS = Mistral("mistral-conversations", _CONVERSATION_TURN, CONVERSATION_DROPPED_KEYS)
PROTOCOLS = (CHAT, CONVERSATIONS)
