"""OpenAI Responses: ``POST .../responses`` (and ``POST .../responses/compact``)."""

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
    "prompt_cache_options",  # cache breakpoints/mode: billing and latency only
    "stream_options",  # only include_obfuscation: random padding on delta events, same events
}
# Kept on purpose: `previous_response_id` and `conversation` (provider-generated, but they pick the
# context the model sees, and replay hands back the same ids), `background` and `stream` (response
# shape), `include` (adds encrypted reasoning etc. to the output), `prompt`, `truncation`, `reasoning`.

# Keys of an `mcp` tool that are credentials for the MCP server (OAuth token, auth headers):
# refreshed between attempts, never seen by the model.
MCP_SECRET_KEYS = frozenset({"authorization", "headers"})

# Only headers that change the answer are kept; Responses has none (auth, org, project,
# SDK telemetry and idempotency headers are all dropped).
KEPT_HEADERS: frozenset[str] = frozenset()
# Query parameters that are credentials; the rest (Azure's `api-version`) selects behaviour: kept.
DROPPED_QUERY = frozenset({"api-key", "api_key"})

# A new turn, or a compaction (a billed model call whose output later turns are built on).
# Not GET/DELETE /responses/{id}, /responses/{id}/cancel, /responses/input_tokens.
_TURN = re.compile(r"(^|/)responses(/compact)?$")


def _tool_name(tool: Any) -> str:
    # {"type": "function", "name": ...}; MCP tools are named by `server_label`; built-in tools
    # (web_search, file_search...) have no name and sort by their JSON.
    name = get_path(tool, "name") or get_path(tool, "server_label")
    return name if isinstance(name, str) else ""


def _tools(tools: Any) -> Any:
    if not isinstance(tools, list):
        return tools
    tools = [drop_keys(t, MCP_SECRET_KEYS) if get_path(t, "type") == "mcp" else t for t in tools]
    return sort_by_name(tools, _tool_name)


def _body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValueError("responses request body is not a JSON object")
    out = drop_keys(body, DROPPED_KEYS)
    if "tools" in out:
        out["tools"] = _tools(out["tools"])
    return out


def _usage(usage: Any) -> Usage:
    # input_tokens includes the cached ones; output_tokens includes reasoning tokens.
    cached = positive_int(get_path(usage, "input_tokens_details", "cached_tokens"))
    return Usage(
        input_tokens=max(0, positive_int(get_path(usage, "input_tokens")) - cached),
        output_tokens=positive_int(get_path(usage, "output_tokens")),
        cached_input_tokens=cached,
    )


def _stream_usage(body: bytes) -> Usage:
    # The terminal event (response.completed, or .incomplete/.failed) carries response.usage.
    found = [get_path(event, "response", "usage") for event in sse_data(body)]
    found = [usage for usage in found if isinstance(usage, dict)]
    return _usage(found[-1]) if found else Usage()


class OpenAIResponses(WireProtocol):
    name = "openai-responses"
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


PROTOCOL = OpenAIResponses()
PROTOCOLS = (PROTOCOL,)
