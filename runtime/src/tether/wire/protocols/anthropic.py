"""Anthropic Messages: ``POST .../v1/messages`` (``?beta=true`` too; not count_tokens, not batches)."""

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

# Body keys that never change the answer (on top of COMMON_DROPPED_KEYS: `metadata` carries the
# end-user id; user, safety_identifier, prompt_cache_key, store do not exist here but cost nothing).
DROPPED_KEYS = COMMON_DROPPED_KEYS | {
    "service_tier",  # priority vs standard capacity: latency and price, same answer
}
# Kept on purpose: `container` (provider-generated, but its files change the answer; replay hands
# back the same id), `context_management`, `thinking`, `stream` (response shape), `mcp_servers`
# (minus the token below). `cache_control` marks inside messages are kept: they sit where the
# framework puts them, the same on every attempt.

# Key of an `mcp_servers` entry that is a credential (OAuth token, refreshed between attempts).
MCP_SECRET_KEYS = frozenset({"authorization_token"})

# Headers that change behaviour; x-api-key, authorization, SDK telemetry and retry headers are dropped.
KEPT_HEADERS = frozenset({"anthropic-version", "anthropic-beta"})
# No credentials travel in the query; `beta=true` (the SDK's beta namespace) is kept.
DROPPED_QUERY: frozenset[str] = frozenset()

_TURN = re.compile(r"(^|/)v1/messages$")


def _headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    kept = kept_headers(headers, KEPT_HEADERS)
    if "anthropic-beta" in kept:  # a comma-separated set: order and repeats mean nothing
        kept["anthropic-beta"] = ",".join(sorted({b.strip() for b in kept["anthropic-beta"].split(",") if b.strip()}))
    return kept


def _tool_name(tool: Any) -> str:
    # Client tools {"name", "input_schema"}, server tools {"type": "web_search_...", "name"},
    # MCP servers {"type": "url", "name", "url"}.
    name = get_path(tool, "name")
    return name if isinstance(name, str) else ""


def _body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValueError("messages request body is not a JSON object")
    out = drop_keys(body, DROPPED_KEYS)
    if "tools" in out:
        out["tools"] = sort_by_name(out["tools"], _tool_name)
    if isinstance(out.get("mcp_servers"), list):
        servers = [drop_keys(s, MCP_SECRET_KEYS) if isinstance(s, dict) else s for s in out["mcp_servers"]]
        out["mcp_servers"] = sort_by_name(servers, _tool_name)
    return out


def _usage(usage: Any) -> Usage:
    # input_tokens excludes cache reads and writes; output_tokens includes thinking.
    return Usage(
        input_tokens=positive_int(get_path(usage, "input_tokens")),
        output_tokens=positive_int(get_path(usage, "output_tokens")),
        cached_input_tokens=positive_int(get_path(usage, "cache_read_input_tokens")),
        cache_write_tokens=positive_int(get_path(usage, "cache_creation_input_tokens")),
    )


def _stream_usage(body: bytes) -> Usage:
    # message_start.message.usage has the input side (output_tokens ~1); each message_delta.usage
    # has cumulative counts, output always, input/cache ones when known (null otherwise).
    # So: the last non-null value of each field wins.
    merged: dict[str, Any] = {}
    for event in sse_data(body):
        kind = get_path(event, "type")
        usage = get_path(event, "message", "usage") if kind == "message_start" else get_path(event, "usage")
        if kind in ("message_start", "message_delta") and isinstance(usage, dict):
            merged.update((k, v) for k, v in usage.items() if v is not None)
    return _usage(merged)


class Anthropic(WireProtocol):
    name = "anthropic"
    provider = "anthropic"

    def is_model_turn(self, method: str, path: str) -> bool:
        return method.upper() == "POST" and bool(_TURN.search(route(path)))

    def canonical_request(self, path: str, query: Mapping[str, str], headers: Mapping[str, str], body: Any) -> dict[str, Any]:
        return {"path": path, "query": kept_query(query, DROPPED_QUERY), "headers": _headers(headers), "body": _body(body)}

    def usage(self, body: bytes, streamed: bool) -> Usage:
        try:
            return _stream_usage(body) if streamed else _usage(get_path(json.loads(body), "usage"))
        except Exception:  # never raise: usage is bookkeeping, the response itself is fine
            return Usage()


PROTOCOL = Anthropic()
PROTOCOLS = (PROTOCOL,)
