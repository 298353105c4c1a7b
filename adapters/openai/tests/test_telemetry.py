"""With OTEL_* configuring an exporter, the OpenAI Agents SDK's own tracing stays on and goes into
the run's OpenTelemetry trace (a real collector: tests/support/otel.py), never to OpenAI: the
SDK's agent, function and handoff spans under the attempt's ``invoke_agent`` span, carrying no
token counts (Tether's ``chat`` spans count them once)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.otel import collector
from tests.support.wait import wait_for
from tether import telemetry
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SCRIPT = {
    "conversations": [
        {
            "match": "manage:",
            "turns": [
                {"tool_calls": [{"name": "ask_weather_agent", "arguments": {"input": "How is Paris today?"}}]},
                {"text_from_tool_results": True, "text": "Manager:"},
            ],
        },
        {
            "match": "",
            "turns": [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Done:"},
            ],
        },
    ]
}

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from agents import tracing
    from tether_openai import run_agent
    from tether_openai.tracing import ToOpenTelemetry

    result = asyncio.run(run_agent("manage: ask about Paris", agent="byo_agents:manager", run_id="agents-otel",
                                   upstreams={"openai": sys.argv[1]}, store=sys.argv[2]))
    assert result.status == "succeeded", result
    processors = tracing.get_trace_provider()._multi_processor._processors  # test-only peek
    assert [type(p) for p in processors] == [ToOpenTelemetry], processors  # OpenAI's exporter is gone
    """
)


def test_agents_sdk_spans_join_the_runs_trace_and_nothing_goes_to_openai(tmp_path):
    with collector(tmp_path) as otel, FakeProvider(Script.from_dict(SCRIPT), seed=3) as fake:
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_AGENTS_DISABLE_TRACING" and not k.startswith("OTEL_")}
        env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": otel.endpoint, "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO), *sys.path])}
        child = subprocess.run(
            [sys.executable, "-c", CHILD, fake.url + "/openai", str(tmp_path / "store")],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert child.returncode == 0, child.stdout + child.stderr
        trace = f"{telemetry.trace_id('agents-otel'):032x}"

        def received() -> list:
            spans = [s for s in otel.spans() if s.trace_id == trace]
            return spans if any(s.name == "run agents-otel" for s in spans) else []

        spans = wait_for(received, timeout=60, what="the run's spans")
    by_id = {s.span_id: s for s in spans}
    (attempt,) = [s for s in spans if s.name.startswith("invoke_agent")]
    sdk = [s for s in spans if s.name.startswith("openai_agents.")]
    names = {s.name for s in sdk}
    assert {"openai_agents.agent manager", "openai_agents.agent weather_agent", "openai_agents.function ask_weather_agent"} <= names, names

    def under_attempt(span) -> bool:
        while span.parent in by_id:
            span = by_id[span.parent]
            if span is attempt:
                return True
        return False

    assert all(under_attempt(s) for s in sdk), [(s.name, s.parent) for s in sdk if not under_attempt(s)]
    assert not [k for s in sdk for k in s.attributes if "usage" in k or "tokens" in k]
    live = [e.usage or {} for e in fake.ledger if e.live]
    assert sum(s.get("gen_ai.usage.output_tokens", 0) for s in spans) == sum(u.get("output_tokens", 0) for u in live)
    assert not [
        k for s in sdk for k in s.attributes if k in ("openai_agents.input", "openai_agents.output")
    ]  # no content without the switch
