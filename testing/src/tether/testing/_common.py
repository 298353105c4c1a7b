"""What every fake wire format shares: the request view, the reply, ids, usage, SSE framing."""

from __future__ import annotations

import json
import random
import string
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_ALNUM = string.ascii_letters + string.digits


class RequestError(Exception):
    """The request cannot be answered; sent as the provider's error JSON with ``status``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Call:
    """One HTTP request as a protocol sees it."""

    body: dict[str, Any]
    raw: bytes
    path_params: Mapping[str, str]
    query: Mapping[str, str]


@dataclass(frozen=True)
class RequestView:
    """What the script needs to know about a request, whatever the protocol."""

    model: str
    stream: bool
    first_user_text: str
    #: Assistant turns that already asked for tools: the index of the turn to answer with.
    tool_turns: int
    #: Tool results sent since the last tool-calling turn (for ``text_from_tool_results``).
    tool_results: tuple[str, ...] = ()
    #: The system instructions (for a conversation's ``system`` match: which agent is asking).
    system_text: str = ""
    #: Names of the tools the request offers (where the protocol reads them).
    tool_names: tuple[str, ...] = ()
    #: The server-side agent answering (a Mistral agent's id), or "" for a bare model.
    agent: str = ""

    def offered_name(self, scripted: str) -> str:
        """The name to call a scripted tool by: itself, or the MCP tool ``mcp__<server>__<name>``
        the request offers instead (Claude Code names MCP tools so), as a real model would."""
        if scripted in self.tool_names:
            return scripted
        return next((n for n in self.tool_names if n.startswith("mcp__") and n.endswith(f"__{scripted}")), scripted)


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: Mapping[str, Any]

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, separators=(",", ":"))


@dataclass(frozen=True)
class TokenUsage:
    """Usage of one turn. ``input_tokens`` counts every prompt token, cached or written included."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def uncached_input_tokens(self) -> int:
        return max(0, self.input_tokens - self.cached_tokens - self.cache_write_tokens)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def normalised(self) -> dict[str, int]:
        """Named and split like ``tether.usage.Usage``: ``input_tokens`` are the
        uncached ones, so a ledger entry compares directly with what the seam reads."""
        return {
            "input_tokens": self.uncached_input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }


@dataclass(frozen=True)
class Reply:
    """The model's answer, before a protocol puts it into its wire shape."""

    id: str
    model: str
    text: str | None
    tool_calls: tuple[ToolCall, ...]
    usage: TokenUsage
    created: int = field(default_factory=lambda: int(time.time()))
    #: The server-side agent that gave this answer (``RequestView.agent``).
    agent: str = ""
    #: Answers of the agents that handed the conversation on before this one answered, in order
    #: (Mistral agents hand off on the server, inside one response).
    chain: tuple[Reply, ...] = ()


class Ids:
    """Random ids like real providers hand out; reproducible per request body when seeded."""

    def __init__(self, seed: int | None, body_sha256: str):
        self._rng = random.Random(f"{seed}:{body_sha256}" if seed is not None else uuid.uuid4().int)

    def alnum(self, n: int) -> str:
        return "".join(self._rng.choice(_ALNUM) for _ in range(n))

    def hex(self, n: int) -> str:
        return "".join(self._rng.choice("0123456789abcdef") for _ in range(n))


class Protocol:
    """One wire format. Subclasses build views from request bodies and replies in their shape.

    Instances live as long as their server: stateful formats (OpenAI ``previous_response_id``,
    Mistral conversations) keep that state on the instance.
    """

    name: str
    provider: str
    #: Only Anthropic reports prompt-cache writes.
    reports_cache_writes = False

    def read(self, call: Call) -> RequestView:
        raise NotImplementedError

    def response_id(self, ids: Ids) -> str:
        raise NotImplementedError

    def tool_call_id(self, ids: Ids) -> str:
        raise NotImplementedError

    def render(self, reply: Reply, call: Call, ids: Ids) -> dict[str, Any]:
        """The non-streamed response body."""
        raise NotImplementedError

    def frames(self, reply: Reply, call: Call, ids: Ids) -> list[bytes]:
        """The streamed response as SSE frames, terminator included."""
        raise NotImplementedError

    def error(self, status: int, message: str) -> dict[str, Any]:
        raise NotImplementedError

    def commit(self, view: RequestView, reply: Reply, call: Call) -> None:
        """Remember a successful turn (stateful formats only)."""

    def handoff(self, view: RequestView, target: str, call: Call) -> RequestView:
        """The view of the agent ``view.agent`` hands the conversation to (a scripted ``handoff``
        turn): only formats with server-side agents have handoffs."""
        raise RequestError(400, f"fake provider: {self.name} has no server-side agents to hand off to ({target!r})")

    def reset(self) -> None:
        """Forget remembered state."""


# --- helpers shared by the formats ---------------------------------------------------------------


def sse(data: Any, event: str | None = None, *, crlf: bool = False) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    nl = "\r\n" if crlf else "\n"
    head = f"event: {event}{nl}" if event else ""
    return f"{head}data: {payload}{nl}{nl}".encode()


def pieces(text: str, n: int = 3) -> list[str]:
    """``text`` cut into up to ``n`` non-empty deltas, so streams have a middle to break in."""
    if not text:
        return []
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def text_of(content: Any) -> str:
    """Text of a message content: a string, or a list of parts that carry ``text``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        return text_of(content.get("text", ""))
    if isinstance(content, Sequence):
        return "".join(text_of(p) for p in content if isinstance(p, (str, Mapping)))
    return str(content)


def chat_messages_view(body: Mapping[str, Any]) -> RequestView:
    """View of an OpenAI-style ``messages`` list (OpenAI and Mistral chat completions)."""
    messages = [m for m in body.get("messages") or () if isinstance(m, Mapping)]
    first_user = next((text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")
    calling = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and (m.get("tool_calls") or m.get("function_call"))]
    after = messages[calling[-1] + 1 :] if calling else []
    results = tuple(text_of(m.get("content")) for m in after if m.get("role") in ("tool", "function"))
    return RequestView(
        model=str(body.get("model") or ""),
        stream=bool(body.get("stream")),
        first_user_text=first_user,
        tool_turns=len(calling),
        tool_results=results,
        system_text="\n".join(text_of(m.get("content")) for m in messages if m.get("role") in ("system", "developer")),
    )


def chat_usage(reply: Reply) -> dict[str, Any]:
    """``usage`` as chat completions report it (Mistral's shape; OpenAI's adds detail keys)."""
    u = reply.usage
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.total_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


class ChatCompletions(Protocol):
    """What OpenAI's and Mistral's chat completions share: the request's ``messages``, the
    response envelope and the finish reason. A subclass states its provider's ids, errors and
    the rest of its body."""

    def read(self, call: Call) -> RequestView:
        return chat_messages_view(call.body)

    def envelope(self, reply: Reply, obj: str) -> dict[str, Any]:
        return {"id": reply.id, "object": obj, "created": reply.created, "model": reply.model}

    @staticmethod
    def finish_reason(reply: Reply) -> str:
        return "tool_calls" if reply.tool_calls else "stop"


def generated_length(text: str | None, tool_calls: Sequence[ToolCall]) -> int:
    return len(text or "") + sum(len(c.arguments_json) for c in tool_calls)
