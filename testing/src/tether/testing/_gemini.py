"""Gemini (Google AI) ``generateContent`` / ``streamGenerateContent`` wire format."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ._common import Call, Ids, Protocol, Reply, RequestError, RequestView, pieces, sse, text_of

_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class Gemini(Protocol):
    """The model and the method come from the path: ``models/{model}:{generateContent|streamGenerateContent}``.

    Streams are always SSE (what ``?alt=sse`` asks for and google-genai always sends).
    """

    name = "gemini"
    provider = "gemini"

    def read(self, call: Call) -> RequestView:
        model, _, method = call.path_params["model_method"].partition(":")
        if method not in ("generateContent", "streamGenerateContent"):
            raise RequestError(404, f"Method {method or '(none)'} is not served by the fake provider.")
        contents = [c for c in call.body.get("contents") or () if isinstance(c, Mapping)]
        first_user = next((t for c in contents if c.get("role", "user") == "user" for t in [_text(c)] if t), "")
        calling = [i for i, c in enumerate(contents) if c.get("role") == "model" and _parts(c, "functionCall")]
        after = contents[calling[-1] + 1 :] if calling else []
        results = tuple(_result_text(p["functionResponse"]) for c in after for p in _parts(c, "functionResponse"))
        instruction = call.body.get("systemInstruction")  # a Content, or (REST allows it) plain text
        return RequestView(
            model=model,
            stream=method == "streamGenerateContent",
            first_user_text=first_user,
            tool_turns=len(calling),
            tool_results=results,
            system_text=_text(instruction) if isinstance(instruction, Mapping) else text_of(instruction),
        )

    def response_id(self, ids: Ids) -> str:
        return ids.alnum(22)

    def tool_call_id(self, ids: Ids) -> str:
        return ids.alnum(8).lower()

    def error(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"code": status, "message": message, "status": _STATUSES.get(status, "UNKNOWN")}}

    def render(self, reply: Reply, call: Call, ids: Ids) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        if reply.text is not None:
            parts.append({"text": reply.text})
        parts += [_function_call(c) for c in reply.tool_calls]
        return self._chunk(reply, parts, finished=True)

    def frames(self, reply: Reply, call: Call, ids: Ids) -> list[bytes]:
        # Text arrives in several chunks; function calls arrive whole, in the last chunk.
        chunks = [[{"text": p}] for p in pieces(reply.text or "")] or [[]]
        chunks[-1] = chunks[-1] + [_function_call(c) for c in reply.tool_calls]
        last = len(chunks) - 1
        return [sse(self._chunk(reply, parts, finished=i == last), crlf=True) for i, parts in enumerate(chunks)]

    @staticmethod
    def _chunk(reply: Reply, parts: list[dict[str, Any]], finished: bool) -> dict[str, Any]:
        u = reply.usage
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        # Like the real API, every chunk reports usage; only the final one is complete.
        usage: dict[str, Any] = {
            "promptTokenCount": u.input_tokens,
            "totalTokenCount": u.input_tokens,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": u.input_tokens}],
        }
        if finished:
            candidate["finishReason"] = "STOP"
            usage.update(candidatesTokenCount=u.output_tokens, totalTokenCount=u.total_tokens)
            if u.cached_tokens:
                usage["cachedContentTokenCount"] = u.cached_tokens
                usage["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": u.cached_tokens}]
        return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": reply.model, "responseId": reply.id}


def _function_call(call: Any) -> dict[str, Any]:
    return {"functionCall": {"id": call.id, "name": call.name, "args": dict(call.arguments)}}


def _parts(content: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    return [p for p in content.get("parts") or () if isinstance(p, Mapping) and key in p]


def _text(content: Mapping[str, Any]) -> str:
    return "".join(str(p["text"]) for p in _parts(content, "text"))


def _result_text(function_response: Mapping[str, Any]) -> str:
    """The tool's answer: the conventional ``result``/``output`` key when there is one."""
    response = function_response.get("response")
    if isinstance(response, Mapping):
        for key in ("result", "output", "content"):
            if key in response and len(response) == 1:
                value = response[key]
                return value if isinstance(value, str) else json.dumps(value)
    return json.dumps(response)
