"""The wire protocol base: what a provider wire format is, stated by each protocol as data.

A protocol knows one provider wire format (OpenAI Chat Completions, OpenAI Responses, Anthropic
Messages, Gemini generateContent, Mistral chat/conversations). It never does I/O: the wire seam
(``tether.wire.seam``) asks it about a request or a response. :class:`WireProtocol` answers every
question from a few declarations — which paths are model turns, which body keys, headers and query
parameters cannot change the answer, how tools are named, where the model, the stream flag and the
usage live, how a stream is folded — so a protocol module states only what differs, and overrides
a method only where its format has a shape of its own.

Paths are relative to the provider's base (``/v1/chat/completions``, ``/v1beta/models/m:generateContent``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ...usage import Usage as Usage  # re-exported: the protocol modules name it from here
from .normalise import NORMALISED, Normaliser, sent_by

# Keys never part of a fingerprint, whatever the protocol: they identify the caller or the call,
# not what the model is asked.
COMMON_DROPPED_KEYS = frozenset({"user", "metadata", "safety_identifier", "prompt_cache_key", "store"})


@dataclass(frozen=True)
class UsageFields:
    """Where a protocol's usage object keeps each count, mapped onto :class:`Usage`.

    Each field names dotted paths into the usage object whose positive int values are summed
    (``"prompt_tokens_details.cached_tokens"``); a missing or malformed count is 0.
    """

    input: tuple[str, ...]
    output: tuple[str, ...]
    cached: tuple[str, ...] = ()
    cache_write: tuple[str, ...] = ()
    #: True when the input count includes the cached tokens (OpenAI, Gemini, Mistral): they are
    #: then taken out of it, so that ``input_tokens`` are the uncached ones; False for Anthropic.
    input_includes_cached: bool = True

    def read(self, usage: Any) -> Usage:
        cached = _count(usage, self.cached)
        prompt = _count(usage, self.input)
        return Usage(
            input_tokens=max(0, prompt - cached) if self.input_includes_cached else prompt,
            output_tokens=_count(usage, self.output),
            cached_input_tokens=cached,
            cache_write_tokens=_count(usage, self.cache_write),
        )


def _count(usage: Any, paths: tuple[str, ...]) -> int:
    return sum(positive_int(get_path(usage, *path.split("."))) for path in paths)


class WireProtocol:
    """One provider wire format, declared by the class attributes below. Stateless but for the
    normalisers adapters register; one shared instance per protocol."""

    #: Short id, e.g. ``"openai-chat"``.
    name: str
    #: The provider whose upstream serves it: ``openai``, ``anthropic``, ``gemini`` or ``mistral``.
    provider: str
    #: A ``POST`` to a path this finds (without query, fragment or trailing slash) is a model turn.
    #: A group named ``model`` says the model is named by the path (else by the body's ``model``);
    #: a group named ``stream`` says the path tells a streamed turn (else the body's ``stream``).
    turn: re.Pattern[str]
    #: Body keys that cannot change the answer (each protocol says why in a comment).
    dropped_keys: frozenset[str] = COMMON_DROPPED_KEYS
    #: Headers that can change the answer (names lower-case); every other header is dropped.
    kept_headers: frozenset[str] = frozenset()
    #: Query parameters that are credentials; every other parameter is kept.
    dropped_query: frozenset[str] = frozenset()
    #: Body keys holding tool lists, sorted by name so the order an SDK lists them in never matters.
    tool_keys: tuple[str, ...] = ("tools",)
    #: Dotted paths to a tool's name, tried in order; a tool with none sorts by its JSON.
    tool_name_at: tuple[str, ...] = ("name",)
    #: The counts of the usage object, and where a JSON answer keeps that object.
    usage_fields: UsageFields
    usage_at: str = "usage"
    #: Where a streamed answer's events keep their usage object: the last event that has one
    #: holds the whole turn's (see :meth:`fold_stream_usage`).
    stream_usage_at: str = "usage"
    #: True when a streamed answer may also come as one JSON array of chunks (Gemini without ``alt=sse``).
    array_streams: bool = False
    #: Where an answer (a JSON body, or any event of a stream) names itself and why it stopped,
    #: for telemetry (``tether.telemetry``): dotted paths, ``*`` for every item of a list. The
    #: first id found counts; the finish reasons of the last event that has any.
    response_id_at: tuple[str, ...] = ("id",)
    finish_reason_at: tuple[str, ...] = ()

    def __init__(self) -> None:
        self._normalisers: dict[str, Normaliser] = {}

    # -- the hook for adapters ---------------------------------------------------------------
    def normalise_requests_from(self, user_agent: str, normaliser: Normaliser) -> None:
        """Pass the canonical body of each request whose User-Agent starts with ``user_agent``
        through ``normaliser`` before fingerprinting (see :mod:`.normalise`). An adapter calls
        this for its framework's client; registering the same client again replaces its normaliser."""
        self._normalisers[user_agent] = normaliser

    # -- what the seam asks --------------------------------------------------------------------
    def is_model_turn(self, method: str, path: str) -> bool:
        """True when ``method path`` asks the model for a turn (and so is journaled)."""
        return method.upper() == "POST" and self._turn(path) is not None

    def canonical_request(self, path: str, query: Mapping[str, str], headers: Mapping[str, str], body: Any) -> dict[str, Any]:
        """The part of the request that can change the answer, and nothing else.

        No credentials, request/trace ids, user/metadata/safety/cache identifiers. Tool schemas
        sorted by name. Header names lower-case; only headers that change the answer (e.g.
        ``anthropic-version``/``anthropic-beta``) are kept. The result is JSON-able; the seam
        canonicalises key order itself. Raises ``ValueError`` for a body the protocol does not
        understand: the seam then passes the request through unrecorded.
        """
        if not isinstance(body, dict):
            raise ValueError(f"{self.name} request body is not a JSON object")
        out = self.canonical_body(drop_keys(body, self.dropped_keys))
        for user_agent, normaliser in tuple(self._normalisers.items()):  # an adapter may register meanwhile
            if sent_by(headers, user_agent):
                out = normaliser(out)
        return {"path": path, "query": kept_query(query, self.dropped_query), "headers": self.canonical_headers(headers), "body": out}

    def is_streaming(self, path: str, query: Mapping[str, str], body: Any) -> bool:
        """True when the response will be an event stream (SSE)."""
        if "stream" in self.turn.groupindex:
            match = self._turn(path)
            return match is not None and match.group("stream") is not None
        return get_path(body, "stream") is True

    def usage(self, body: bytes, streamed: bool) -> Usage:
        """Usage read from a successful response body (the whole SSE text when streamed).

        Never raises: an unreadable body gives ``Usage()``.
        """
        try:
            if self.array_streams and body.lstrip().startswith(b"["):
                return self.usage_fields.read(self.fold_stream_usage(json.loads(body)))
            if streamed:
                return self.usage_fields.read(self.fold_stream_usage(sse_data(body)))
            return self.usage_fields.read(get_path(json.loads(body), *self.usage_at.split(".")))
        except Exception:  # never raise: usage is bookkeeping, the response itself is fine
            return Usage()

    def model(self, path: str, body: Any) -> str:
        """The model name asked for (for the price table); ``""`` if unknown."""
        if "model" in self.turn.groupindex:
            match = self._turn(path)
            return match.group("model") if match else ""
        model = get_path(body, "model")
        return model if isinstance(model, str) else ""

    def response_model(self, body: bytes, streamed: bool) -> str:
        """The model named by a successful answer, for turns whose request names none (a
        conversation append). Never raises; ``""`` if unknown."""
        return ""

    def answer_facts(self, body: bytes, streamed: bool) -> tuple[str, tuple[str, ...]]:
        """The answer's id and finish reasons (``""`` and ``()`` where it has none). Never raises.
        A stream's events are read from its start for the id and from its end for the reasons,
        each until found: a long stream is not parsed whole."""
        try:
            if self.array_streams and body.lstrip().startswith(b"["):
                events: list[Any] = list(json.loads(body))
                payloads: list[bytes] | None = None
            else:
                events, payloads = [], sse_payloads(body) if streamed else [body]
        except Exception:  # bookkeeping only: a body that cannot be read has no facts
            return "", ()

        def parsed(order: int) -> Iterator[Any]:
            if payloads is None:
                yield from events[::order]
                return
            for raw in payloads[::order]:
                try:
                    yield json.loads(raw)
                except ValueError:
                    continue

        ids = (
            found
            for event in parsed(1)
            for path in self.response_id_at
            for found in find_all(event, path)
            if isinstance(found, str) and found
        )
        reasons = (
            found
            for event in parsed(-1)
            if (found := tuple(str(r) for path in self.finish_reason_at for r in find_all(event, path) if isinstance(r, str) and r))
        )
        return next(ids, ""), next(reasons, ()) if self.finish_reason_at else ()

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

    # -- what a protocol may override where its format has a shape of its own ---------------------
    def canonical_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body (a fresh dict, its dropped keys gone) with its tool lists in canonical order."""
        for key in self.tool_keys:
            if key in body:
                body[key] = self.canonical_tools(body[key])
        return body

    def canonical_tools(self, tools: Any) -> Any:
        return sort_by_name(tools, self.tool_name)

    def tool_name(self, tool: Any) -> str:
        name = next((found for path in self.tool_name_at if (found := get_path(tool, *path.split(".")))), None)
        return name if isinstance(name, str) else ""

    def canonical_headers(self, headers: Mapping[str, str] | None) -> dict[str, str]:
        return kept_headers(headers, self.kept_headers)

    def fold_stream_usage(self, events: Iterable[Any]) -> Any:
        """The usage object of a whole streamed turn, from its events (``None`` if none has one)."""
        found = [usage for event in events if isinstance(usage := get_path(event, *self.stream_usage_at.split(".")), dict)]
        return found[-1] if found else None

    def _turn(self, path: str) -> re.Match[str] | None:
        return self.turn.search(route(path))


def sse_data(body: bytes) -> Iterator[Any]:
    """Yield the JSON payload of each ``data:`` event of an SSE body; skips ``[DONE]`` and non-JSON."""
    for data in sse_payloads(body):
        try:
            yield json.loads(data)
        except ValueError:
            continue


def sse_payloads(body: bytes) -> list[bytes]:
    """The ``data:`` payload of each event of an SSE body, unparsed; without ``[DONE]``."""
    out = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].lstrip() for line in block.split(b"\n") if line.startswith(b"data:"))
        if data and data != b"[DONE]":
            out.append(data)
    return out


def drop_keys(obj: Mapping[str, Any], keys: frozenset[str] | set[str]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in keys}


def sort_by_name(tools: Any, name_of: Callable[[Any], str]) -> Any:
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


def find_all(obj: Any, path: str) -> list[Any]:
    """The values at a dotted path whose ``*`` segments stand for every item of a list."""
    found = [obj]
    for key in path.split("."):
        if key == "*":
            found = [item for value in found if isinstance(value, list) for item in value]
        else:
            found = [value[key] for value in found if isinstance(value, Mapping) and key in value]
    return found


def positive_int(value: Any) -> int:
    """A token count as reported, or 0 for anything that is not a positive int."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def route(path: str) -> str:
    """The path without query, fragment (the Mistral SDK appends ``#stream``) or trailing slash."""
    return path.split("?", 1)[0].split("#", 1)[0].rstrip("/")


def kept_headers(headers: Mapping[str, str] | None, kept: frozenset[str]) -> dict[str, str]:
    """Only the headers that change the answer, names lower-cased."""
    return {k.lower(): v for k, v in (headers or {}).items() if k.lower() in kept}


def kept_query(query: Mapping[str, str] | None, dropped: frozenset[str]) -> dict[str, str]:
    """The query without its credential parameters."""
    return {k: v for k, v in (query or {}).items() if k not in dropped}


# NORMALISED is re-exported: the seam counts it in canonical forms.
__all__ = [
    "COMMON_DROPPED_KEYS",
    "NORMALISED",
    "Usage",
    "UsageFields",
    "WireProtocol",
    "drop_keys",
    "find_all",
    "get_path",
    "kept_headers",
    "kept_query",
    "positive_int",
    "route",
    "sort_by_name",
    "sse_data",
    "sse_payloads",
]
