"""Gemini: ``POST /{v1,v1beta,v1alpha}/models/{model}:generateContent`` and ``:streamGenerateContent``.

Vertex paths (``.../publishers/google/models/{model}:...``) and ``tunedModels/{m}`` match too.
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

# Body keys that never change the answer (on top of COMMON_DROPPED_KEYS, which Gemini does not use).
DROPPED_KEYS = COMMON_DROPPED_KEYS | {
    "labels",  # Vertex billing labels: bookkeeping, never seen by the model
}
# Kept on purpose: `safetySettings` (can block or alter the answer), `cachedContent` (names the
# cached context the model reads), `systemInstruction`, `generationConfig`, `toolConfig`.

# Only headers that change the answer are kept; Gemini has none (x-goog-api-key, authorization,
# x-goog-api-client and x-goog-user-project are dropped).
KEPT_HEADERS: frozenset[str] = frozenset()
# Credentials in the query: the API key and an OAuth token. `alt` (sse vs a JSON array) is kept:
# it changes the framing of the response.
DROPPED_QUERY = frozenset({"key", "access_token"})

_TURN = re.compile(r"(^|/)(?:models|tunedModels)/([^/:]+):(generateContent|streamGenerateContent)$")


def _declarations(tool: Any) -> Any:
    return get_path(tool, "functionDeclarations") or get_path(tool, "function_declarations")


def _tool_name(tool: Any) -> str:
    # A function declaration {"name": ...}; a tool object {"functionDeclarations": [...]} is named
    # by its first (sorted) declaration; {"googleSearch": {}} and the like sort by their JSON.
    decls = _declarations(tool)
    name = get_path(tool, "name") or (_tool_name(decls[0]) if isinstance(decls, list) and decls else "")
    return name if isinstance(name, str) else ""


def _tools(tools: Any) -> Any:
    if not isinstance(tools, list):
        return tools
    sorted_inside = []
    for tool in tools:
        for key in ("functionDeclarations", "function_declarations"):  # JSON API accepts both
            if isinstance(get_path(tool, key), list):
                tool = {**tool, key: sort_by_name(tool[key], _tool_name)}
        sorted_inside.append(tool)
    return sort_by_name(sorted_inside, _tool_name)


def _body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValueError("generateContent request body is not a JSON object")
    out = drop_keys(body, DROPPED_KEYS)
    if "tools" in out:
        out["tools"] = _tools(out["tools"])
    return out


def _usage(usage: Any) -> Usage:
    # promptTokenCount includes cachedContentTokenCount; tool-use prompt tokens (e.g. search results
    # fed back in) are input on top of it. Thoughts are billed as output, apart from candidates.
    cached = positive_int(get_path(usage, "cachedContentTokenCount"))
    prompt = positive_int(get_path(usage, "promptTokenCount")) + positive_int(get_path(usage, "toolUsePromptTokenCount"))
    return Usage(
        input_tokens=max(0, prompt - cached),
        output_tokens=positive_int(get_path(usage, "candidatesTokenCount")) + positive_int(get_path(usage, "thoughtsTokenCount")),
        cached_input_tokens=cached,
    )


def _stream_usage(body: bytes) -> Usage:
    # alt=sse gives SSE events, no alt a JSON array of chunks; the last usageMetadata is complete.
    events = json.loads(body) if body.lstrip().startswith(b"[") else sse_data(body)
    found = [get_path(event, "usageMetadata") for event in events]
    found = [usage for usage in found if isinstance(usage, dict)]
    return _usage(found[-1]) if found else Usage()


class Gemini(WireProtocol):
    name = "gemini"
    provider = "gemini"

    def is_model_turn(self, method: str, path: str) -> bool:
        return method.upper() == "POST" and bool(_TURN.search(route(path)))

    def canonical_request(self, path: str, query: Mapping[str, str], headers: Mapping[str, str], body: Any) -> dict[str, Any]:
        return {
            "path": path,
            "query": kept_query(query, DROPPED_QUERY),
            "headers": kept_headers(headers, KEPT_HEADERS),
            "body": _body(body),
        }

    def is_streaming(self, path: str, query: Mapping[str, str], body: Any) -> bool:
        match = _TURN.search(route(path))
        return match is not None and match.group(3) == "streamGenerateContent"

    def usage(self, body: bytes, streamed: bool) -> Usage:
        try:
            # The seam says "streamed" only for SSE; without alt=sse a stream is a JSON array.
            chunked = streamed or body.lstrip().startswith(b"[")
            return _stream_usage(body) if chunked else _usage(get_path(json.loads(body), "usageMetadata"))
        except Exception:  # never raise: usage is bookkeeping, the response itself is fine
            return Usage()

    def model(self, path: str, body: Any) -> str:
        match = _TURN.search(route(path))
        return match.group(2) if match else ""


PROTOCOL = Gemini()
PROTOCOLS = (PROTOCOL,)
