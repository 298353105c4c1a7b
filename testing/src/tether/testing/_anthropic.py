"""Anthropic Messages wire format."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ._common import Call, Ids, Protocol, Reply, RequestView, pieces, sse, text_of

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class AnthropicMessages(Protocol):
    name = "anthropic"
    provider = "anthropic"
    reports_cache_writes = True

    def read(self, call: Call) -> RequestView:
        body = call.body
        messages = [m for m in body.get("messages") or () if isinstance(m, Mapping)]
        first_user = next((text_of(_texts(m)) for m in messages if m.get("role") == "user"), "")
        calling = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and _blocks(m, "tool_use")]
        after = messages[calling[-1] + 1 :] if calling else []
        results = tuple(_result_text(b.get("content")) for m in after if m.get("role") == "user" for b in _blocks(m, "tool_result"))
        return RequestView(
            model=str(body.get("model") or ""),
            stream=bool(body.get("stream")),
            first_user_text=first_user,
            tool_turns=len(calling),
            tool_names=tuple(t["name"] for t in body.get("tools") or () if isinstance(t, Mapping) and isinstance(t.get("name"), str)),
            tool_results=results,
            system_text=text_of(body.get("system")),
        )

    def response_id(self, ids: Ids) -> str:
        return "msg_01" + ids.alnum(22)

    def tool_call_id(self, ids: Ids) -> str:
        return "toolu_01" + ids.alnum(22)

    def error(self, status: int, message: str) -> dict[str, Any]:
        kind = _ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"}

    def render(self, reply: Reply, call: Call, ids: Ids) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reply.text is not None:
            content.append({"type": "text", "text": reply.text})
        content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)} for c in reply.tool_calls]
        return {
            **self._message(reply),
            "content": content,
            "stop_reason": _stop_reason(reply),
            "usage": _usage(reply, reply.usage.output_tokens),
        }

    def frames(self, reply: Reply, call: Call, ids: Ids) -> list[bytes]:
        def event(kind: str, **fields: Any) -> bytes:
            return sse({"type": kind, **fields}, event=kind)

        start = {**self._message(reply), "content": [], "stop_reason": None, "usage": _usage(reply, 1)}
        out = [event("message_start", message=start)]
        index = 0
        if reply.text is not None:
            out.append(event("content_block_start", index=0, content_block={"type": "text", "text": ""}))
            out.append(event("ping"))
            out += [event("content_block_delta", index=0, delta={"type": "text_delta", "text": p}) for p in pieces(reply.text)]
            out.append(event("content_block_stop", index=0))
            index = 1
        for offset, c in enumerate(reply.tool_calls):
            i = index + offset
            block = {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}
            out.append(event("content_block_start", index=i, content_block=block))
            out += [
                event("content_block_delta", index=i, delta={"type": "input_json_delta", "partial_json": p})
                for p in pieces(c.arguments_json)
            ]
            out.append(event("content_block_stop", index=i))
        delta = {"stop_reason": _stop_reason(reply), "stop_sequence": None}
        out.append(event("message_delta", delta=delta, usage=_usage(reply, reply.usage.output_tokens)))
        out.append(event("message_stop"))
        return out

    @staticmethod
    def _message(reply: Reply) -> dict[str, Any]:
        return {"id": reply.id, "type": "message", "role": "assistant", "model": reply.model, "stop_sequence": None}


def _usage(reply: Reply, output_tokens: int) -> dict[str, Any]:
    u = reply.usage
    return {
        # Anthropic's input_tokens exclude what was read from or written to the cache.
        "input_tokens": u.uncached_input_tokens,
        "cache_creation_input_tokens": u.cache_write_tokens,
        "cache_read_input_tokens": u.cached_tokens,
        "cache_creation": {"ephemeral_5m_input_tokens": u.cache_write_tokens, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def _stop_reason(reply: Reply) -> str:
    return "tool_use" if reply.tool_calls else "end_turn"


def _blocks(message: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, Mapping) and b.get("type") == kind]


def _texts(message: Mapping[str, Any]) -> Any:
    content = message.get("content")
    return content if isinstance(content, str) else _blocks(message, "text")


#: What the Claude CLI appends to a tool result for the model (token budget notes...): not the
#: tool's output, so an answer quoting the results leaves it out, as a real model's would.
_REMINDER = re.compile(r"\s*<system-reminder>.*?</system-reminder>\s*", re.DOTALL)


def _result_text(content: Any) -> str:
    text = text_of(content) if isinstance(content, (str, list)) else json.dumps(content)
    return _REMINDER.sub("", text)
