"""OpenAI Chat Completions: ``POST .../chat/completions`` (``/v1``, Azure ``/openai/deployments/{d}``)."""

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
DROPPED_KEYS = COMMON_DROPPED_KEYS | {
    "service_tier",  # processing tier: latency and price, same model, same answer
    "prompt_cache_retention",  # how long the provider keeps its prompt cache: billing only
}
# Kept on purpose: `stream` and `stream_options` (include_usage adds a final chunk with empty
# `choices`, so it changes the stream the client gets), `seed`, `n`, `logit_bias`, `logprobs`...

# Only headers that change the answer are kept; Chat Completions has none (auth, org, project,
# SDK telemetry and idempotency headers are all dropped).
KEPT_HEADERS: frozenset[str] = frozenset()
# Query parameters that are credentials; the rest (Azure's `api-version`) selects behaviour: kept.
DROPPED_QUERY = frozenset({"api-key", "api_key"})

_TURN = re.compile(r"(^|/)chat/completions$")


def _tool_name(tool: Any) -> str:
    # {"type": "function", "function": {"name": ...}} or {"type": "custom", "custom": {"name": ...}};
    # legacy `functions` entries are {"name": ...}.
    name = get_path(tool, "function", "name") or get_path(tool, "custom", "name") or get_path(tool, "name")
    return name if isinstance(name, str) else ""


def _body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValueError("chat completions request body is not a JSON object")
    out = drop_keys(body, DROPPED_KEYS)
    for key in ("tools", "functions"):
        if key in out:
            out[key] = sort_by_name(out[key], _tool_name)
    return out


def _usage(usage: Any) -> Usage:
    # prompt_tokens includes the cached ones; completion_tokens includes reasoning tokens.
    cached = positive_int(get_path(usage, "prompt_tokens_details", "cached_tokens"))
    return Usage(
        input_tokens=max(0, positive_int(get_path(usage, "prompt_tokens")) - cached),
        output_tokens=positive_int(get_path(usage, "completion_tokens")),
        cached_input_tokens=cached,
    )


def _stream_usage(body: bytes) -> Usage:
    # With stream_options.include_usage the last chunk carries `usage`; the others carry null.
    found = [event["usage"] for event in sse_data(body) if isinstance(get_path(event, "usage"), dict)]
    return _usage(found[-1]) if found else Usage()


class OpenAIChat(WireProtocol):
    name = "openai-chat"
    provider = "openai"

    def is_model_turn(self, method: str, path: str) -> bool:
        return method.upper() == "POST" and bool(_TURN.search(route(path)))

    def canonical_request(self, path: str, query: Mapping[str, str], headers: Mapping[str, str], body: Any) -> dict[str, Any]:
        return {
            "path": path,
            "query": kept_query(query, DROPPED_QUERY),
            "headers": kept_headers(headers, KEPT_HEADERS),
            "body": _body(body),
        }

    def usage(self, body: bytes, streamed: bool) -> Usage:
        try:
            return _stream_usage(body) if streamed else _usage(get_path(json.loads(body), "usage"))
        except Exception:  # never raise: usage is bookkeeping, the response itself is fine
            return Usage()


PROTOCOL = OpenAIChat()
PROTOCOLS = (PROTOCOL,)
