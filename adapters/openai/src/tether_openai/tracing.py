"""The OpenAI Agents SDK's own tracing, into the run's OpenTelemetry trace (README.md, "Telemetry").

Used only when OTEL_* variables configure an exporter (``tether.telemetry.configured``): the SDK's
processors are replaced by :class:`ToOpenTelemetry` (its default one sends traces to OpenAI:
nothing goes there), which makes each SDK span an OpenTelemetry span — the agent, its turns,
function calls, handoffs, guardrails — under the span current when the SDK's trace started (the
attempt's ``invoke_agent``, ``tether.telemetry.AttemptTrace.current``). They carry no
``gen_ai.usage``: Tether's own ``chat`` spans count the tokens, once, replay-aware. Inputs and
outputs only with the GenAI content switch.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from agents.tracing import TracingProcessor, set_trace_processors
from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace

from tether.telemetry import capture_content

#: SDK span fields that are content (model input and output, tool arguments and results).
CONTENT = frozenset({"input", "output", "response", "data"})


def _ns(iso: str | None) -> int | None:
    return int(datetime.fromisoformat(iso).timestamp() * 1e9) if iso else None


def _attribute(value: Any) -> Any:
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None if value is None else str(value)


class ToOpenTelemetry(TracingProcessor):
    """SDK spans as OpenTelemetry spans of the run's trace."""

    def __init__(self) -> None:
        self._tracer = otel_trace.get_tracer("tether.openai-agents")
        self._spans: dict[str, Any] = {}
        self._roots: dict[str, Any] = {}  # SDK trace id -> the OpenTelemetry context it started in
        self._lock = threading.Lock()

    def on_trace_start(self, trace: Any) -> None:
        with self._lock:
            self._roots[trace.trace_id] = otel_context.get_current()

    def on_trace_end(self, trace: Any) -> None:
        with self._lock:
            self._roots.pop(trace.trace_id, None)

    def on_span_start(self, span: Any) -> None:
        with self._lock:
            parent = self._spans.get(span.parent_id or "")
            context = otel_trace.set_span_in_context(parent) if parent is not None else self._roots.get(span.trace_id)
        data = span.span_data
        name = getattr(data, "name", None) or ""
        started = self._tracer.start_span(
            f"openai_agents.{data.type} {name}".strip(),
            context=context,
            start_time=_ns(span.started_at),
            attributes={"openai_agents.span.type": data.type},
        )
        with self._lock:
            self._spans[span.span_id] = started

    def on_span_end(self, span: Any) -> None:
        with self._lock:
            ended = self._spans.pop(span.span_id, None)
        if ended is None:
            return
        content = capture_content()
        for key, value in (span.span_data.export() or {}).items():
            if key == "type" or (key in CONTENT and not content) or key == "usage":  # tokens: Tether's chat spans
                continue
            if (attribute := _attribute(value)) is not None:
                ended.set_attribute(f"openai_agents.{key}", attribute)
        if span.error:
            ended.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, str(span.error.get("message", ""))))
        ended.end(end_time=_ns(span.ended_at))

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


_installed = False


def install() -> None:
    """Replace the SDK's processors (OpenAI's exporter) with :class:`ToOpenTelemetry`, once."""
    global _installed
    if not _installed:
        set_trace_processors([ToOpenTelemetry()])
        _installed = True
