"""Replay-aware OpenTelemetry traces of runs (README.md, "Telemetry"): the one place the runtime
talks to OpenTelemetry. ``tether.run.Run`` calls it for every step it accounts (its seams report
there already: ``tether.attempt``), ``run_job`` at the start and end of an attempt.

One trace per run, whatever its attempts: the trace id and the run span's id are derived from the
run scope, an attempt's ``invoke_agent`` span id from the scope and the attempt number, so every
attempt — in any process, on any node — puts its spans in the same trace under the same parents
without asking anyone. A model turn is a ``chat {model}`` span (GenAI semantic conventions), a
tool call ``execute_tool {tool}``, a decided approval ``await_approval {tool}`` from request to
decision. Replayed turns and tools are spans marked ``tether.replayed=true`` (a tool result from
the cross-run cache also ``tether.cached=true``) with zero token usage: token sums over a trace
are what the provider was paid.

A killed attempt closes no span, and the spans it had not exported yet are gone with it. So an
attempt exports its spans as they end (batched: the standard ``OTEL_BSP_*`` settings) and, after
each export, notes in the store which of its steps went out (``runs/<scope>/telemetry/<n>.json``);
the next attempt reads the notes of the earlier ones and exports, from their journal records, the
attempt span and the live steps of every attempt that did not end its own trace. Each step is
exported once (a kill between an export and its note can send a step twice, as OTLP retries can).

Nothing here runs unless an exporter is configured with the standard variables
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, or
``OTEL_TRACES_EXPORTER=otlp``; ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` turn it
off): :func:`configured` reads the environment and imports nothing; the OpenTelemetry SDK (the
``tether[otel]`` extra) is imported on first use. Message content (model requests and answers,
tool arguments and results) is exported only with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``,
the GenAI conventions' switch; request headers (credentials) never are.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import ConfigError
from .journal import Record, read_attempts
from .stores import Store
from .usage import Usage
from .wire import protocols

if TYPE_CHECKING:
    from .journal import Journal

log = logging.getLogger("tether.telemetry")

#: The GenAI semantic conventions' switch for message content (off unless "true").
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: How long the end of an attempt waits for its spans to be exported.
FLUSH_TIMEOUT_S = 10.0
#: gen_ai.provider.name of each upstream (the conventions' well-known values).
PROVIDER_NAMES = {"openai": "openai", "anthropic": "anthropic", "gemini": "gcp.gemini", "mistral": "mistral_ai"}
_PROTOCOLS = {p.name: p for p in protocols.ALL}


def configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether traces are to be exported (the standard ``OTEL_*`` variables); imports nothing."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(exporter or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def capture_content(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"


# -- ids: the same in every attempt of a run --------------------------------------------------
def _id(bits: int, *parts: object) -> int:
    digest = hashlib.sha256("\0".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[: bits // 8], "big") or 1


def trace_id(scope: str) -> int:
    """The run's trace id (128 bits), derived from its scope."""
    return _id(128, "tether-trace", scope)


def run_span_id(scope: str) -> int:
    return _id(64, "tether-run", scope)


def attempt_span_id(scope: str, attempt: int) -> int:
    return _id(64, "tether-attempt", scope, attempt)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _step(record: Record) -> str:
    return f"{record.kind}/{record.fingerprint}/{record.occurrence}"


def _note_key(scope: str, attempt: int) -> str:
    return f"runs/{scope}/telemetry/{attempt:05d}.json"


