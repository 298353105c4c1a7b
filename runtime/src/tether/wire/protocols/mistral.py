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


# Entries a client sends (an append's inputs); every other entry type is the server's answer.
_INPUT_ENTRIES = frozenset({"message.input", "function.result"})
_APPEND = re.compile(r"(^|/)conversations/(?P<id>[^/]+)$")


def _results(body: Any) -> set[str]:
    """The tool-call ids an append answers (its ``function.result`` inputs)."""
    inputs = get_path(body, "inputs")
    entries = inputs if isinstance(inputs, list) else []
    return {e["tool_call_id"] for e in entries if get_path(e, "type") == "function.result" and isinstance(get_path(e, "tool_call_id"), str)}


def _event(kind: str, **fields: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields}, separators=(',', ':'))}\n\n".encode()


def _as_stream(conversation_id: str, outputs: list[dict[str, Any]]) -> bytes | None:
    """The event stream the server sends for ``outputs``: each entry whole, in one delta."""
    events = [_event("conversation.response.started", conversation_id=conversation_id)]
    for index, e in enumerate(outputs):
        common = {"output_index": index, "id": e.get("id", ""), "model": e.get("model"), "agent_id": e.get("agent_id")}
        if e.get("type") == "message.output":
            events.append(_event("message.output.delta", **common, content_index=0, role="assistant", content=e.get("content", "")))
        elif e.get("type") == "function.call":
            fields = {"name": e.get("name", ""), "tool_call_id": e.get("tool_call_id", ""), "arguments": e.get("arguments", "")}
            events.append(_event("function.call.delta", **common, **fields))
        elif e.get("type") == "agent.handoff":  # a server-side agent handed the conversation on
            previous = {k: e.get(k, "") for k in ("previous_agent_id", "previous_agent_name")}
            events.append(_event("agent.handoff.started", output_index=index, id=e.get("id", ""), **previous))
            following = {k: e.get(k, "") for k in ("next_agent_id", "next_agent_name")}
            events.append(_event("agent.handoff.done", output_index=index, id=e.get("id", ""), **following))
        else:  # tool executions stream as several event kinds: not rebuilt
            return None
    events.append(_event("conversation.response.done", usage={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}))
    return b"".join(events)


class MistralConversations(Mistral):
    """Conversations keep their history on Mistral's server: an append sends only the new entries.

    The rule for an append that carries function results (every turn after a tool call): before it
    is sent live, the conversation is read back (``GET /v1/conversations/{id}/history``). A
    function result whose ``tool_call_id`` is already in the history means this very append reached
    the server in an attempt that died before recording its answer (tool-call ids are generated by
    the server, unique in a conversation, and an append is taken whole). Its answer is then the
    entries the server added after those results, up to the next input entry; the seam records
    them as the turn's answer instead of appending the results again, which would put them in the
    conversation twice. An append of user messages only is sent as is: a message repeated on
    purpose cannot be told apart from one sent twice.
    """

    def response_model(self, body: bytes, streamed: bool) -> str:
        # An append names no model (the conversation has one); every output entry (or delta) does.
        try:
            found = list(sse_data(body)) if streamed else (get_path(json.loads(body), "outputs") or [])
        except ValueError:
            return ""
        names = [m for e in found if isinstance(m := get_path(e, "model"), str) and m]
        return names[0] if names else ""

    def landed_check(self, path: str, body: Any) -> str | None:
        if not _APPEND.search(route(path)) or not _results(body):
            return None
        return f"{route(path)}/history"

    def answer_from_state(self, path: str, body: Any, state: bytes, streamed: bool) -> bytes | None:
        try:
            history = json.loads(state)
            entries = [e for e in history["entries"] if isinstance(e, dict)]
        except (ValueError, KeyError, TypeError):
            return None
        ids = _results(body)
        taken = [i for i, e in enumerate(entries) if e.get("type") == "function.result" and e.get("tool_call_id") in ids]
        if not taken:
            return None
        outputs: list[dict[str, Any]] = []
        for e in entries[max(taken) + 1 :]:
            if e.get("type") in _INPUT_ENTRIES:
                break
            outputs.append(e)
        if not outputs:
            return None  # taken without an answer: nothing to hand back
        conversation_id = str(history.get("conversation_id") or route(path).rsplit("/", 1)[-1])
        if streamed:
            return _as_stream(conversation_id, outputs)
        zero = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        return json.dumps(
            {"object": "conversation.response", "conversation_id": conversation_id, "outputs": outputs, "usage": zero}
        ).encode()


CHAT = Mistral("mistral-chat", _CHAT_TURN, CHAT_DROPPED_KEYS)
CONVERSATIONS = MistralConversations("mistral-conversations", _CONVERSATION_TURN, CONVERSATION_DROPPED_KEYS)
PROTOCOLS = (CHAT, CONVERSATIONS)
