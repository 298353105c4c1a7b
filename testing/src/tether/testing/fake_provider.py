"""Scripted fake model providers: one real HTTP server speaking five vendor wire protocols.

Each real SDK runs unmodified against it; only its base URL changes. Answers come from a
:class:`~tether.testing.script.Script` (a pure function of the request), faults and latency are
injected on demand, and every model turn received is written to a ledger.

Pointing the SDKs at it (``p`` a started :class:`FakeProvider`; any non-empty key works, but a
key must be sent — requests without one get a 401 in the provider's error shape, as upstream)::

    openai.OpenAI(base_url=p.base_url("openai"), api_key="k", max_retries=0)
        # Chat Completions and Responses; or env OPENAI_BASE_URL=<p.base_url("openai")>
    anthropic.Anthropic(base_url=p.base_url("anthropic"), api_key="k", max_retries=0)
        # or env ANTHROPIC_BASE_URL; ``?beta=true`` (older SDKs' beta client, Claude Code) is accepted
    genai.Client(api_key="k", http_options=types.HttpOptions(base_url=p.base_url("gemini")))
        # or env GOOGLE_GEMINI_BASE_URL. The SDK appends its api_version: ``v1`` by default in
        # google-genai 3.x, ``v1beta`` with HttpOptions(api_version="v1beta"); any version is served.
        # The key may come as header x-goog-api-key (the SDK) or ``?key=``.
    mistralai.client.Mistral(api_key="k", server_url=p.base_url("mistral"))
        # chat.complete / chat.stream, beta.conversations.start / append (and their _stream forms),
        # beta.agents.create / get / update, and conversations started with agent_id: an agent's
        # instructions are its system text for a script's ``system`` match, and a scripted
        # ``handoff`` turn hands the conversation to one of its ``handoffs`` inside the same answer

Routes (see :data:`ROUTES`)::

    POST /openai/v1/chat/completions          POST /openai/v1/responses       GET /openai/v1/models
    POST /anthropic/v1/messages
    POST /gemini/{version}/models/{model}:generateContent   (:streamGenerateContent?alt=sse)
    POST /mistral/v1/chat/completions   POST /mistral/v1/conversations   POST /mistral/v1/conversations/{id}
    GET /mistral/v1/conversations/{id}/history
    POST /mistral/v1/agents   GET /mistral/v1/agents/{id}   PATCH /mistral/v1/agents/{id}
    GET /_control/ledger    POST /_control/faults    POST /_control/reset

Usage in every answer is deterministic, from the request body's length ``n`` in bytes and the turn
index ``t``: prompt tokens ``max(1, n // 4)`` (cached and cache-written tokens included), output
tokens ``len(text + tool-call arguments JSON) // 4 + 1``, cached tokens ``0`` when ``t == 0``
else ``n // 8``, and (Anthropic only, which reports them) cache-write tokens ``max(1, n // 8)``
when ``t == 0`` else ``0``. Where each lands: OpenAI chat ``usage.prompt_tokens_details.
cached_tokens``, Responses ``usage.input_tokens_details.cached_tokens``, Anthropic
``cache_read_input_tokens`` / ``cache_creation_input_tokens`` with ``input_tokens`` the uncached
rest (as Anthropic bills), Gemini ``usageMetadata.cachedContentTokenCount`` (left out when 0, like
the API; streamed chunks carry prompt-only usage until the last, complete one), Mistral
``usage.prompt_tokens_details.cached_tokens``.

Run it as its own process::

    python -m tether.testing.fake_provider --script script.yaml --port 8080 [--latency S] [--ledger FILE]

prints ``READY http://127.0.0.1:PORT`` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from aiohttp import web

from ._anthropic import AnthropicMessages
from ._common import Call, Ids, Protocol, Reply, RequestError, RequestView, TokenUsage, ToolCall, generated_length
from ._gemini import Gemini
from ._mistral import MistralChat, MistralConversations
from ._openai import OpenAIChat, OpenAIResponses
from .script import Script, Turn

PROTOCOLS: dict[str, type[Protocol]] = {
    p.name: p for p in (OpenAIChat, OpenAIResponses, AnthropicMessages, Gemini, MistralChat, MistralConversations)
}

#: (method, path, target): a protocol name answers model turns; anything else names a handler.
ROUTES: tuple[tuple[str, str, str], ...] = (
    ("POST", "/openai/v1/chat/completions", "openai-chat"),
    ("POST", "/openai/v1/responses", "openai-responses"),
    ("GET", "/openai/v1/models", "models"),
    ("POST", "/anthropic/v1/messages", "anthropic"),
    ("POST", "/gemini/{version}/models/{model_method}", "gemini"),
    ("POST", "/mistral/v1/chat/completions", "mistral-chat"),
    ("POST", "/mistral/v1/conversations", "mistral-conversations"),
    ("POST", "/mistral/v1/conversations/{conversation_id}", "mistral-conversations"),
    ("GET", "/mistral/v1/conversations/{conversation_id}/history", "mistral_history"),
    ("POST", "/mistral/v1/agents", "mistral_agents"),
    ("GET", "/mistral/v1/agents/{agent_id}", "mistral_agents"),
    ("PATCH", "/mistral/v1/agents/{agent_id}", "mistral_agents"),
    ("GET", "/_control/ledger", "control_ledger"),
    ("POST", "/_control/faults", "control_faults"),
    ("POST", "/_control/reset", "control_reset"),
)

#: Path each SDK takes as its base URL, under the server's origin.
BASE_PATHS = {"openai": "/openai/v1", "anthropic": "/anthropic", "gemini": "/gemini", "mistral": "/mistral"}

_CREDENTIAL_HEADERS = ("x-api-key", "x-goog-api-key")
_DEFAULT_MODELS = ("gpt-4o-mini", "gpt-4.1", "gpt-5")


@dataclass(frozen=True)
class Fault:
    """A failure for the next ``times`` calls that match ``match_protocol``.

    ``kind``: ``status:<code>`` (the provider's own error JSON), ``reset`` (a stream is cut after
    about half its events; a non-streamed call is dropped before any response),
    ``slow_first_byte:<seconds>`` (an otherwise normal answer, that much later), or
    ``stall:<seconds>`` (a stream pauses that long after about half its events, then ends
    normally; a non-streamed answer comes that much later), or a malformed 200 to a
    non-streamed call: ``malformed:no-usage`` (the answer without its usage),
    ``malformed:usage`` (usage counts that are not counts: strings, negatives, nested objects),
    ``malformed:body`` (a body that is not JSON at all, though labelled so).
    ``after``: let that many matching calls through first (a fault for the Nth call from now,
    decided when the call arrives, not when a step's record lands).
    ``match_protocol`` is a protocol (``openai-chat``, ``openai-responses``, ``anthropic``,
    ``gemini``, ``mistral-chat``, ``mistral-conversations``), a provider (``openai``,
    ``mistral``…) or None for any call.
    """

    kind: str
    times: int = 1
    match_protocol: str | None = None
    after: int = 0

    def __post_init__(self) -> None:
        name, _, arg = self.kind.partition(":")
        valid = (name == "status" and arg.isdigit()) or (name == "reset" and not arg)
        valid = valid or (name == "malformed" and arg in ("no-usage", "usage", "body"))
        if name in ("slow_first_byte", "stall"):
            try:
                valid = float(arg) >= 0
            except ValueError:
                valid = False
        if not valid:
            raise ValueError(
                f"unknown fault kind {self.kind!r}: use status:<code>, reset, slow_first_byte:<seconds>, stall:<seconds> "
                "or malformed:no-usage|usage|body"
            )

    @property
    def status(self) -> int | None:
        return int(self.kind.partition(":")[2]) if self.kind.startswith("status:") else None

    @property
    def delay(self) -> float:
        return float(self.kind.partition(":")[2]) if self.kind.startswith("slow_first_byte:") else 0.0

    @property
    def stall(self) -> float:
        return float(self.kind.partition(":")[2]) if self.kind.startswith("stall:") else 0.0

    @property
    def answers(self) -> bool:
        """True when the model still answers in full (the fault only delays it)."""
        return self.kind.startswith(("slow_first_byte:", "stall:", "malformed:"))

    def matches(self, protocol: Protocol) -> bool:
        return self.match_protocol in (None, protocol.name, protocol.provider)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fault:
        return cls(str(data["kind"]), int(data.get("times", 1)), data.get("match_protocol"), int(data.get("after", 0)))


@dataclass(frozen=True)
class LedgerEntry:
    """One model-turn request as the server saw it. Credentials never appear: only header names."""

    protocol: str
    path: str
    model: str
    streamed: bool
    #: HTTP status sent; 0 when the connection was dropped before any response.
    status: int
    fault: str | None
    #: Turn index the script answered with (None when the request was refused before that).
    turn: int | None
    body_sha256: str
    body_bytes: int
    headers: tuple[str, ...]
    query: tuple[str, ...]
    #: Usage the answer reported, normalised like ``tether.usage.Usage``
    #: (``input_tokens`` uncached, ``cached_input_tokens``, ``cache_write_tokens``, ``output_tokens``).
    usage: Mapping[str, int] | None = None
    time: float = field(default_factory=time.time)
    #: The request body as received, for tests that assert what the model was sent (kept in
    #: memory only: the ledger file holds its hash and size).
    body: bytes = field(default=b"", repr=False, compare=False)

    @property
    def live(self) -> bool:
        """The model answered this call in full (a 2xx, not cut off by a fault)."""
        return self.status == 200 and (self.fault is None or self.fault.startswith(("slow_first_byte:", "stall:", "malformed:")))

    def to_dict(self) -> dict[str, Any]:
        data = {**asdict(self), "headers": list(self.headers), "query": list(self.query)}
        del data["body"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LedgerEntry:
        return cls(**{**data, "headers": tuple(data["headers"]), "query": tuple(data["query"])})


class Ledger:
    """Thread-safe, append-only list of :class:`LedgerEntry` (the server thread appends)."""

    def __init__(self, path: str | Path | None = None):
        self._entries: list[LedgerEntry] = []
        self._lock = threading.Lock()
        self._path = Path(path) if path else None

    def append(self, entry: LedgerEntry) -> None:
        with self._lock:
            self._entries.append(entry)
            if self._path:
                with self._path.open("a") as f:
                    f.write(json.dumps(entry.to_dict()) + "\n")

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            if self._path:
                self._path.write_text("")

    def snapshot(self) -> list[LedgerEntry]:
        with self._lock:
            return list(self._entries)

    def __iter__(self) -> Iterator[LedgerEntry]:
        return iter(self.snapshot())

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __getitem__(self, index: int) -> LedgerEntry:
        with self._lock:
            return self._entries[index]

    def __repr__(self) -> str:
        return f"Ledger({self.snapshot()!r})"


class FakeProvider:
    """The server. ``start()`` runs it on its own thread and event loop, so sync and async code
    (and other processes) can call it; use as a context manager to start and stop it.

    ``ledger`` holds every model-turn request received, faulted or not; ``live_calls()`` counts
    those the model answered in full (HTTP 200, not cut short by a ``reset``).
    """

    def __init__(
        self,
        script: Script | Mapping[str, Any] | str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        latency: float = 0.0,
        seed: int | None = None,
        ledger_path: str | Path | None = None,
        state_path: str | Path | None = None,
    ):
        if script is None:
            script = Script.text("Hello from the Tether fake provider.")
        elif isinstance(script, (str, Path)):
            script = Script.load(script)
        elif not isinstance(script, Script):
            script = Script.from_dict(script)
        self.script: Script = script
        self.host, self.port = host, port
        self.latency = latency
        self.seed = seed
        self.ledger = Ledger(ledger_path)
        self._protocols = {name: cls() for name, cls in PROTOCOLS.items()}
        if state_path is not None:  # conversations kept on the "server" outlive this process
            cast(MistralConversations, self._protocols["mistral-conversations"]).keep_state_in(Path(state_path))
        self._faults: list[list[Any]] = []  # [Fault, calls left, calls to let through first]
        self._faults_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # --- public API -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The origin, ``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.port}"

    def base_url(self, provider: str) -> str:
        """The base URL to give ``provider``'s SDK: ``openai``, ``anthropic``, ``gemini``, ``mistral``."""
        return self.url + BASE_PATHS[provider]

    def inject(self, *faults: Fault) -> None:
        with self._faults_lock:
            self._faults += [[f, f.times, f.after] for f in faults if f.times > 0]

    def clear_faults(self) -> None:
        """Drop the faults not yet taken (e.g. one held for a call a killed attempt never made)."""
        with self._faults_lock:
            self._faults.clear()

    def live_calls(self, protocol: str | None = None) -> int:
        """Calls the model answered in full, for one protocol or provider name, or all."""
        return sum(1 for e in self.ledger if e.live and protocol in (None, e.protocol, _provider_of(e.protocol)))

    def mistral_history(self, conversation_id: str) -> dict[str, Any]:
        """A Mistral conversation's entries, as ``GET /v1/conversations/{id}/history`` answers."""
        return cast(MistralConversations, self._protocols["mistral-conversations"]).history(conversation_id)

    def reset(self) -> None:
        """Clear the ledger, pending faults and remembered conversations."""
        self.ledger.clear()
        self.clear_faults()
        for p in self._protocols.values():
            p.reset()

    def start(self) -> FakeProvider:
        if self._thread is not None:
            return self
        started = threading.Event()
        failure: list[BaseException] = []
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._serve())
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                started.set()
                return
            started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name=f"fake-provider:{self.port}", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        asyncio.run_coroutine_threadsafe(_cancel_others(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._thread = self._loop = self._runner = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- server -----------------------------------------------------------------------------------

    async def _serve(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        for method, path, target in ROUTES:
            app.router.add_route(method, path, self._handler(target))
        # Open streams must not hold up stop(): real servers drop them too.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            # Our own socket, so port=0 is known before serving; a restart rebinds the same port.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    def _handler(self, target: str) -> Any:
        if target in self._protocols:
            protocol = self._protocols[target]

            async def model_turn(request: web.Request) -> web.StreamResponse:
                return await self._model_turn(request, protocol)

            return model_turn
        return getattr(self, f"_{target}")

    async def _model_turn(self, request: web.Request, protocol: Protocol) -> web.StreamResponse:
        raw = await request.read()
        record = _Recorder(self.ledger, request, protocol, raw)
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except ValueError as exc:
            record(status=400)
            return _json(protocol.error(400, f"Invalid JSON body: {exc}"), 400)
        call = Call(body=body, raw=raw, path_params=dict(request.match_info), query=dict(request.query))
        if not _has_credentials(request):
            record(status=401, model=str(body.get("model") or ""))
            return _json(protocol.error(401, "No API key provided."), 401)
        try:
            view = protocol.read(call)
        except RequestError as exc:
            record(status=exc.status, model=str(body.get("model") or ""))
            return _json(protocol.error(exc.status, exc.message), exc.status)

        fault = self._take_fault(protocol)
        delay = self.latency + (fault.delay if fault else 0.0)
        if delay:
            await asyncio.sleep(delay)
            if request.transport is None or request.transport.is_closing():
                # The caller hung up (a killed process) while the answer was held back: nothing
                # is answered, so the call is not live (tests hold a turn back to kill before it).
                record(view=view, status=0, fault=fault.kind if fault else "caller gone")
                return web.Response(status=499)
        if fault and fault.status:
            record(view=view, status=fault.status, fault=fault.kind)
            # SDKs that retry honour retry-after-ms: keep their retries of injected faults quick.
            headers = {"retry-after-ms": "10"} if fault.status in (408, 409, 429) or fault.status >= 500 else None
            return _json(protocol.error(fault.status, _fault_message(fault.status)), fault.status, headers)
        if fault and fault.kind == "reset" and not view.stream:
            record(view=view, status=0, fault=fault.kind)
            return _drop(request)

        conversation = self.script.conversation_for(view.first_user_text, view.system_text)
        if conversation is None:
            record(view=view, status=400)
            message = f"fake provider: no scripted conversation matches first user message {view.first_user_text!r}"
            return _json(protocol.error(400, message), 400)

        # Ids follow the seed and the request, not who sent it: `metadata` (a caller's user or
        # session id, new in every Claude CLI process) is left out.
        ids = Ids(
            self.seed, hashlib.sha256(json.dumps({k: v for k, v in body.items() if k != "metadata"}, sort_keys=True).encode()).hexdigest()
        )
        try:
            reply = self._handoffs(protocol, view, conversation.turn(view.tool_turns), call, ids, len(raw))
        except RequestError as exc:
            record(view=view, status=exc.status)
            return _json(protocol.error(exc.status, exc.message), exc.status)
        # Written before the answer leaves, so whoever reads the ledger after the call sees it.
        record(view=view, status=200, fault=fault.kind if fault else None, usage=reply.usage)
        if fault is None or fault.answers:
            protocol.commit(view, reply, call)
        stall = fault.stall if fault else 0.0
        if not view.stream:
            if stall:
                await asyncio.sleep(stall)
            if fault and fault.kind == "malformed:body":
                return web.Response(status=200, body=b'{"id": "cut', content_type="application/json")
            return _json(_malformed(protocol.render(reply, call, ids), fault.kind if fault else ""), 200)
        frames = protocol.frames(reply, call, ids)
        cut = max(1, len(frames) // 2) if fault and fault.kind == "reset" else None
        return await _stream(request, frames, cut, stall)

    def _handoffs(self, protocol: Protocol, view: RequestView, turn: Turn, call: Call, ids: Ids, body_bytes: int) -> Reply:
        """The answer to a turn; while the answering agent's turn is a ``handoff``, the agent it
        hands to answers next, in the same response (Mistral runs handoffs on its server)."""
        reply = _reply(protocol, view, turn, ids, body_bytes)
        chain: list[Reply] = []
        while turn.handoff:
            if len(chain) >= 8:
                raise RequestError(400, f"fake provider: more than {len(chain)} handoffs in one answer")
            chain.append(reply)
            view = protocol.handoff(view, turn.handoff, call)
            conversation = self.script.conversation_for(view.first_user_text, view.system_text)
            if conversation is None:
                raise RequestError(
                    400, f"fake provider: no scripted conversation matches agent {view.agent!r} (system {view.system_text!r})"
                )
            turn = conversation.turn(view.tool_turns)
            reply = _reply(protocol, view, turn, ids, body_bytes, reply_id=chain[0].id)
        if not chain:
            return reply
        usage = TokenUsage(
            input_tokens=sum(r.usage.input_tokens for r in (*chain, reply)),
            output_tokens=sum(r.usage.output_tokens for r in (*chain, reply)),
            cached_tokens=sum(r.usage.cached_tokens for r in (*chain, reply)),
        )
        return replace(reply, chain=tuple(chain), usage=usage, created=chain[0].created)

    def _take_fault(self, protocol: Protocol) -> Fault | None:
        with self._faults_lock:
            for pending in self._faults:
                fault, left, skip = pending
                if fault.matches(protocol) and skip:
                    pending[2] = skip - 1
                elif fault.matches(protocol):
                    if left <= 1:
                        self._faults.remove(pending)
                    else:
                        pending[1] = left - 1
                    return cast(Fault, fault)
        return None

    # --- other handlers (named in ROUTES) --------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        if not _has_credentials(request):
            return _json(OpenAIChat().error(401, "No API key provided."), 401)
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "tether-fake"} for m in _DEFAULT_MODELS]
        return _json({"object": "list", "data": data}, 200)

    async def _mistral_history(self, request: web.Request) -> web.Response:
        protocol = cast(MistralConversations, self._protocols["mistral-conversations"])
        if not _has_credentials(request):
            return _json(protocol.error(401, "No API key provided."), 401)
        try:
            return _json(protocol.history(request.match_info["conversation_id"]), 200)
        except RequestError as exc:
            return _json(protocol.error(exc.status, exc.message), exc.status)

    async def _mistral_agents(self, request: web.Request) -> web.Response:
        """``beta.agents``: create (POST), get (GET) and update (PATCH) an agent."""
        protocol = cast(MistralConversations, self._protocols["mistral-conversations"])
        if not _has_credentials(request):
            return _json(protocol.error(401, "No API key provided."), 401)
        try:
            agent_id = request.match_info.get("agent_id")
            if request.method == "GET" and agent_id:
                return _json(protocol.agent(agent_id), 200)
            try:
                body = await request.json()
            except ValueError as exc:
                raise RequestError(400, f"Invalid JSON body: {exc}") from exc
            if not isinstance(body, dict):
                raise RequestError(400, "body is not a JSON object")
            return _json(protocol.update_agent(agent_id, body) if agent_id else protocol.create_agent(body), 200)
        except RequestError as exc:
            return _json(protocol.error(exc.status, exc.message), exc.status)

    async def _control_ledger(self, request: web.Request) -> web.Response:
        return _json([e.to_dict() for e in self.ledger], 200)

    async def _control_faults(self, request: web.Request) -> web.Response:
        data = await request.json()
        try:
            faults = [Fault.from_dict(d) for d in (data if isinstance(data, list) else [data])]
        except (KeyError, TypeError, ValueError) as exc:
            return _json({"error": str(exc)}, 400)
        self.inject(*faults)
        return _json({"queued": len(faults)}, 200)

    async def _control_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return _json({"reset": True}, 200)


# --- helpers --------------------------------------------------------------------------------------


async def _cancel_others() -> None:
    """Cancel what still runs on the server's loop: a held-back answer whose caller hung up is no
    longer the server's connection, so its cleanup does not reach it."""
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


class _Recorder:
    """Appends this request's ledger entry; callers fill in what they learned."""

    def __init__(self, ledger: Ledger, request: web.Request, protocol: Protocol, raw: bytes):
        self.ledger, self.request, self.protocol, self.raw = ledger, request, protocol, raw
        self.sha256 = hashlib.sha256(raw).hexdigest()

    def __call__(
        self,
        *,
        status: int,
        view: RequestView | None = None,
        fault: str | None = None,
        usage: TokenUsage | None = None,
        model: str = "",
    ) -> None:
        self.ledger.append(
            LedgerEntry(
                protocol=self.protocol.name,
                path=self.request.path,
                model=view.model if view else model,
                streamed=view.stream if view else False,
                status=status,
                fault=fault,
                turn=view.tool_turns if view else None,
                body_sha256=self.sha256,
                body_bytes=len(self.raw),
                headers=tuple(sorted({h.lower() for h in self.request.headers})),
                query=tuple(sorted(self.request.query)),
                usage=usage.normalised() if usage else None,
                body=self.raw,
            )
        )


def _reply(protocol: Protocol, view: RequestView, turn: Turn, ids: Ids, body_bytes: int, reply_id: str | None = None) -> Reply:
    calls = tuple(ToolCall(protocol.tool_call_id(ids), view.offered_name(c.name), dict(c.arguments)) for c in turn.tool_calls)
    text = turn.answer_text(view.tool_results)
    first = view.tool_turns == 0
    usage = TokenUsage(
        input_tokens=max(1, body_bytes // 4),
        output_tokens=generated_length(text, calls) // 4 + 1,
        cached_tokens=0 if first else body_bytes // 8,
        cache_write_tokens=max(1, body_bytes // 8) if first and protocol.reports_cache_writes else 0,
    )
    return Reply(id=reply_id or protocol.response_id(ids), model=view.model, text=text, tool_calls=calls, usage=usage, agent=view.agent)


def _malformed(body: dict[str, Any], kind: str) -> dict[str, Any]:
    """The rendered answer with its usage removed or garbled (``malformed:*`` faults)."""
    for key in ("usage", "usageMetadata"):
        if key in body and kind == "malformed:no-usage":
            del body[key]
        elif isinstance(body.get(key), dict) and kind == "malformed:usage":
            body[key] = {k: ("lots", -7, {"n": 3}, None)[i % 4] for i, k in enumerate(body[key])}
    return body


def _has_credentials(request: web.Request) -> bool:
    bearer = request.headers.get("Authorization", "").partition(" ")[2].strip()
    return bool(bearer or any(request.headers.get(h) for h in _CREDENTIAL_HEADERS) or request.query.get("key"))


def _provider_of(protocol: str) -> str | None:
    cls = PROTOCOLS.get(protocol)
    return cls.provider if cls else None


def _fault_message(status: int) -> str:
    return {
        400: "fake provider: injected bad request",
        429: "fake provider: injected rate limit, please retry",
    }.get(status, f"fake provider: injected HTTP {status}")


def _json(body: Any, status: int, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers=headers, dumps=lambda o: json.dumps(o, separators=(",", ":")))


async def _stream(request: web.Request, frames: Sequence[bytes], cut: int | None, stall: float = 0.0) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for i, frame in enumerate(frames[:cut] if cut is not None else frames):
        if stall and i == max(1, len(frames) // 2):
            await asyncio.sleep(stall)
        await response.write(frame)
    if cut is not None:
        return _drop(request, response)
    await response.write_eof()
    return response


def _drop(request: web.Request, response: web.StreamResponse | None = None) -> web.StreamResponse:
    """Abort the TCP connection with a RST, the way a dying upstream or proxy does."""
    transport = request.transport
    if transport is not None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    # aiohttp finds the transport gone and discards whatever the handler returns.
    return response or web.Response(status=500)


# --- talking to a server in another process -------------------------------------------------------


def fetch_ledger(url: str) -> list[LedgerEntry]:
    """The ledger of the fake provider at origin ``url`` (e.g. one started by ``main``)."""
    import httpx

    return [LedgerEntry.from_dict(d) for d in httpx.get(f"{url}/_control/ledger").raise_for_status().json()]


def inject_remote(url: str, *faults: Fault) -> None:
    import httpx

    body = [{"kind": f.kind, "times": f.times, "match_protocol": f.match_protocol, "after": f.after} for f in faults]
    httpx.post(f"{url}/_control/faults", json=body).raise_for_status()


# --- command line ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tether fake-provider", description=__doc__.split("\n\n")[0])
    parser.add_argument("--script", help="YAML or JSON script (default: answer every request with a greeting)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: loopback only)")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before every answer")
    parser.add_argument("--seed", type=int, default=None, help="make ids reproducible")
    parser.add_argument("--ledger", default=None, help="append every call to this JSONL file")
    args = parser.parse_args(argv)

    provider = FakeProvider(args.script, host=args.host, port=args.port, latency=args.latency, seed=args.seed, ledger_path=args.ledger)
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():  # signal handlers live there only
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    with provider:
        print(f"READY {provider.url}", flush=True)
        while not stop.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
