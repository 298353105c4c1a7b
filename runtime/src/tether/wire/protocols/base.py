"""What every wire protocol module provides.

A protocol module knows one provider wire format (OpenAI Chat Completions, OpenAI Responses,
Anthropic Messages, Gemini generateContent, Mistral chat/conversations). It never does I/O: the
wire seam (``tether.wire.seam``) asks it four questions about a request or a response.

Paths are relative to the provider's base (``/v1/chat/completions``, ``/v1beta/models/m:generateContent``).
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

# Keys never part of a fingerprint, whatever the protocol: they identify the caller or the call,
# not what the model is asked.
COMMON_DROPPED_KEYS = frozenset({"user", "metadata", "safety_identifier", "prompt_cache_key", "store"})

#: What a protocol puts in a canonical request where it left a volatile value out (a date, a
#: kernel string); the seam counts these (``Run.normalised_parts``).
NORMALISED = "<tether:normalised>"


@dataclass(frozen=True)
class Usage:
    """Tokens of one model turn, normalised across providers.

    ``input_tokens`` are the uncached input tokens billed at the full input price;
    ``cached_input_tokens`` were read from the provider's prompt cache; ``cache_write_tokens``
    were written to it; ``output_tokens`` include reasoning tokens.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(a + b for a, b in zip(self.astuple(), other.astuple(), strict=True)))

    def astuple(self) -> tuple[int, int, int, int]:
        return (self.input_tokens, self.output_tokens, self.cached_input_tokens, self.cache_write_tokens)

    @property
    def total(self) -> int:
        return sum(self.astuple())

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class WireProtocol(ABC):
    """One provider wire format. Stateless; one shared instance per module."""

    #: Short id, e.g. ``"openai-chat"``.
    name: str
    #: The provider whose upstream serves it: ``openai``, ``anthropic``, ``gemini`` or ``mistral``.
    provider: str

    @abstractmethod
    def is_model_turn(self, method: str, path: str) -> bool:
        """True when ``method path`` asks the model for a turn (and so is journaled)."""

    @abstractmethod
    def canonical_request(self, path: str, query: Mapping[str, str], headers: Mapping[str, str], body: Any) -> dict[str, Any]:
        """The part of the request that can change the answer, and nothing else.

        No credentials, request/trace ids, user/metadata/safety/cache identifiers. Tool schemas
        sorted by name. Header names lower-case; only headers that change the answer (e.g.
        ``anthropic-version``/``anthropic-beta``) are kept. The result is JSON-able; the seam
        canonicalises key order itself. Raise ``ValueError`` for a body the module does not
        understand: the seam then passes the request through unrecorded.
        """

    def is_streaming(self, path: str, query: Mapping[str, str], body: Any) -> bool:
        """True when the response will be an event stream (SSE). Default: the body's ``stream``."""
        return get_path(body, "stream") is True

    @abstractmethod
    def usage(self, body: bytes, streamed: bool) -> Usage:
        """Usage read from a successful response body (the whole SSE text when streamed).

        Never raises: an unreadable body gives ``Usage()``.
        """

    def model(self, path: str, body: Any) -> str:
        """The model name asked for (for the price table); ``""`` if unknown. Default: the body's ``model``."""
        model = get_path(body, "model")
        return model if isinstance(model, str) else ""

    def response_model(self, body: bytes, streamed: bool) -> str:
        """The model named by a successful answer, for turns whose request names none (a
        conversation append). Never raises; ``""`` if unknown."""
        return ""

    def landed_check(self, path: str, body: Any) -> str | None:
        """For a turn that adds to state kept on the provider's server (a conversation append):
        the path (under the same upstream) to read that state back before sending the turn live,
        so a turn the server already took — in an attempt that died before recording it — is not
        sent twice. Default ``None``: the request carries all its context, nothing to check."""
        return None

    def answer_from_state(self, path: str, body: Any, state: bytes, streamed: bool) -> bytes | None:
        """The answer the server gave to this turn, rebuilt from ``state`` (the body read from
        :meth:`landed_check`'s path), when the turn is already there; ``None`` when it is not
        (the seam then sends it live)."""
        return None


def sse_data(body: bytes) -> Iterator[Any]:
    """Yield the JSON payload of each ``data:`` event of an SSE body; skips ``[DONE]`` and non-JSON."""
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].lstrip() for line in block.split(b"\n") if line.startswith(b"data:"))
        if not data or data == b"[DONE]":
            continue
        try:
            yield json.loads(data)
        except ValueError:
            continue


def drop_keys(obj: Mapping[str, Any], keys: frozenset[str] | set[str]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in keys}


def sort_by_name(tools: Any, name_of: Callable[[Any], str] = lambda t: t.get("name") or t.get("function", {}).get("name") or "") -> Any:
    """Tool schemas sorted by name, so the order an SDK lists them in never changes a fingerprint."""
    if not isinstance(tools, list):
        return tools
    return sorted(tools, key=lambda t: (name_of(t) if isinstance(t, dict) else "", json.dumps(t, sort_keys=True)))


def get_path(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]...``, or ``None`` as soon as a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def positive_int(value: Any) -> int:
    """A token count as reported, or 0 for anything that is not a positive int."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def route(path: str) -> str:
    """The path without query, fragment (the Mistral SDK appends ``#stream``) or trailing slash."""
    return path.split("?", 1)[0].split("#", 1)[0].rstrip("/")


def kept_headers(headers: Mapping[str, str] | None, kept: frozenset[str]) -> dict[str, str]:
    """Only the headers that change the answer, names lower-cased."""
    return {k.lower(): v for k, v in (headers or {}).items() if k.lower() in kept}


def sent_by(headers: Mapping[str, str] | None, user_agent: str) -> bool:
    """True when the request's User-Agent starts with ``user_agent``: how a protocol tells the
    one client whose volatile request parts it normalises from every other (whose fingerprints
    it leaves alone). Header names are lower-case, as ``canonical_request`` gets them."""
    return (headers or {}).get("user-agent", "").startswith(user_agent)


def normalise_volatile(text: str, patterns: tuple[re.Pattern[str], ...]) -> str:
    """``text`` with what every capturing group of every match of ``patterns`` captured
    replaced by :data:`NORMALISED`; the rest of each match (written with non-capturing groups
    and lookarounds) is kept. Groups must not nest. For the facts a known client writes into its
    requests that change from one attempt, day or node to the next (a date, a kernel release)."""
    for pattern in patterns:
        text = pattern.sub(_normalised_groups, text)
    return text


def _normalised_groups(match: re.Match[str]) -> str:
    out, pos = [], match.start()
    for group in range(1, match.re.groups + 1):
        start, end = match.span(group)
        if start < 0:  # an optional group that did not take part
            continue
        out += [match.string[pos:start], NORMALISED]
        pos = end
    out.append(match.string[pos : match.end()])
    return "".join(out)


def kept_query(query: Mapping[str, str] | None, dropped: frozenset[str]) -> dict[str, str]:
    """The query without its credential parameters."""
    return {k: v for k, v in (query or {}).items() if k not in dropped}
