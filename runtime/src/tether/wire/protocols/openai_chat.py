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
# Hermes writes facts about the host, its home and the day into the system prompt of every request.
# A retry on another node, another day or in another Hermes home must still replay, so for
# requests whose User-Agent says ``HermesAgent/`` (Hermes' own User-Agent, which tether-hermes has
# it send: the OpenAI SDK's default names no client) — and only those — these values are replaced
# by NORMALISED before fingerprinting. The user's own instructions sit in the same string, and may
# hold lines of the same shape (issue 23: a changed "Conversation started: ..." line of the user's
# replayed an answer to the old instructions), so a fact is located by Hermes' template, never by
# its shape alone. The rule (hermes-agent 0.19: agent/system_prompt.py build_system_prompt,
# agent/conversation_loop.py): Hermes sends one system message, messages[0], whose text is
#     {stable tier}\n\n{context tier}\n\n{volatile tier}[\n\n{ephemeral_system_prompt}]
#   stable    Hermes' identity and guidance; its environment hints: the host block
#                 Host: Linux (<kernel release>)\nUser home directory: <~>\nCurrent working directory: <cwd>
#             then the embedder's HERMES_ENVIRONMENT_HINT, if set; last, the profile paragraph
#                 Active Hermes profile: default. Other profiles (if any) live under <HERMES_HOME>/profiles/<name>/. ...
#   context   a bring-your-own agent's system_message, context files: the user's text
#   volatile  memory blocks, then the date block
#                 Conversation started: Thursday, December 03, 2026[\nSession ID: <id>][\nModel: ..][\nProvider: ..]
#   ephemeral the agent's instructions (the declarative adapter's `instructions`): the user's text.
# So, each a whole paragraph (Hermes joins its parts with a blank line):
#   - the profile paragraph is the pivot, the end of the stable tier: it is normalised (the home)
#     only when it is the one line in the message that starts "Active Hermes profile:";
#   - the host block is normalised only before the pivot, and only when it is the one host block
#     there (nothing of the user's stands before it; the embedder's hint comes after it);
#   - the date block is normalised only after the pivot, and only when it is the one line there
#     that starts "Conversation started:" — the user's text stands on both sides of Hermes' block,
#     so when it holds another, which one is Hermes' cannot be told from the text.
# Whatever cannot be located so is left alone: the request keeps the fact, and a retry on another
# day or node goes live (a miss, never a stale answer). User messages, tool results and every
# other message are never touched. The seam counts the replacements (Run.normalised_parts).
HERMES_AGENT = "HermesAgent/"
_PARAGRAPH_START = r"(?:\A|(?<=\n\n))"
_PARAGRAPH_END = r"(?=\n\n|\Z)"
_HERMES_PROFILE_KIND = re.compile(r"^Active Hermes profile:", re.MULTILINE)
_HERMES_PROFILE = re.compile(
    _PARAGRAPH_START + r"Active Hermes profile: default\. Other profiles \(if any\) live under ([^\n]+?)/profiles/<name>/\. "
    r"Each profile has its own skills/, plugins/, cron/, and memories/ that affect a different session than this one\. "
    r"Do not modify another profile's skills/plugins/cron/memories unless the user explicitly directs you to\." + _PARAGRAPH_END
)
_HERMES_HOST_KIND = re.compile(r"^Host: [^\n]*\nUser home directory: ", re.MULTILINE)
_HERMES_HOST = re.compile(
    _PARAGRAPH_START + r"Host: ([^\n]+)\nUser home directory: ([^\n]+)(?:\nCurrent working directory: ([^\n]+))?" + _PARAGRAPH_END
)
_HERMES_DATE_KIND = re.compile(r"^Conversation started:", re.MULTILINE)
_HERMES_DATE = re.compile(
    _PARAGRAPH_START + r"Conversation started: (\w+, \w+ \d{2}, \d{4})(?:\nSession ID: ([^\n]+))?"
    r"(?:\nModel: [^\n]+)?(?:\nProvider: [^\n]+)?" + _PARAGRAPH_END
)


def _only(kind: re.Pattern[str], exact: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The whole ``exact`` paragraph in ``text`` when ``text`` holds exactly one line of ``kind``."""
    return exact.search(text) if len(kind.findall(text)) == 1 else None


def _normalise_hermes_prompt(text: str) -> str:
    """Hermes' system prompt with its host, home and date facts replaced where its template puts them."""
    pivot = _only(_HERMES_PROFILE_KIND, _HERMES_PROFILE, text)
    if pivot is None:
        return text
    stable, after = text[: pivot.start()], text[pivot.end() :]
    if _only(_HERMES_HOST_KIND, _HERMES_HOST, stable):
        stable = normalise_volatile(stable, (_HERMES_HOST,))
    if _only(_HERMES_DATE_KIND, _HERMES_DATE, after):
        after = normalise_volatile(after, (_HERMES_DATE,))
    return stable + normalise_volatile(pivot.group(0), (_HERMES_PROFILE,)) + after


def _normalise_hermes(messages: Any) -> Any:
    """Hermes' messages with its host, home and date facts replaced in its system prompt (messages[0])."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[0], dict) or messages[0].get("role") != "system":
        return messages
    system, content = messages[0], messages[0].get("content")
    if isinstance(content, str):
        system = {**system, "content": _normalise_hermes_prompt(content)}
    elif isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict) and isinstance(content[0].get("text"), str):
        # Hermes' prompt-caching form: the same one string as a single text part with cache_control.
        system = {**system, "content": [{**content[0], "text": _normalise_hermes_prompt(content[0]["text"])}]}
    return [system, *messages[1:]]


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
