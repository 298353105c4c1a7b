"""The wire seam: every model HTTP request goes through :meth:`WireSeam.handle` (README.md, "How it works": Wire seam).

Request in, response out, like an httpx transport. The in-process transports
(``tether.wire.transport``) and the loopback proxy (``tether.wire.proxy``) are only two ways in;
canonicalisation, the decision and error classification live here, once; the upstream client
(``tether.wire.upstream``), the write scheduler (``tether.wire.writes``) and the read-back of a
turn that may have landed (``tether.wire.landed``) beside it. The seam talks to its attempt only
through ``tether.attempt.Attempt`` (replay, record, refuse, account).

    replay   recorded key          → the recorded bytes, no upstream call
    live     success / terminal    → call upstream, hand back while the record is written
    live     recoverable           → call upstream, hand back, record nothing
    refused  over a cost limit     → 402 for the provider, nothing sent upstream
    passthru not a model turn, or a body no protocol module understands → forwarded unrecorded

Recording overlaps delivery when the run asks for it (``Run(overlap_writes=True)``; ``run_agent``
does). A live answer is handed back as soon as it arrived and is written to the journal
meanwhile — once the event loop turns to it (``WriteScheduler._turn``: the next request going upstream,
anything that waits for it, or ``WRITE_DELAY`` later), so the write's threads do not compete with
the framework reading the answer; it counts as done (counters, cost, step events) once durable. What the
framework does with it waits for that: a tool call (``tether.tools`` waits for
``Attempt.answers_recorded``, :meth:`WireSeam.written`, first), the next live answer handed back (:meth:`WireSeam.written`), the end of the run
(``run_agent``, ``Run.aclose``). So nothing that follows from an answer — a side effect, a later
answer, the run's result — leaves the process before the answer is durable; a kill in between
loses an answer nothing acted on, and the retry asks the model again (that turn is paid twice, as
a kill during the call always was). A write that fails stops the attempt: every later live turn and
tool call raises ``RecoverableStepError`` (the next attempt replays what is durable). Without
``overlap_writes`` an answer is durable before it is handed back (a streamed one: before its last
chunk), which costs a store write per live turn (a few ms locally, a round trip on S3).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import time
from collections.abc import Iterator
from typing import Any, Protocol
from urllib.parse import parse_qsl

from ..attempt import Attempt
from ..canonical import canonical_json, fingerprint_json
from ..errors import Interrupted, RecoverableStepError, StoreAccessDenied, StoreError
from ..journal import Record
from . import protocols
from .landed import read_back
from .messages import WireRequest, WireResponse, classify
from .protocols.base import NORMALISED, WireProtocol, sse_data
from .upstream import Upstream, kept_headers, passed_through, read_whole, tls_context, upstream_http
from .writes import WRITE_DELAY, WriteScheduler

# Named here since the seam was one module: callers and tests import them from tether.wire.seam.
__all__ = [
    "WRITE_DELAY",
    "WireRequest",
    "WireResponse",
    "WireSeam",
    "Wired",
    "classify",
    "current_seam",
    "tls_context",
    "upstream_http",
]

log = logging.getLogger("tether.wire")
NORMALISED_BYTES = NORMALISED.encode()


def _usage(protocol: WireProtocol, body: bytes, streamed: bool) -> dict[str, int]:
    """Usage of a successful turn; ``{}`` when it cannot be read (the turn's cost is unknown)."""
    try:
        usage = protocol.usage(body, streamed)
    except Exception:  # a protocol module promises not to raise; a malformed body must not break the record either
        return {}
    return usage.to_dict() if usage.total > 0 else {}


def _well_formed(body: bytes, streamed: bool) -> bool:
    """A 2xx body that can be an answer: a JSON object, or an event stream with a JSON event."""
    if streamed:
        return next(sse_data(body), None) is not None
    try:
        return isinstance(json.loads(body), dict)
    except ValueError:
        return False


class WireSeam:
    """The seam for one run attempt."""

    def __init__(self, attempt: Attempt, upstreams: dict[str, str], *, timeout: float = 600.0, overlap: bool = False) -> None:
        self.attempt = attempt
        #: Where each provider's requests go (``tether.wire.providers``): the transports and the
        #: proxy build request URLs from these.
        self.upstreams = upstreams
        self.upstream = Upstream(timeout)
        self.writes = WriteScheduler(overlap=overlap)
        #: Tokens under which ``tether.wire.proxy`` serves this seam (empty until an SDK is pointed at it).
        self.proxy_tokens: list[str] = []

    @contextlib.contextmanager
    def activate(self) -> Iterator[WireSeam]:
        """The seam transports created without one find (``Run.activate()`` enters it)."""
        token = _active.set(self)
        try:
            yield self
        finally:
            _active.reset(token)

    # -- what follows an answer waits for its record (tether.wire.writes) -------------------
    async def settle(self, timeout: float | None = None) -> int:
        """Wait (at most ``timeout``) for the streams still being recorded; cancel the rest."""
        return await self.writes.settle(timeout)

    async def recorded(self) -> None:
        """Wait until every answer handed back and every stream being read upstream now is
        recorded; cancels nothing. Raises ``RecoverableStepError`` if a write failed. Called
        before a tool runs (and by a client that acts on a stream before its end: the Claude CLI
        starts a tool at the tool-use block's end): the tool must not run before the turn that
        asked for it is durable, or a crash in between would run it again."""
        await self.writes.recorded()

    async def written(self) -> None:
        """Wait until the answers already handed back are durable (not the streams still being
        read); raise if a write failed."""
        await self.writes.written()

    async def aclose(self) -> None:
        await self.writes.settle()
        await self.upstream.aclose()

    # -- the one function: replay, refuse or go live -----------------------------------------
    async def handle(self, request: WireRequest) -> WireResponse:
        protocol = protocols.find(request.provider, request.method, request.path)
        canonical = self._canonical(protocol, request) if protocol else None
        if protocol is None or canonical is None:
            return await self.upstream.forward(request)
        data = canonical_json(canonical)
        fp = fingerprint_json("model", data)
        attempt = self.attempt
        attempt.account_normalised(data.count(NORMALISED_BYTES))
        record = attempt.replay("model", fp)
        if record is not None:
            attempt.account_turn(record, replayed=True)
            return WireResponse.whole(record.response["status"], record.response["headers"], record.body, replayed=True)
        self.writes.check_written()  # an attempt that lost a write sends nothing more upstream
        if attempt.stopping:
            raise Interrupted(attempt.stopping)  # a stopping attempt starts no new live turn
        if attempt.cost_limited:
            await self.writes.written()  # under a cost limit every earlier turn's cost counts first
        if refusal := attempt.cost_refusal():
            return self._refuse(refusal)
        if (landed := await self._landed(protocol, request, fp, canonical)) is not None:
            return landed
        return await self._live(protocol, request, fp, canonical)

    async def _landed(self, protocol: WireProtocol, request: WireRequest, fp: str, canonical: dict[str, Any]) -> WireResponse | None:
        """A turn the server already took in an attempt that died before recording it
        (``tether.wire.landed``): its answer is recorded as the turn's outcome and handed back.
        Its usage is unknown (the dead attempt paid for it): counted as a turn of unknown cost."""
        landed = await read_back(self.upstream, protocol, request)
        if landed is None:
            return None
        record = Record(
            kind="model",
            fingerprint=fp,
            occurrence=0,
            outcome="ok",
            request=canonical,
            response={
                "status": 200,
                "headers": [("content-type", landed.content_type)],
                "streamed": landed.streamed,
                "protocol": protocol.name,
                "resolved": landed.check,
            },
            body=landed.answer,
            usage={},
            model=protocol.model(request.path, request.json) or protocol.response_model(landed.answer, landed.streamed),
            started_at=time.time(),
        )
        try:
            await asyncio.to_thread(self.attempt.record_next, record)
        except StoreAccessDenied:
            raise
        except StoreError as e:
            raise RecoverableStepError(f"journal write failed, step not done: {e}") from e
        self.attempt.account_turn(record, replayed=False)
        log.warning(
            "tether: %s %s had already reached the server in an attempt that was never recorded; "
            "its answer was read back from %s and recorded instead of sending the turn again",
            request.method,
            request.path,
            landed.check,
        )
        return WireResponse.whole(200, [("content-type", landed.content_type)], landed.answer)

    def _refuse(self, message: str) -> WireResponse:
        """Answer for the provider with 402: every SDK raises it as a non-retryable status error,
        so the framework stops; the run notes why. Nothing is recorded or sent upstream."""
        self.attempt.refused(message)
        body = json.dumps({"error": {"message": message, "type": "tether_limit_exceeded", "code": "limit_exceeded"}}).encode()
        return WireResponse.whole(402, [("content-type", "application/json")], body)

    @staticmethod
    def _canonical(protocol: WireProtocol, request: WireRequest) -> dict[str, Any] | None:
        try:
            body = request.json
            query = dict(parse_qsl(request.query, keep_blank_values=True))
            headers = {k.lower(): v for k, v in request.headers}
            return protocol.canonical_request(request.path, query, headers, body)
        except (ValueError, TypeError):
            return None  # a body we do not understand passes through and never breaks the agent

    async def _live(self, protocol: WireProtocol, request: WireRequest, fp: str, canonical: dict[str, Any]) -> WireResponse:
        started = time.time()
        self.writes.open_gates()  # the loop is about to wait for the network: earlier records go now
        response = await self.upstream.send(request)
        headers = kept_headers(response)
        status = response.status_code
        if classify(status) in ("recoverable", "refused"):
            return passed_through(response)
        streamed = any(v.startswith("text/event-stream") for k, v in headers if k == "content-type")
        model = protocol.model(request.path, request.json)
        attempt = self.attempt

        def write(body: bytes, duration_ms: float) -> Record | None:
            """In a thread: reading the answer (usage, model) and writing it stay off the event
            loop, which meanwhile hands the answer back. Takes the occurrence now
            (``Attempt.record_next``). A 2xx body that is no answer at all (not JSON, no events)
            is not recorded: the journal holds only what can be replayed as an answer."""
            ok = classify(status) == "success"
            if ok and not _well_formed(body, streamed):
                return None
            record = Record(
                kind="model",
                fingerprint=fp,
                occurrence=0,
                outcome="ok" if ok else "error",
                request=canonical,
                response={"status": status, "headers": headers, "streamed": streamed, "protocol": protocol.name},
                body=body,
                usage=_usage(protocol, body, streamed) if ok else {},
                model=model or protocol.response_model(body, streamed),
                started_at=started,
                duration_ms=duration_ms,
            )
            attempt.record_next(record)
            return record

        async def commit(body: bytes) -> None:
            try:
                record = await asyncio.to_thread(write, body, (time.time() - started) * 1000)
            except StoreAccessDenied:
                raise  # the credentials will not change on the next attempt: terminal
            except StoreError as e:
                raise RecoverableStepError(f"journal write failed, step not done: {e}") from e
            if record is None:
                attempt.account_unrecorded_turn(model)  # paid for, passed on unrecorded
            else:
                attempt.account_turn(record, replayed=False)

        if not streamed:
            body = await read_whole(response, "upstream response")
            await self.writes.whole(commit, body)
            return WireResponse.whole(status, headers, body)
        return WireResponse(status, headers, self.writes.tee(response, commit))


_active: contextvars.ContextVar[WireSeam | None] = contextvars.ContextVar("tether_seam", default=None)


def current_seam() -> WireSeam | None:
    """The seam of the attempt active in this context (``Run.activate()``), or ``None``."""
    return _active.get()


class Wired(Protocol):
    """What the transports and the proxy are handed: an attempt with its wire seam (a ``Run``)."""

    @property
    def seam(self) -> WireSeam: ...