# -- the process's exporter ------------------------------------------------------------------
class _Exporting:
    """The OpenTelemetry SDK objects of this process (one tracer provider, one batch processor),
    and the attempts whose exported steps it notes in their stores."""

    def __init__(self) -> None:
        protocol = (
            os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
        ).strip()
        if protocol != "http/protobuf":
            raise ConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: Tether exports traces by OTLP over http/protobuf only")
        exporter = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
        if exporter != "otlp":
            raise ConfigError(f"OTEL_TRACES_EXPORTER={exporter}: Tether exports traces by OTLP only (otlp or none)")
        try:
            from opentelemetry import trace
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
            from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
        except ImportError as e:
            raise ConfigError(
                f"OTEL_* variables ask for traces, but OpenTelemetry is not installed: pip install 'tether[otel]' ({e})"
            ) from e
        self.trace = trace
        self.attempts: dict[tuple[str, int], AttemptTrace] = {}
        self.lock = threading.Lock()
        forced: dict[int, tuple[int, int]] = {}  # thread id -> (trace id, span id) of the span being started
        self.forced = forced

        class Ids(RandomIdGenerator):
            """Random ids, except for the run's and attempts' spans (see :meth:`_start`)."""

            def generate_span_id(self) -> int:
                pinned = forced.get(threading.get_ident())
                return pinned[1] if pinned else int(super().generate_span_id())

            def generate_trace_id(self) -> int:
                pinned = forced.get(threading.get_ident())
                return pinned[0] if pinned else int(super().generate_trace_id())

        outer = self

        class Noting(OTLPSpanExporter):
            """OTLP, then a note per attempt of what went out (the next attempt reads it)."""

            def export(self, spans: Any) -> Any:
                result = super().export(spans)
                if result == SpanExportResult.SUCCESS:
                    outer.exported(spans)
                return result

        attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "tether"}
        self.provider = TracerProvider(resource=Resource.create(attributes), id_generator=Ids())
        self.provider.add_span_processor(BatchSpanProcessor(Noting()))
        self.tracer = self.provider.get_tracer("tether")
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            trace.set_tracer_provider(self.provider)  # frameworks' own instrumentation exports beside ours

    def exported(self, spans: Any) -> None:
        touched: dict[tuple[str, int], tuple[list[str], bool]] = {}
        for span in spans:
            attrs = span.attributes or {}
            key = (str(attrs.get("tether.run.id")), int(attrs.get("tether.attempt") or 0))
            steps, ended = touched.setdefault(key, ([], False))
            if "tether.step" in attrs and not attrs.get("tether.replayed"):
                steps.append(str(attrs["tether.step"]))
            if attrs.get("gen_ai.operation.name") == "invoke_agent":
                touched[key] = (steps, True)
        for (scope, attempt), (steps, ended) in touched.items():
            with self.lock:
                owner = self.attempts.get((scope, attempt))
            if owner is not None:
                owner.note(attempt, steps, ended)

    @contextlib.contextmanager
    def pinned(self, trace: int, span: int) -> Iterator[None]:
        me = threading.get_ident()
        self.forced[me] = (trace, span)
        try:
            yield
        finally:
            del self.forced[me]


_exporting: _Exporting | None = None
_exporting_lock = threading.Lock()


def _sdk() -> _Exporting:
    global _exporting
    with _exporting_lock:
        if _exporting is None:
            _exporting = _Exporting()
        return _exporting


# -- one attempt -------------------------------------------------------------------------------
F = TypeVar("F", bound=Callable[..., None])


def _quiet(method: F) -> F:
    """Telemetry never fails a run once it started: an error in making a span is logged, once."""

    @functools.wraps(method)
    def guarded(*args: Any, **kwargs: Any) -> None:
        try:
            method(*args, **kwargs)
        except Exception as e:
            if not getattr(guarded, "logged", False):
                log.warning("tether: telemetry %s failed (spans may be missing): %s: %s", method.__name__, type(e).__name__, e)
                guarded.logged = True  # type: ignore[attr-defined]

    return guarded  # type: ignore[return-value]


class NoTrace:
    """What an attempt has when no exporter is configured: every call does nothing."""

    def loaded(self, journal: Journal, started_at: float) -> None:
        pass

    def describe(self, **attributes: Any) -> None:
        pass

    def turn(self, record: Record, *, replayed: bool, cost_usd: float | None) -> None:
        pass

    def tool(self, name: str, *, replayed: bool, cached: bool, outcome: str, duration_ms: float, record: Record | None) -> None:
        pass

    def approval(self, tool: str, approval_id: str, requested_at: float, decision: Any) -> None:
        pass

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        yield

    def end(self, status: str, error: str | None = None, *, run_ended: bool = False) -> None:
        pass


NO_TRACE = NoTrace()


def attempt_trace(scope: str, store: Store) -> NoTrace:
    """The trace of a new attempt of ``scope``: :class:`AttemptTrace` when an exporter is configured."""
    return AttemptTrace(scope, store) if configured() else NO_TRACE


