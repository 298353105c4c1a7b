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
    normalise_volatile,
    positive_int,
    route,
    sent_by,
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

# -- Hermes Agent --------------------------------------------------------------------------------
# Hermes writes facts about the host, its home and the day into the system prompt of every request
# (hermes-agent 0.19: agent/prompt_builder.py build_environment_hints, agent/system_prompt.py):
#     Host: Linux (<kernel release>)              User home directory: <~>
#     Current working directory: <cwd>            ...live under <HERMES_HOME>/profiles/<name>/...
#     Conversation started: Thursday, December 03, 2026   [Session ID: <id>, with pass_session_id]
# A retry on another node, another day or in another Hermes home must still replay, so for
# requests whose User-Agent says ``HermesAgent/`` (Hermes' own User-Agent, which tether-hermes has
# it send: the OpenAI SDK's default names no client) — and only those — these values in system
# messages are replaced by NORMALISED before fingerprinting. Each pattern is the whole line (or
# block of lines) as Hermes writes it, so the user's own instructions in the same system message
# stay part of the fingerprint; user messages and tool results are never touched. The seam counts
# the replacements (Run.normalised_parts).
HERMES_AGENT = "HermesAgent/"
_HERMES_VOLATILE = (
    re.compile(r"^Host: ([^\n]+)\nUser home directory: ([^\n]+)(?:\nCurrent working directory: ([^\n]+))?$", re.MULTILINE),
    re.compile(r"^Active Hermes profile: default\. Other profiles \(if any\) live under ([^\n]+?)/profiles/<name>/\.", re.MULTILINE),
    re.compile(r"^Conversation started: (\w+, \w+ \d{2}, \d{4})(?:\nSession ID: ([^\n]+))?$", re.MULTILINE),
)
_SYSTEM_ROLES = frozenset({"system", "developer"})


def _normalise_hermes(messages: Any) -> Any:
    """Hermes' messages with its host, home and date facts replaced in the system prompt."""
    if not isinstance(messages, list):
        return messages
    out = []
    for m in messages:
        if isinstance(m, dict) and m.get("role") in _SYSTEM_ROLES:
            content = m.get("content")
            if isinstance(content, str):
                m = {**m, "content": normalise_volatile(content, _HERMES_VOLATILE)}
            elif isinstance(content, list):
                parts = [
                    {**p, "text": normalise_volatile(p["text"], _HERMES_VOLATILE)}
                    if isinstance(p, dict) and isinstance(p.get("text"), str)
                    else p
                    for p in content
                ]
                m = {**m, "content": parts}
        out.append(m)
    return out


def _tool_name(tool: Any) -> str:
    # {"type": "function", "function": {"name": ...}} or {"type": "custom", "custom": {"name": ...}};
    # legacy `functions` entries are {"name": ...}.
    name = get_path(tool, "function", "name") or get_path(tool, "custom", "name") or get_path(tool, "name")
    return name if isinstance(name, str) else ""


def _body(body: Any, hermes: bool = False) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValueError("chat completions request body is not a JSON object")
    out = drop_keys(body, DROPPED_KEYS)
    if hermes and "messages" in out:
        out["messages"] = _normalise_hermes(out["messages"])
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
            "body": _body(body, hermes=sent_by(headers, HERMES_AGENT)),
        }

    def usage(self, body: bytes, streamed: bool) -> Usage:
        try:
            return _stream_usage(body) if streamed else _usage(get_path(json.loads(body), "usage"))
        except Exception:  # never raise: usage is bookkeeping, the response itself is fine
            return Usage()


PROTOCOL = OpenAIChat()
PROTOCOLS = (PROTOCOL,)
