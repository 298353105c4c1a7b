"""Anthropic Messages: ``POST .../v1/messages`` (``?beta=true`` too; not count_tokens, not batches)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
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

# -- Claude Code (the CLI the Claude Agent SDK drives) -----------------------------------------
# The CLI puts facts about the machine and the day into every request, as <system-reminder> text
# blocks at the start of the first user message (and, with its default system prompt, an <env>
# block of the system prompt). A retry on another node or another day must still replay, so for
# requests whose User-Agent says ``claude-cli/`` — and only those: no other SDK's fingerprint
# changes — these values are replaced by NORMALISED before fingerprinting:
#     Primary working directory / Additional working directories / Working directory
#     Is a git repository / Platform / Shell / OS Version (the kernel string)
#     Today's date is YYYY-MM-DD
# and in the hand-back of a subagent (the result of the CLI's Agent tool, a tool_result):
#     agentId: <random id>    duration_ms: <wall time> (inside its <usage> block)
# Nothing else is: the model id, the tokens-left reminder (a function of the recorded usage), the
# user's own text and all other tool results stay part of the fingerprint. The seam counts the replacements
# (Run.normalised_parts: "normalised N volatile parts" in the summary).
CLAUDE_CLI_AGENT = "claude-cli/"
_CLI_VOLATILE = (
    re.compile(
        r"^\s*-?\s*(?:Primary working directory|Additional working directories|Working directory|Is a git repository|"
        r"Is directory a git repo|Platform|Shell|OS Version)\s*:[ \t]*(\S.*)$",
        re.MULTILINE,
    ),
    re.compile(r"^.*Today's date is (\S+?)\.?$", re.MULTILINE),
)
_HANDBACK_VOLATILE = (
    re.compile(r"^agentId: ([0-9a-zA-Z_-]+)", re.MULTILINE),
    re.compile(r"<usage>[^<]*?duration_ms: (\d+)"),
)
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>|<env>.*?</env>", re.DOTALL)


def _normalise_text(text: str) -> str:
    return _REMINDER.sub(lambda m: normalise_volatile(m.group(0), _CLI_VOLATILE), text)


def _normalise_handback(text: str) -> str:
    return normalise_volatile(text, _HANDBACK_VOLATILE)


def _normalise_blocks(content: Any, normalise: Callable[[str], str] = _normalise_text) -> Any:
    if isinstance(content, str):
        return normalise(content)
    if not isinstance(content, list):
        return content
    out = []
    for b in content:
        if isinstance(b, dict) and isinstance(b.get("text"), str):
            b = {**b, "text": normalise(b["text"])}
        elif isinstance(b, dict) and b.get("type") == "tool_result":
            b = {**b, "content": _normalise_blocks(b.get("content"), _normalise_handback)}
        out.append(b)
    return out


def _normalise_cli(body: dict[str, Any]) -> dict[str, Any]:
    """The body with the CLI's environment facts replaced (user messages and the system prompt)."""
    out = dict(body)
    if isinstance(out.get("messages"), list):
        out["messages"] = [
            {**m, "content": _normalise_blocks(m.get("content"))} if isinstance(m, dict) and m.get("role") == "user" else m
            for m in out["messages"]
        ]
    if "system" in out:
        out["system"] = _normalise_blocks(out["system"])
    return out


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
        out = _body(body)
        if sent_by(headers, CLAUDE_CLI_AGENT):
            out = _normalise_cli(out)
        return {"path": path, "query": kept_query(query, DROPPED_QUERY), "headers": _headers(headers), "body": out}

    def usage(self, body: bytes, streamed: bool) -> Usage:
        try:
            return _stream_usage(body) if streamed else _usage(get_path(json.loads(body), "usage"))
        except Exception:  # never raise: usage is bookkeeping, the response itself is fine
            return Usage()


PROTOCOL = Anthropic()
PROTOCOLS = (PROTOCOL,)
