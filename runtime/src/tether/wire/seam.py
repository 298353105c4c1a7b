"""The wire seam: every model HTTP request goes through :meth:`WireSeam.handle` (README.md, "How it works": Wire seam).

Request in, response out, like an httpx transport. The in-process transports
(``tether.wire.transport``) and the loopback proxy (``tether.wire.proxy``) are only two ways in;
canonicalisation, the journal and error classification live here, once.

    replay   recorded key          → the recorded bytes, no upstream call
    live     success / terminal    → call upstream, hand back while the record is written
    live     recoverable           → call upstream, hand back, record nothing
    refused  over a cost limit     → 402 for the provider, nothing sent upstream
    passthru not a model turn, or a body no protocol module understands → forwarded unrecorded

Recording overlaps delivery when the run asks for it (``Run(overlap_writes=True)``; ``run_agent``
does). A live answer is handed back as soon as it arrived and is written to the journal
meanwhile — once the event loop turns to it (``WireSeam._turn``: the next request going upstream,
anything that waits for it, or ``WRITE_DELAY`` later), so the write's threads do not compete with
the framework reading the answer; it counts as done (counters, cost, step events) once durable. What the
framework does with it waits for that: a tool call (``tether.tools`` calls :meth:`WireSeam.written`
first), the next live answer handed back (:meth:`WireSeam.written`), the end of the run
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
import functools
import importlib
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import httpx

from ..canonical import canonical_json, fingerprint_json
from ..errors import Interrupted, RecoverableStepError, StoreAccessDenied, StoreError
from ..journal import Record
from . import protocols
from .protocols.base import NORMALISED, WireProtocol, sse_data

if TYPE_CHECKING:
    from ..run import Run

log = logging.getLogger("tether.wire")
NORMALISED_BYTES = NORMALISED.encode()

#: Response headers kept in a record and replayed; everything else is transport or per-call noise.
KEPT_RESPONSE_HEADERS = ("content-type",)
KEPT_RAW_HEADERS = frozenset(h.encode() for h in KEPT_RESPONSE_HEADERS)
#: Response headers never passed through (hop-by-hop, or no longer true once httpx decoded the body).
DROPPED_RESPONSE_HEADERS = frozenset({"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive", "set-cookie"})
#: Request headers never forwarded upstream (hop-by-hop, or recomputed by httpx).
HOP_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive", "accept-encoding", "upgrade", "te"})


def classify(status: int) -> str:
    """``success``, ``terminal`` (recorded, replayed as the same error), ``recoverable`` or
    ``refused``.

    ``refused`` (401, 403, 404, 405) says nothing about the request's content, only about what the
    fingerprint leaves out: the key it carried (401/403) or where it was sent (404, 405: a wrong
    base URL or path). Such answers are passed through unrecorded (like a recoverable failure,
    though the SDK will not retry them), so a run retried after its key or URL was fixed calls
    the model instead of replaying the refusal. (An unknown model is a 404 too; not recording it
    costs nothing: refusals are not billed.)
    """
    if 200 <= status < 300:
        return "success"
    if status in (408, 409, 429) or status >= 500:
        return "recoverable"
    if status in (401, 403, 404, 405):
        return "refused"
    return "terminal"


@dataclass
class WireRequest:
    method: str
    provider: str
    #: Path relative to the provider's upstream base, e.g. ``/v1/chat/completions``.
    path: str
    #: The absolute URL to send upstream.
    url: str
    query: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    #: The caller's own timeouts (httpx's ``timeout`` extension: connect/read/write/pool seconds),
    #: applied upstream so an SDK's timeout-and-retry works through the in-process transport too.
    timeout: dict[str, float | None] | None = None

    @functools.cached_property
    def json(self) -> Any:
        """The body parsed, once per request (canonical form, model name, landed check all read
        it). Raises ``ValueError`` for a body that is not JSON."""
        return json.loads(self.body) if self.body else None


@dataclass
class WireResponse:
    status: int
    headers: list[tuple[str, str]]
    stream: AsyncIterator[bytes]
    replayed: bool = False
    #: The whole body when it is known up front (a replay, a plain answer): the proxy then sends
    #: it in one write with its length instead of a chunked stream.
    body: bytes | None = None

    @classmethod
    def whole(cls, status: int, headers: list[tuple[str, str]], body: bytes, *, replayed: bool = False) -> WireResponse:
        return cls(status, headers, _once(body), replayed=replayed, body=body)


#: The longest a live answer's record waits for the event loop to turn to it (``WireSeam._turn``).
WRITE_DELAY = 0.01


def _open(gate: asyncio.Future[None]) -> None:
    if not gate.done():
        gate.set_result(None)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


_END = object()


def _usage(protocol: WireProtocol, body: bytes, streamed: bool) -> dict[str, int]:
    """Usage of a successful turn; ``{}`` when it cannot be read (the turn's cost is unknown)."""
    try:
        usage = protocol.usage(body, streamed)
    except Exception:  # a protocol module promises not to raise; a malformed body must not break the record either
        return {}
    return usage.to_dict() if usage.total > 0 else {}


def _caller_timeout(timeout: dict[str, float | None] | None) -> httpx.Timeout | None:
    """The caller's httpx timeout extension as a ``Timeout``; None when absent or not understood."""
    try:
        return upstream_http().Timeout(**timeout) if timeout else None
    except TypeError:
        return None


def _well_formed(body: bytes, streamed: bool) -> bool:
    """A 2xx body that can be an answer: a JSON object, or an event stream with a JSON event."""
    if streamed:
        return next(sse_data(body), None) is not None
    try:
        return isinstance(json.loads(body), dict)
    except ValueError:
        return False


@functools.cache
def upstream_http() -> Any:
    """The HTTP library the seam calls providers with: ``httpx2`` where installed (the fork the
    openai and anthropic SDKs now ship; measured in benchmarks/record_overhead.py, its connection
    layer hands a streamed answer back ~1.5 ms sooner than httpx's), else ``httpx``. Same API;
    imported on the first live call, never at start-up."""
    try:
        return importlib.import_module("httpx2")
    except ImportError:
        return httpx


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The CA bundle, loaded once per process (~0.1-0.2 s a load) for every run's upstream client."""
    return httpx.create_ssl_context()


class WireSeam:
    """The seam for one run attempt."""

    def __init__(self, run: Run, *, timeout: float = 600.0, overlap: bool = False) -> None:
        self.run = run
        #: Hand live answers back while their records are written (see the module docstring).
        self.overlap = overlap
        self.timeout = timeout
        self._clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self._pumps: set[asyncio.Task[None]] = set()  # strong refs: a pump outlives an early-closing reader
        #: Live answers already handed back whose records are being written (tasks; pumps join in
        #: once their stream ended), and the first such write that failed.
        self._commits: set[asyncio.Task[None]] = set()
        self._unwritten: BaseException | None = None
        #: Records waiting for the event loop to turn to them (see :meth:`_turn`), and how many
        #: callers wait for records now (a record then starts at once).
        self._gates: list[asyncio.Future[None]] = []
        self._waiting = 0
        #: How long the end of the attempt waits for streams still being recorded.
        self.settle_timeout = 60.0

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            http = upstream_http()
            timeout = http.Timeout(self.timeout, connect=30.0)
            client = self._clients[loop] = http.AsyncClient(timeout=timeout, follow_redirects=False, verify=_tls_context())
        return client

    async def settle(self, timeout: float | None = None) -> int:
        """Wait until every stream still being read upstream is recorded (or failed), at most
        ``timeout`` seconds; a pump still running then is cancelled, so nothing is written after
        the attempt ended (its turn runs again next attempt). Pumps live on the loop that served
        their request: those of another running loop are awaited there. Returns how many were
        cancelled."""
        timeout = self.settle_timeout if timeout is None else timeout
        async with self._awaiting():
            waits = self._waits(self._pumps | self._commits)
            if waits:
                await asyncio.wait(waits, timeout=timeout)
        late = [t for t in list(self._pumps) if not t.done()]
        for task in late:
            task.get_loop().call_soon_threadsafe(task.cancel)
        return len(late)

    @staticmethod
    def _waits(tasks: set[asyncio.Task[None]]) -> list[asyncio.Future[Any]]:
        """A future per task, awaitable from this loop (tasks of another running loop are awaited
        there)."""
        here = asyncio.get_running_loop()
        waits: list[asyncio.Future[Any]] = []
        for task in list(tasks):
            loop = task.get_loop()
            if loop is here:
                waits.append(task)
            elif loop.is_running():
                waits.append(asyncio.wrap_future(asyncio.run_coroutine_threadsafe(asyncio.wait([task]), loop)))
        return waits

    async def recorded(self) -> None:
        """Wait until every answer handed back and every stream being read upstream now is
        recorded; cancels nothing. Raises ``RecoverableStepError`` if a write failed. Called
        before a tool runs (and by a client that acts on a stream before its end: the Claude CLI
        starts a tool at the tool-use block's end): the tool must not run before the turn that
        asked for it is durable, or a crash in between would run it again."""
        async with self._awaiting():
            waits = self._waits(self._pumps | self._commits)
            if waits:
                await asyncio.wait(waits)
        self._check_written()

    async def written(self, but: asyncio.Task[None] | None = None) -> None:
        """Wait until the answers already handed back (``but`` this one's) are durable, not the
        streams still being read (a parallel turn's answer does not wait for its sibling); raise
        if a write failed."""
        async with self._awaiting():
            waits = self._waits(self._commits - {but} if but is not None else self._commits)
            if waits:
                await asyncio.wait(waits)
        self._check_written()

    def _check_written(self) -> None:
        failed = self._unwritten
        if failed is None:
            return
        if isinstance(failed, StoreAccessDenied):
            raise failed  # terminal: the credentials will not change on the next attempt
        raise RecoverableStepError(f"an answer already handed back could not be recorded, so this attempt stops: {failed}")

    @contextlib.asynccontextmanager
    async def _awaiting(self) -> AsyncIterator[None]:
        """While a caller waits for records, none waits for its turn."""
        self._waiting += 1
        self._open_gates()
        try:
            yield
        finally:
            self._waiting -= 1

    def _open_gates(self) -> None:
        gates, self._gates = self._gates, []
        for gate in gates:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nothing waits there
                gate.get_loop().call_soon_threadsafe(_open, gate)

    async def _turn(self) -> None:
        """Wait until the event loop turns to writing a record: when something waits for it
        (:meth:`written`, :meth:`recorded`, :meth:`settle`: a tool call, the next answer, the end
        of the attempt), when the next request goes upstream (the loop then waits for the network),
        or ``WRITE_DELAY`` after the answer was handed back, whichever comes first. Started at
        once, the write's threads would compete for the interpreter lock with the framework
        reading the answer just handed back (~0.8 ms a turn, benchmarks/record_overhead.py)."""
        if self._waiting:
            return
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()
        self._gates.append(gate)
        timer = loop.call_later(WRITE_DELAY, _open, gate)
        try:
            await gate
        finally:
            timer.cancel()

    def _committing(self, commit: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Write a record after its answer was handed back (see the module docstring)."""

        earlier = set(self._commits)

        async def run() -> None:
            try:
                # In answer order: a record starts once the one before it counted, so "killed
                # after turn k was recorded" never finds turn k+1 recorded beside it.
                waits = self._waits(earlier)
                if waits:
                    await asyncio.wait(waits)
                await self._turn()
                await commit()
            except Exception as e:  # noted; the next step raises it
                if self._unwritten is None:
                    self._unwritten = e

        task = asyncio.ensure_future(run())
        self._commits.add(task)
        task.add_done_callback(self._commits.discard)
        return task

    async def aclose(self) -> None:
        await self.settle()
        here = asyncio.get_running_loop()
        for loop, client in list(self._clients.items()):
            # Each client on its own loop: its connections are that loop's transports (closing them
            # from another thread raced the wire loop's own close of a cancelled stream).
            try:
                if loop is here:
                    await client.aclose()
                elif loop.is_running():
                    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(client.aclose(), loop))
            except RuntimeError:  # its loop is gone (and its connections with it)
                pass
        self._clients.clear()

    # -- the one function --------------------------------------------------------------------
    async def handle(self, request: WireRequest) -> WireResponse:
        protocol = protocols.find(request.provider, request.method, request.path)
        canonical = self._canonical(protocol, request) if protocol else None
        if protocol is None or canonical is None:
            return await self._forward(request)
        data = canonical_json(canonical)
        fp = fingerprint_json("model", data)
        self.run.normalised_parts += data.count(NORMALISED_BYTES)
        record = self.run.journal.replay_next("model", fp)
        if record is not None:
            self.run.model_step(record, replayed=True)
            return WireResponse.whole(record.response["status"], record.response["headers"], record.body, replayed=True)
        self._check_written()  # an attempt that lost a write sends nothing more upstream
        if self.run.stopping:
            raise Interrupted(self.run.stopping)  # a stopping attempt starts no new live turn
        if self.run.max_cost_usd is not None:
            await self.written()  # under a cost limit every earlier turn's cost counts first
        if refusal := self.run.cost_refusal():
            return self._refuse(refusal)
        if (landed := await self._landed(protocol, request, fp, canonical)) is not None:
            return landed
        return await self._live(protocol, request, fp, canonical)

    async def _landed(self, protocol: WireProtocol, request: WireRequest, fp: str, canonical: dict[str, Any]) -> WireResponse | None:
        """A turn that adds to state kept on the provider's server (a Mistral conversation append)
        and that the server already took, in an attempt that died after the server answered but
        before the journal recorded it: sending it again would duplicate it there (or fork the
        conversation). The server's state is read back (an unrecorded GET); when it already holds
        the turn, the answer is rebuilt from it, recorded as the turn's outcome and handed back.
        Its usage is unknown (the dead attempt paid for it): counted as a turn of unknown cost."""
        body = request.json
        check = protocol.landed_check(request.path, body)
        if check is None or not request.url.endswith(request.path):
            return None
        headers = [(k, v) for k, v in request.headers if k.lower() not in ("content-type", "accept")]
        read = WireRequest(
            "GET", request.provider, check, request.url[: -len(request.path)] + check, headers=headers, timeout=request.timeout
        )
        response = await self._send(read)
        try:
            state = await response.aread()
        except (httpx.TransportError, upstream_http().TransportError) as e:
            raise RecoverableStepError(f"reading back {check} broke: {type(e).__name__}") from e
        finally:
            await response.aclose()
        if classify(response.status_code) == "recoverable":
            # Unknown whether the turn landed: sending it could duplicate it, so not now.
            raise RecoverableStepError(f"could not read back {check} (HTTP {response.status_code}) to tell whether the turn landed")
        if response.status_code != 200:
            return None  # the turn itself will meet the same error, recorded as usual
        streamed = protocol.is_streaming(request.path, {}, body)
        answer = protocol.answer_from_state(request.path, body, state, streamed)
        if answer is None:
            return None
        content_type = "text/event-stream" if streamed else "application/json"
        record = Record(
            kind="model",
            fingerprint=fp,
            occurrence=0,
            outcome="ok",
            request=canonical,
            response={
                "status": 200,
                "headers": [("content-type", content_type)],
                "streamed": streamed,
                "protocol": protocol.name,
                "resolved": check,
            },
            body=answer,
            usage={},
            model=protocol.model(request.path, body) or protocol.response_model(answer, streamed),
            started_at=time.time(),
        )
        try:
            await asyncio.to_thread(self.run.journal.append_next, record)
        except StoreAccessDenied:
            raise
        except StoreError as e:
            raise RecoverableStepError(f"journal write failed, step not done: {e}") from e
        self.run.model_step(record, replayed=False)
        log.warning(
            "tether: %s %s had already reached the server in an attempt that was never recorded; "
            "its answer was read back from %s and recorded instead of sending the turn again",
            request.method,
            request.path,
            check,
        )
        return WireResponse.whole(200, [("content-type", content_type)], answer)

    def _refuse(self, message: str) -> WireResponse:
        """Answer for the provider with 402: every SDK raises it as a non-retryable status error,
        so the framework stops; the run notes why. Nothing is recorded or sent upstream."""
        self.run.limit_exceeded = message
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

    async def _send(self, request: WireRequest) -> httpx.Response:
        headers = [(k, v) for k, v in request.headers if k.lower() not in HOP_HEADERS]
        url = request.url + (f"?{request.query}" if request.query else "")
        client = self._client()
        timeout = _caller_timeout(request.timeout)
        try:
            built = client.build_request(request.method, url, headers=headers, content=request.body, timeout=timeout or client.timeout)
            return await client.send(built, stream=True)
        except (httpx.TransportError, upstream_http().TransportError) as e:
            raise RecoverableStepError(f"{request.provider} upstream unreachable: {type(e).__name__}") from e

    @staticmethod
    def _response_headers(response: httpx.Response) -> list[tuple[str, str]]:
        # From the raw pairs: httpx decodes every header on each lookup (~0.1 ms a turn).
        return [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in response.headers.raw if k.lower() in KEPT_RAW_HEADERS]

    @staticmethod
    def _passthrough_headers(response: httpx.Response) -> list[tuple[str, str]]:
        """Unrecorded responses keep the provider's headers (retry-after, x-should-retry...), so
        the SDK's own retry logic sees what it would without Tether."""
        return [(k, v) for k, v in response.headers.multi_items() if k.lower() not in DROPPED_RESPONSE_HEADERS]

    async def _forward(self, request: WireRequest) -> WireResponse:
        response = await self._send(request)
        return WireResponse(response.status_code, self._passthrough_headers(response), self._drain(response))

    @staticmethod
    async def _drain(response: httpx.Response) -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_bytes():
                yield chunk
        except (httpx.TransportError, upstream_http().TransportError) as e:
            raise RecoverableStepError(f"upstream stream broke: {type(e).__name__}") from e
        finally:
            await response.aclose()

    async def _live(self, protocol: WireProtocol, request: WireRequest, fp: str, canonical: dict[str, Any]) -> WireResponse:
        started = time.time()
        self._open_gates()  # the loop is about to wait for the network: earlier records go now
        response = await self._send(request)
        headers = self._response_headers(response)
        status = response.status_code
        if classify(status) in ("recoverable", "refused"):
            return WireResponse(status, self._passthrough_headers(response), self._drain(response))
        streamed = any(v.startswith("text/event-stream") for k, v in headers if k == "content-type")
        model = protocol.model(request.path, request.json)

        def write(body: bytes, duration_ms: float) -> Record | None:
            """In a thread: reading the answer (usage, model) and writing it stay off the event
            loop, which meanwhile hands the answer back. Takes the occurrence now
            (``Journal.append_next``). A 2xx body that is no answer at all (not JSON, no events)
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
            self.run.journal.append_next(record)
            return record

        async def commit(body: bytes) -> None:
            try:
                record = await asyncio.to_thread(write, body, (time.time() - started) * 1000)
            except StoreAccessDenied:
                raise  # the credentials will not change on the next attempt: terminal
            except StoreError as e:
                raise RecoverableStepError(f"journal write failed, step not done: {e}") from e
            if record is None:
                self.run.unrecorded_live_turn(model)  # paid for, passed on unrecorded
            else:
                self.run.model_step(record, replayed=False)

        if not streamed:
            try:
                body = await response.aread()
            except (httpx.TransportError, upstream_http().TransportError) as e:
                raise RecoverableStepError(f"upstream response broke: {type(e).__name__}") from e
            finally:
                await response.aclose()
            # A task of its own: a caller that gave up (a proxy client that disconnected) after
            # the answer arrived does not cut the record in two (written, but never counted).
            if self.overlap:
                own = self._committing(functools.partial(commit, body))
                await self.written(but=own)  # the answers handed back before this one are durable first
            else:
                await asyncio.shield(asyncio.ensure_future(commit(body)))
            return WireResponse.whole(status, headers, body)
        return WireResponse(status, headers, self._tee(response, commit))

    async def _tee(self, response: httpx.Response, commit: Callable[[bytes], Awaitable[None]]) -> AsyncIterator[bytes]:
        """Pass a stream through as it arrives and record it whole once it ended.

        A pump task reads upstream independently of the consumer, so a caller that stops
        reading early (many SDKs close the response once they saw the final event) still gets
        the step recorded. The last chunk waits for the record (or, with ``overlap``, for the
        answers handed back before this one: its own record is written after it).
        """
        queue: asyncio.Queue[Any] = asyncio.Queue()  # chunks, then _END or the error

        async def pump() -> None:
            chunks: list[bytes] = []
            held: bytes | None = None
            try:
                async for chunk in response.aiter_bytes():
                    chunks.append(chunk)
                    if held is not None:
                        queue.put_nowait(held)
                    held = chunk
                body = b"".join(chunks)
                own = self._committing(functools.partial(commit, body)) if self.overlap else None
                await (self.written(but=own) if own is not None else commit(body))
                if held is not None:
                    queue.put_nowait(held)
                queue.put_nowait(_END)
                if own is not None:
                    await own
            except (httpx.TransportError, upstream_http().TransportError) as e:
                broke = RecoverableStepError(f"upstream stream broke: {type(e).__name__}")
                broke.__cause__ = e
                queue.put_nowait(broke)
            except BaseException as e:
                queue.put_nowait(e)
                if isinstance(e, asyncio.CancelledError):
                    raise  # cancelled by settle(): it did not finish, and shows so
            finally:
                await response.aclose()

        task = asyncio.ensure_future(pump())
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            # A consumer that left early does not cancel the pump: it finishes and records alone.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
