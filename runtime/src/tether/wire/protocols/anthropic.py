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
# The CLI puts facts about the machine and the day into its requests. A retry on another node or
# another day must still replay, so for requests whose User-Agent says ``claude-cli/`` — and only
# those: no other SDK's fingerprint changes — these values are replaced by NORMALISED before
# fingerprinting. The user's own text travels in the same messages (the prompt, CLAUDE.md files in
# a <system-reminder> of their own, the system prompt) and may hold lines of the same shape, so a
# fact is located where the CLI writes it, never by its shape alone (issue 23). The rule (CLI
# 2.1.332, measured; its attachments rendered as meta user blocks):
#   - the environment and the date are attachments of the session's first user message,
#     messages[0] (a resumed session's comes from the committed transcript): whole text blocks of
#     the run of <system-reminder> blocks that opens the message, before its last block (the
#     prompt, which the SDK sends as one block after them). The environment block is exactly
#         <system-reminder>\n# Environment\nYou have been invoked in the following environment: \n
#          - Primary working directory: ..\n - Is a git repository: ..\n - Platform: ..\n - Shell: ..
#          - OS Version: <kernel string>\n ...</system-reminder>
#     and in it the values of those lines (and Additional working directories / Working directory)
#     are replaced; the date block is exactly <system-reminder>\nToday's date is <YYYY-MM-DD>.\n</system-reminder>.
#     Each only when it is the one block of its kind before the prompt: when the user's content
#     holds a copy there, which one is the CLI's cannot be told, and none is normalised (a miss,
#     never a stale answer);
#   - the hand-back of a subagent: in the result of the CLI's Agent (Task) tool — only a
#     tool_result answering a tool_use of that name — the trailer the CLI writes at column zero
#     after the report (whose every line it indents): the random ``agentId: <id>`` and the wall
#     time ``duration_ms`` of its <usage> block, at the very end of the text block.
# Nothing else is: the system prompt (the CLI writes no machine facts there), the model id, the
# tokens-left reminder (a function of the recorded usage), the user's text and all other tool
# results stay part of the fingerprint. The seam counts the replacements (Run.normalised_parts:
# "normalised N volatile parts" in the summary).
CLAUDE_CLI_AGENT = "claude-cli/"
_ENVIRONMENT_BLOCK = re.compile(
    r"<system-reminder>\n# Environment\nYou have been invoked in the following environment: \n(.*)\n</system-reminder>\n?\Z", re.DOTALL
)
_ENVIRONMENT_FACTS = (
    re.compile(
        r"^ - (?:Primary working directory|Additional working directories|Working directory|Is a git repository|"
        r"Is directory a git repo|Platform|Shell|OS Version): (\S.*)$",
        re.MULTILINE,
    ),
)
_DATE_BLOCK = re.compile(r"<system-reminder>\nToday's date is (\S+?)\.\n</system-reminder>\n?\Z")
_REMINDER_BLOCK = re.compile(r"<system-reminder>\n.*\n</system-reminder>\n?\Z", re.DOTALL)
_AGENT_TOOLS = frozenset({"Agent", "Task"})
_HANDBACK_TRAILER = re.compile(
    r"\nagentId: ([0-9a-zA-Z_-]+)[^\n]*\n<usage>subagent_tokens: \d+\ntool_uses: \d+\nduration_ms: (\d+)</usage>\n?\Z"
)


def _text(block: Any) -> str | None:
    return block["text"] if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str) else None


def _normalise_attachments(content: Any) -> Any:
    """The first user message with the CLI's environment and date blocks normalised (see above)."""
    if not isinstance(content, list) or len(content) < 2:
        return content
    texts = [_text(b) for b in content]
    opening = 0  # the run of whole <system-reminder> blocks that opens the message, before its last block
    while opening < len(content) - 1 and (t := texts[opening]) is not None and _REMINDER_BLOCK.match(t):
        opening += 1
    out = list(content)
    for block, facts in ((_ENVIRONMENT_BLOCK, _ENVIRONMENT_FACTS), (_DATE_BLOCK, (_DATE_BLOCK,))):
        found = [i for i, t in enumerate(texts[:-1]) if t is not None and block.match(t)]
        if len(found) == 1 and found[0] < opening:
            i = found[0]
            out[i] = {**content[i], "text": normalise_volatile(texts[i] or "", facts)}
    return out


def _normalise_handback(content: Any) -> Any:
    """An Agent tool's result with the CLI's trailer (agentId, duration_ms) normalised."""
    if isinstance(content, str):
        return normalise_volatile(content, (_HANDBACK_TRAILER,))
    if not isinstance(content, list):
        return content
    return [{**b, "text": normalise_volatile(t, (_HANDBACK_TRAILER,))} if (t := _text(b)) is not None else b for b in content]


def _normalise_cli(body: dict[str, Any]) -> dict[str, Any]:
    """The body with the CLI's environment facts and subagent trailers replaced (see above)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return body
    agent_calls = {
        b.get("id")
        for m in messages
        if isinstance(m, dict) and m.get("role") == "assistant" and isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") in _AGENT_TOOLS
    }
    out = []
    for n, m in enumerate(messages):
        if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), list):
            content = _normalise_attachments(m["content"]) if n == 0 else m["content"]
            content = [
                {**b, "content": _normalise_handback(b.get("content"))}
                if isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") in agent_calls
                else b
                for b in content
            ]
            m = {**m, "content": content}
        out.append(m)
    return {**body, "messages": out}


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
