"""Gemini: ``POST /{v1,v1beta,v1alpha}/models/{model}:generateContent`` and ``:streamGenerateContent``.

Vertex paths (``.../publishers/google/models/{model}:...``) and ``tunedModels/{m}`` match too.
"""

from __future__ import annotations

import re
from typing import Any

from .base import COMMON_DROPPED_KEYS, UsageFields, WireProtocol, get_path, sort_by_name

# The JSON API accepts both spellings of a tool's function declarations.
_DECLARATIONS = ("functionDeclarations", "function_declarations")


class Gemini(WireProtocol):
    name = "gemini"
    provider = "gemini"
    # The path names the model, and whether the answer is streamed.
    turn = re.compile(r"(^|/)(?:models|tunedModels)/(?P<model>[^/:]+):(?:generateContent|(?P<stream>streamGenerateContent))$")
    # Body keys that never change the answer (on top of COMMON_DROPPED_KEYS, which Gemini does not use).
    dropped_keys = COMMON_DROPPED_KEYS | {
        "labels",  # Vertex billing labels: bookkeeping, never seen by the model
    }
    # Kept on purpose: `safetySettings` (can block or alter the answer), `cachedContent` (names the
    # cached context the model reads), `systemInstruction`, `generationConfig`, `toolConfig`.
    # No header changes the answer (x-goog-api-key, authorization, x-goog-api-client and
    # x-goog-user-project are dropped). Credentials in the query: the API key and an OAuth token.
    # `alt` (sse vs a JSON array) is kept: it changes the framing of the response.
    dropped_query = frozenset({"key", "access_token"})
    # promptTokenCount includes cachedContentTokenCount; tool-use prompt tokens (e.g. search results
    # fed back in) are input on top of it. Thoughts are billed as output, apart from candidates.
    # A stream (SSE with alt=sse, else a JSON array of chunks): the last usageMetadata is complete.
    usage_fields = UsageFields(
        input=("promptTokenCount", "toolUsePromptTokenCount"),
        output=("candidatesTokenCount", "thoughtsTokenCount"),
        cached=("cachedContentTokenCount",),
    )
    usage_at = stream_usage_at = "usageMetadata"
    array_streams = True
    response_id_at = ("responseId",)
    finish_reason_at = ("candidates.*.finishReason",)

    def tool_name(self, tool: Any) -> str:
        # A function declaration {"name": ...}; a tool object {"functionDeclarations": [...]} is named
        # by its first (sorted) declaration; {"googleSearch": {}} and the like sort by their JSON.
        decls = get_path(tool, _DECLARATIONS[0]) or get_path(tool, _DECLARATIONS[1])
        name = get_path(tool, "name") or (self.tool_name(decls[0]) if isinstance(decls, list) and decls else "")
        return name if isinstance(name, str) else ""

    def canonical_tools(self, tools: Any) -> Any:
        if not isinstance(tools, list):
            return tools
        sorted_inside = []
        for tool in tools:
            for key in _DECLARATIONS:
                if isinstance(get_path(tool, key), list):
                    tool = {**tool, key: sort_by_name(tool[key], self.tool_name)}
            sorted_inside.append(tool)
        return super().canonical_tools(sorted_inside)


PROTOCOL = Gemini()
PROTOCOLS = (PROTOCOL,)