class AttemptTrace(NoTrace):
    """The spans of one attempt of one run scope (see the module docstring)."""

    def __init__(self, scope: str, store: Store) -> None:
        self.sdk = _sdk()
        self.scope, self.store = scope, store
        self.trace_id = trace_id(scope)
        self.attempt = 0
        self.started_at = time.time()
        self.content = capture_content()
        self.attributes: dict[str, Any] = {}
        self._notes: dict[int, dict[str, Any]] = {}
        self._notes_lock = threading.Lock()
        self._earlier: threading.Thread | None = None
        self._ended = False
        self._parents: dict[int, Any] = {}

    # -- ids and parents ---------------------------------------------------------------------
    def _parent(self, span_id: int) -> Any:
        """The context of a span of this trace by its id (cached: every step of an attempt asks)."""
        context = self._parents.get(span_id)
        if context is None:
            t = self.sdk.trace
            span = t.SpanContext(self.trace_id, span_id, is_remote=True, trace_flags=t.TraceFlags(t.TraceFlags.SAMPLED))
            context = self._parents[span_id] = t.set_span_in_context(t.NonRecordingSpan(span))
        return context

    def _span(
        self,
        name: str,
        start: float,
        end: float,
        attributes: dict[str, Any],
        *,
        parent: int | None,
        pinned: int | None = None,
        attempt: int | None = None,
        error: str | None = None,
    ) -> None:
        """One finished span: started at ``start``, ended at ``end`` (seconds), under ``parent``
        (``None``: the run's root span, whose id is ``pinned`` like an attempt's)."""
        t = self.sdk.trace
        attrs = {"tether.run.id": self.scope, "tether.attempt": self.attempt if attempt is None else attempt, **attributes}
        context = self._parent(parent) if parent is not None else t.set_span_in_context(t.INVALID_SPAN)
        kind = t.SpanKind.CLIENT if name.startswith("chat ") else t.SpanKind.INTERNAL
        with self.sdk.pinned(self.trace_id, pinned) if pinned is not None else contextlib.nullcontext():
            span = self.sdk.tracer.start_span(name, context=context, kind=kind, attributes=attrs, start_time=_ns(start))
        if error:
            span.set_status(t.Status(t.StatusCode.ERROR, error))
        span.end(end_time=_ns(max(end, start)))

    # -- what Run reports ----------------------------------------------------------------------
    @_quiet
    def loaded(self, journal: Journal, started_at: float) -> None:
        """The journal is loaded: the attempt number is known. The earlier attempts that left no
        end of their own are exported from their records, in a thread of its own."""
        self.attempt, self.started_at = journal.attempt, started_at
        with self.sdk.lock:
            self.sdk.attempts[(self.scope, self.attempt)] = self
        if self.attempt > 1:
            records = [r for r in list(journal.records.values()) if r.attempt < self.attempt]
            self._earlier = threading.Thread(target=self._export_earlier, args=(records,), name="tether-trace-earlier", daemon=True)
            self._earlier.start()

    def describe(self, **attributes: Any) -> None:
        """Attributes of the attempt span (the framework, the model asked for)."""
        if "gen_ai.provider.name" in attributes:
            attributes["gen_ai.provider.name"] = PROVIDER_NAMES.get(attributes["gen_ai.provider.name"], attributes["gen_ai.provider.name"])
        self.attributes.update({k: v for k, v in attributes.items() if v})

    @_quiet
    def turn(self, record: Record, *, replayed: bool, cost_usd: float | None) -> None:
        now = time.time()
        start, end = (now, now) if replayed else (record.started_at or now, (record.started_at or now) + record.duration_ms / 1000)
        self._turn_span(record, replayed=replayed, cost_usd=cost_usd, start=start, end=end, attempt=self.attempt)

    def _turn_span(
        self,
        record: Record,
        *,
        replayed: bool,
        cost_usd: float | None,
        start: float,
        end: float,
        attempt: int,
        extra: dict[str, Any] | None = None,
    ) -> None:
        protocol = _PROTOCOLS.get(str(record.response.get("protocol", "")))
        usage = Usage(**record.usage) if record.usage and not replayed else Usage()
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": record.model,
            "gen_ai.usage.input_tokens": usage.input_tokens + usage.cached_input_tokens + usage.cache_write_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cached_input_tokens,
            "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
            "tether.replayed": replayed,
            "tether.step": _step(record),
            **(extra or {}),
        }
        if protocol is not None:
            attrs["gen_ai.provider.name"] = PROVIDER_NAMES.get(protocol.provider, protocol.provider)
            if record.outcome == "ok":
                response_id, reasons = protocol.answer_facts(record.body, bool(record.response.get("streamed")))
                if response_id:
                    attrs["gen_ai.response.id"] = response_id
                if reasons:
                    attrs["gen_ai.response.finish_reasons"] = reasons
        if cost_usd is not None:
            attrs["tether.saved_usd" if replayed else "tether.cost_usd"] = cost_usd
        error = None
        if record.outcome != "ok":
            attrs["error.type"] = str(record.response.get("status", "error"))
            error = f"the model answered HTTP {attrs['error.type']}"
        if self.content:
            body = record.request.get("body")
            attrs["gen_ai.input.messages"] = json.dumps(body, sort_keys=True, ensure_ascii=False, default=str)
            attrs["gen_ai.output.messages"] = record.body.decode(errors="replace")
        self._span(
            f"chat {record.model}".strip(), start, end, attrs, parent=attempt_span_id(self.scope, attempt), attempt=attempt, error=error
        )

    @_quiet
    def tool(self, name: str, *, replayed: bool, cached: bool, outcome: str, duration_ms: float, record: Record | None) -> None:
        now = time.time()
        start = now if replayed or record is None else (record.started_at or now)
        self._tool_span(
            name,
            replayed=replayed,
            cached=cached,
            outcome=outcome,
            start=start,
            end=start + (0 if replayed else duration_ms / 1000),
            record=record,
            attempt=self.attempt,
        )

    def _tool_span(
        self,
        name: str,
        *,
        replayed: bool,
        cached: bool,
        outcome: str,
        start: float,
        end: float,
        record: Record | None,
        attempt: int,
        extra: dict[str, Any] | None = None,
    ) -> None:
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "tether.replayed": replayed,
            **(extra or {}),
        }
        if cached:
            attrs["tether.cached"] = True
        if record is not None:
            attrs["tether.step"] = _step(record)
        error = None
        if outcome != "ok":
            payload = _json(record.body) if record is not None else None
            attrs["error.type"] = str(payload.get("type", "error")) if isinstance(payload, dict) else "error"
            error = f"the tool raised {attrs['error.type']}"
        if self.content and record is not None:
            attrs["gen_ai.tool.call.arguments"] = json.dumps(
                record.request.get("arguments"), sort_keys=True, ensure_ascii=False, default=str
            )
            attrs["gen_ai.tool.call.result"] = record.body.decode(errors="replace")
        self._span(f"execute_tool {name}", start, end, attrs, parent=attempt_span_id(self.scope, attempt), attempt=attempt, error=error)

    @_quiet
    def approval(self, tool: str, approval_id: str, requested_at: float, decision: Any) -> None:
        """A decided approval: a span from the request to the decision (its wait)."""
        attrs = {
            "tether.approval.id": approval_id,
            "tether.approval.approved": bool(decision.approved),
            "tether.approval.by": decision.by or "",
            "tether.approval.wait_s": max(0.0, decision.decided_at - requested_at),
            "gen_ai.tool.name": tool,
        }
        self._span(f"await_approval {tool}", requested_at, decision.decided_at, attrs, parent=attempt_span_id(self.scope, self.attempt))

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """The attempt's span as the current span: a framework's own OpenTelemetry spans made
        meanwhile are its children."""
        from opentelemetry import context

        token = context.attach(self._parent(attempt_span_id(self.scope, self.attempt)))
        try:
            yield
        finally:
            context.detach(token)

    @_quiet
    def end(self, status: str, error: str | None = None, *, run_ended: bool = False) -> None:
        """The attempt ended (``succeeded``, ``failed``, ``suspended``, ``interrupted``): its span,
        the run's if the run ended with it, then everything exported (bounded wait)."""
        if self._ended or not self.attempt:
            return
        self._ended = True
        now = time.time()
        attrs = {"gen_ai.operation.name": "invoke_agent", "tether.attempt.status": status, **self.attributes}
        failed = error if status == "failed" else None
        self._span(
            self._attempt_name(),
            self.started_at,
            now,
            attrs,
            parent=run_span_id(self.scope),
            pinned=attempt_span_id(self.scope, self.attempt),
            error=failed,
        )
        if run_ended:
            self.end_run(status, error)
        if self._earlier is not None:
            self._earlier.join(FLUSH_TIMEOUT_S)
        self.flush()
        with self.sdk.lock:
            self.sdk.attempts.pop((self.scope, self.attempt), None)

    def end_run(self, status: str, error: str | None) -> None:
        """The run ended (succeeded, or failed for good): its span, from its first attempt's start."""
        first = self._attempt_started(1) or self.started_at
        attrs = {"tether.run.status": status, **self.attributes}
        if self.attempt:
            attrs["tether.attempts"] = self.attempt
        error = error if status == "failed" else None
        self._span(f"run {self.scope}", first, time.time(), attrs, parent=None, pinned=run_span_id(self.scope), error=error)

    def flush(self) -> None:
        self.sdk.provider.force_flush(int(FLUSH_TIMEOUT_S * 1000))

    def _attempt_name(self) -> str:
        agent = self.attributes.get("gen_ai.agent.name")
        return f"invoke_agent {agent}" if agent else "invoke_agent"

    # -- the notes of what went out, and the attempts that left no end -------------------------
    def note(self, attempt: int, steps: list[str], ended: bool) -> None:
        """Called by the exporter after an export: write down what of ``attempt`` went out."""
        with self._notes_lock:
            note = self._notes.setdefault(attempt, {"steps": [], "ended": False})
            note["steps"] = sorted(set(note["steps"]) | set(steps))
            note["ended"] = note["ended"] or ended
            data = json.dumps(note).encode()
        try:
            self.store.put(_note_key(self.scope, attempt), data)
        except Exception as e:  # telemetry never fails a run; the next attempt may export a step again
            log.warning("tether: could not note the exported spans of run %s attempt %d: %s", self.scope, attempt, e)

    def _attempt_started(self, attempt: int) -> float | None:
        try:
            return read_attempts(self.store, self.scope).get(attempt)
        except Exception:
            return None

    def _export_earlier(self, records: list[Record]) -> None:
        try:
            for attempt in range(1, self.attempt):
                data = self.store.get(_note_key(self.scope, attempt))
                note = _json(data) if data else None
                note = note if isinstance(note, dict) else {"steps": [], "ended": False}
                if note.get("ended"):
                    continue
                with self.sdk.lock:  # this attempt's exporter notes what goes out of that one now
                    self.sdk.attempts[(self.scope, attempt)] = self
                with self._notes_lock:
                    self._notes[attempt] = {"steps": list(note.get("steps", [])), "ended": False}
                self._export_attempt(attempt, [r for r in records if r.attempt == attempt], set(note.get("steps", [])))
        except Exception as e:  # telemetry never fails a run
            log.warning("tether: could not export the earlier attempts of run %s: %s", self.scope, e)

    def _export_attempt(self, attempt: int, records: list[Record], sent: set[str]) -> None:
        """Attempt ``attempt`` ended without its span (killed): its span and the live steps it had
        not exported, from its journal records (``tether.reconstructed=true``)."""
        mark = {"tether.reconstructed": True}
        for record in sorted(records, key=lambda r: r.started_at):
            if _step(record) in sent:
                continue
            end = record.started_at + record.duration_ms / 1000
            if record.kind == "model":
                self._turn_span(record, replayed=False, cost_usd=None, start=record.started_at, end=end, attempt=attempt, extra=mark)
            else:
                name = str(record.response.get("tool") or record.request.get("tool") or "tool")
                self._tool_span(
                    name,
                    replayed=False,
                    cached=False,
                    outcome=record.outcome,
                    start=record.started_at,
                    end=end,
                    record=record,
                    attempt=attempt,
                    extra=mark,
                )
        started = self._attempt_started(attempt) or min((r.started_at for r in records), default=self.started_at)
        ended = max((r.started_at + r.duration_ms / 1000 for r in records), default=started)
        attrs = {"gen_ai.operation.name": "invoke_agent", "tether.attempt.status": "unknown", **mark, **self.attributes}
        self._span(
            self._attempt_name(),
            started,
            ended,
            attrs,
            parent=run_span_id(self.scope),
            pinned=attempt_span_id(self.scope, attempt),
            attempt=attempt,
        )


def run_failed(scope: str, store: str, error: str) -> None:
    """A run ended by a terminal failure outside an attempt's own end (it could not start, or its
    attempt failed for good): its run span. Telemetry never fails a run: errors are logged."""
    if not configured():
        return
    try:
        from .stores import open_store

        trace = AttemptTrace(scope, open_store(store))
        trace.end_run("failed", error)
        trace.flush()
    except Exception as e:
        log.warning("tether: could not export the end of run %s: %s", scope, e)


def _json(data: bytes | None) -> Any:
    try:
        return json.loads(data) if data else None
    except ValueError:
        return None
