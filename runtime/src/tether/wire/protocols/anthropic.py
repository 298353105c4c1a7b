"""Anthropic Messages: ``POST .../v1/messages`` (``?beta=true`` too; not count_tokens, not batches)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .base import COMMON_DROPPED_KEYS, UsageFields, WireProtocol, drop_keys, get_path, sort_by_name

# Key of an `mcp_servers` entry that is a credential (OAuth token, refreshed between attempts).
MCP_SECRET_KEYS = frozenset({"authorization_token"})


class Anthropic(WireProtocol):
    name = "anthropic"
    provider = "anthropic"
    turn = re.compile(r"(^|/)v1/messages$")
    # Body keys that never change the answer (on top of COMMON_DROPPED_KEYS: `metadata` carries the
    # end-user id; user, safety_identifier, prompt_cache_key, store do not exist here but cost nothing).
    dropped_keys = COMMON_DROPPED_KEYS | {
        "service_tier",  # priority vs standard capacity: latency and price, same answer
    }
    # Kept on purpose: `container` (provider-generated, but its files change the answer; replay hands
    # back the same id), `context_management`, `thinking`, `stream` (response shape), `mcp_servers`
    # (minus the token above). `cache_control` marks inside messages are kept: they sit where the
    # framework puts them, the same on every attempt.
    # Headers that change behaviour; x-api-key, authorization, SDK telemetry and retry headers are
    # dropped. No credentials travel in the query; `beta=true` (the SDK's beta namespace) is kept.
    kept_headers = frozenset({"anthropic-version", "anthropic-beta"})
    # Client tools {"name", "input_schema"}, server tools {"type": "web_search_...", "name"},
    # MCP servers {"type": "url", "name", "url"}: all named by `name` (the default).
    # input_tokens excludes cache reads and writes; output_tokens includes thinking.
    usage_fields = UsageFields(
        input=("input_tokens",),
        output=("output_tokens",),
        cached=("cache_read_input_tokens",),
        cache_write=("cache_creation_input_tokens",),
        input_includes_cached=False,
    )
    # A stream names the message in message_start and its stop reason in message_delta.
    response_id_at = ("id", "message.id")
    finish_reason_at = ("stop_reason", "delta.stop_reason")

    def canonical_body(self, body: dict[str, Any]) -> dict[str, Any]:
        out = super().canonical_body(body)
        if isinstance(out.get("mcp_servers"), list):
            servers = [drop_keys(s, MCP_SECRET_KEYS) if isinstance(s, dict) else s for s in out["mcp_servers"]]
            out["mcp_servers"] = sort_by_name(servers, self.tool_name)
        return out

    def canonical_headers(self, headers: Mapping[str, str] | None) -> dict[str, str]:
        kept = super().canonical_headers(headers)
        if "anthropic-beta" in kept:  # a comma-separated set: order and repeats mean nothing
            kept["anthropic-beta"] = ",".join(sorted({b.strip() for b in kept["anthropic-beta"].split(",") if b.strip()}))
        return kept

    def fold_stream_usage(self, events: Iterable[Any]) -> Any:
        # message_start.message.usage has the input side (output_tokens ~1); each message_delta.usage
        # has cumulative counts, output always, input/cache ones when known (null otherwise).
        # So: the last non-null value of each field wins.
        merged: dict[str, Any] = {}
        for event in events:
            kind = get_path(event, "type")
            usage = get_path(event, "message", "usage") if kind == "message_start" else get_path(event, "usage")
            if kind in ("message_start", "message_delta") and isinstance(usage, dict):
                merged.update((k, v) for k, v in usage.items() if v is not None)
        return merged


PROTOCOL = Anthropic()
PROTOCOLS = (PROTOCOL,)
