"""OpenAI Responses: ``POST .../responses`` (and ``POST .../responses/compact``)."""

from __future__ import annotations

import re
from typing import Any

from .base import UsageFields, WireProtocol, drop_keys, get_path
from .openai_chat import OPENAI_DROPPED_KEYS, OPENAI_DROPPED_QUERY

# Keys of an `mcp` tool that are credentials for the MCP server (OAuth token, auth headers):
# refreshed between attempts, never seen by the model.
MCP_SECRET_KEYS = frozenset({"authorization", "headers"})


class OpenAIResponses(WireProtocol):
    name = "openai-responses"
    provider = "openai"
    # A new turn, or a compaction (a billed model call whose output later turns are built on).
    # Not GET/DELETE /responses/{id}, /responses/{id}/cancel, /responses/input_tokens.
    turn = re.compile(r"(^|/)responses(/compact)?$")
    # Body keys that never change the answer, on top of those of every OpenAI API.
    dropped_keys = OPENAI_DROPPED_KEYS | {
        "prompt_cache_options",  # cache breakpoints/mode: billing and latency only
        "stream_options",  # only include_obfuscation: random padding on delta events, same events
    }
    # Kept on purpose: `previous_response_id` and `conversation` (provider-generated, but they pick the
    # context the model sees, and replay hands back the same ids), `background` and `stream` (response
    # shape), `include` (adds encrypted reasoning etc. to the output), `prompt`, `truncation`, `reasoning`.
    dropped_query = OPENAI_DROPPED_QUERY
    # {"type": "function", "name": ...}; MCP tools are named by `server_label`; built-in tools
    # (web_search, file_search...) have no name and sort by their JSON.
    tool_name_at = ("name", "server_label")
    # input_tokens includes the cached ones; output_tokens includes reasoning tokens. A stream's
    # terminal event (response.completed, or .incomplete/.failed) carries response.usage.
    usage_fields = UsageFields(input=("input_tokens",), output=("output_tokens",), cached=("input_tokens_details.cached_tokens",))
    stream_usage_at = "response.usage"
    # A stream's events carry the response under `response`; its status says how it ended.
    response_id_at = ("id", "response.id")
    finish_reason_at = ("status", "response.status")

    def canonical_tools(self, tools: Any) -> Any:
        if isinstance(tools, list):
            tools = [drop_keys(t, MCP_SECRET_KEYS) if get_path(t, "type") == "mcp" else t for t in tools]
        return super().canonical_tools(tools)


PROTOCOL = OpenAIResponses()
PROTOCOLS = (PROTOCOL,)
