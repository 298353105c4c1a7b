"""Replay-aware OpenTelemetry traces, received by a real OpenTelemetry Collector (OTLP receiver,
file exporter: tests/support/otel.py, built by scripts/otel-collector.sh).

A run laid out as a runner pod lays it out (``python -m tether exec``, the provider key and the
tool's Secret in its secrets directory) against the fake provider: the first turn asks for two
tools; one fails at once, the other holds after its side effect. The attempt is SIGKILLed from
outside once the turn and the failed tool are recorded (no model call in flight: every turn the
provider answered is in the journal), and resumed to completion. What the collector holds:

    one trace, with the id derived from the run; the run's span; two ``invoke_agent`` attempt
    spans under it (the killed one exported by the next attempt from its journal)
    the replayed turn and tool marked ``tether.replayed=true`` with zero tokens, each step once
    the sum of ``gen_ai.usage.*`` tokens equal to the fake provider's ledger of live turns
    no message content by default (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true adds it)
    no secret anywhere

Two ways to be killed: before the batch processor exported anything (the next attempt exports the
killed attempt's steps from its journal), and after it exported the turn and the tool (the next
attempt exports only the attempt's span: nothing twice).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.otel import Collector, Span, collector
from tests.support.tool_runner_pod import MODEL_KEY, WEATHER_KEY, Pod
from tests.support.wait import wait_for
from tether import telemetry
from tether.stores import open_store
from tether.testing import FakeProvider

PROMPT = "weather: Paris and Atlantis?"
# The test adapter runs a turn's tool calls one after the other: Atlantis fails, then Paris holds.
SCRIPT = {
    "conversations": [
        {
            "match": "weather:",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "forecast", "arguments": {"city": "Atlantis"}},
                        {"name": "forecast", "arguments": {"city": "Paris"}},
                    ]
                },
                {"tool_calls": [{"name": "pause", "arguments": {}}]},
                {"text_from_tool_results": True, "text": "Report:"},
            ],
        }
    ]
}


@pytest.fixture(scope="module")
def otel(tmp_path_factory):
    with collector(tmp_path_factory.mktemp("otel")) as c:
        yield c


@pytest.fixture
def provider():
    with FakeProvider(SCRIPT, latency=0.01) as fake:
        yield fake


def pod(tmp_path: Path, provider: FakeProvider, run_id: str) -> Pod:
    """The pod's files, with one secrets directory holding the provider key and the tool's Secret
    (the tool runs in the agent's process here)."""
    p = Pod(tmp_path, provider.url, PROMPT, run_id)
    secrets = tmp_path / "secrets"
    shutil.copytree(p.agent_secrets, secrets)
    shutil.copytree(p.tool_secrets / "tools", secrets / "tools")
    return p


def exec_env(p: Pod, otel: Collector, **extra: str) -> dict[str, str]:
    return p.env(TETHER_SECRETS_DIR=str(p.root / "secrets"), OTEL_EXPORTER_OTLP_ENDPOINT=otel.endpoint, **extra)


def tether_exec(p: Pod, env: dict[str, str]) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "tether", "exec", str(p.request), "--store", str(p.store), "--progress"]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=p.root)


def run_to_completion(p: Pod, env: dict[str, str]) -> str:
    proc = tether_exec(p, env)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, out + err
    return out


def live_tokens(provider: FakeProvider) -> tuple[int, int]:
    """Input (all kinds) and output tokens of the turns the provider answered in full."""
    live = [e.usage or {} for e in provider.ledger if e.live]
    inputs = sum(u.get("input_tokens", 0) + u.get("cached_input_tokens", 0) + u.get("cache_write_tokens", 0) for u in live)
    return inputs, sum(u.get("output_tokens", 0) for u in live)


def traced(otel: Collector, run_id: str) -> list[Span]:
    """The run's spans, once its run span arrived (the last one its final attempt exports)."""
    wait_for(lambda: any(s.name == f"run {run_id}" for s in otel.of_run(run_id)), timeout=60, what=f"the run span of {run_id}")
    return otel.of_run(run_id)


@pytest.mark.parametrize("exported_before_kill", [False, True], ids=["killed-before-export", "killed-after-export"])
def test_a_killed_and_resumed_run_is_one_trace_with_replays_marked_and_tokens_paid_once(tmp_path, otel, provider, exported_before_kill):
    run_id = f"otel-kill-{int(exported_before_kill)}"
    p = pod(tmp_path, provider, run_id)
    hold = tmp_path / "hold"
    # Killed before export: the batch processor would wait ten minutes. After: 50 ms, and the kill
    # waits until the attempt noted the turn and the failed tool as exported.
    delay = "50" if exported_before_kill else "600000"
    first = tether_exec(p, exec_env(p, otel, HOLD=str(hold), OTEL_BSP_SCHEDULE_DELAY=delay))
    try:
        assert first.stdout is not None
        seen = ""
        while "step   2" not in seen:
            line = first.stdout.readline()
            assert line, f"attempt 1 ended early: {seen}{first.stderr.read() if first.stderr else ''}"
            seen += line
        wait_for(hold.exists, what="the Paris forecast to hold after its side effect")
        note = p.store / "runs" / run_id / "telemetry" / "00001.json"
        if exported_before_kill:
            wait_for(lambda: note.exists() and len(json.loads(note.read_text())["steps"]) == 2, what="attempt 1's export note")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        first.kill()
    assert first.returncode == -signal.SIGKILL
    assert exported_before_kill == note.exists()
    run_to_completion(p, exec_env(p, otel))

    spans = traced(otel, run_id)
    assert {s.trace_id for s in spans} == {f"{telemetry.trace_id(run_id):032x}"}, "one trace, its id derived from the run"
    assert len({s.span_id for s in spans}) == len(spans), "a span exported twice"
    (root,) = [s for s in spans if s.name == f"run {run_id}"]
    assert root.parent == "" and root.span_id == f"{telemetry.run_span_id(run_id):016x}" and root["tether.run.status"] == "succeeded"
    attempts = sorted((s for s in spans if s.name.startswith("invoke_agent")), key=lambda s: s["tether.attempt"])
    assert [a["tether.attempt"] for a in attempts] == [1, 2] and all(a.parent == root.span_id for a in attempts)
    assert attempts[0]["tether.reconstructed"] is True and "tether.reconstructed" not in attempts[1].attributes
    assert attempts[1]["tether.attempt.status"] == "succeeded" and attempts[1]["tether.framework"] == "openai"
    by_attempt = {a["tether.attempt"]: a.span_id for a in attempts}
    steps = [s for s in spans if s.name.startswith(("chat ", "execute_tool "))]
    assert all(s.parent == by_attempt[s["tether.attempt"]] for s in steps), "every step under its attempt"

    def listed(attempt: int) -> list[tuple[str, bool]]:
        return sorted((s.name, s["tether.replayed"]) for s in steps if s["tether.attempt"] == attempt)

    assert listed(1) == [("chat gpt-4o-mini", False), ("execute_tool forecast", False)]  # the turn, Atlantis failing
    assert listed(2) == sorted(
        [("chat gpt-4o-mini", True), ("execute_tool forecast", True)]  # replayed: the turn, Atlantis
        + [("execute_tool forecast", False), ("chat gpt-4o-mini", False), ("execute_tool pause", False), ("chat gpt-4o-mini", False)]
    )
    for s in steps:
        if s["tether.attempt"] == 1:  # exported by attempt 2 from the journal only when attempt 1 had not
            assert s.get("tether.reconstructed", False) is not exported_before_kill
        if s.name.startswith("chat "):
            assert s["gen_ai.operation.name"] == "chat" and s["gen_ai.provider.name"] == "openai"
            assert s["gen_ai.request.model"] == "gpt-4o-mini" and s["gen_ai.response.id"].startswith("chatcmpl")
            assert s["gen_ai.response.finish_reasons"] in (("tool_calls",), ("stop",))
            if s["tether.replayed"]:
                assert s["gen_ai.usage.input_tokens"] == s["gen_ai.usage.output_tokens"] == 0
            else:
                assert s["gen_ai.usage.input_tokens"] > 0 and s["gen_ai.usage.output_tokens"] > 0
    failed = [s for s in steps if s.name == "execute_tool forecast" and s.status.get("code") in (2, "STATUS_CODE_ERROR")]
    assert {(s["tether.attempt"], s["error.type"]) for s in failed} == {(1, "LookupError"), (2, "LookupError")}

    inputs = sum(s.get("gen_ai.usage.input_tokens", 0) for s in spans)
    outputs = sum(s.get("gen_ai.usage.output_tokens", 0) for s in spans)
    assert (inputs, outputs) == live_tokens(provider) and len([e for e in provider.ledger if e.live]) == 3

    raw = otel.raw()
    assert MODEL_KEY not in raw and WEATHER_KEY not in raw, "a secret was exported"
    assert PROMPT not in raw and "sunny" not in raw, "message content exported without the switch"
    assert not any(k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.tool.call")) for s in spans for k in s.attributes)


def test_message_content_is_exported_only_with_the_switch(tmp_path, otel, provider):
    run_id = "otel-content"
    p = pod(tmp_path, provider, run_id)
    run_to_completion(p, exec_env(p, otel, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true"))
    spans = traced(otel, run_id)
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(chats) == 3 and all(PROMPT in s["gen_ai.input.messages"] for s in chats)
    last = max(chats, key=lambda s: s.start_ns)
    assert "Paris: sunny" in last["gen_ai.input.messages"] and "Report:" in last["gen_ai.output.messages"]
    tools = {json.loads(s["gen_ai.tool.call.arguments"]).get("city"): s for s in spans if s.name == "execute_tool forecast"}
    assert json.loads(tools["Paris"]["gen_ai.tool.call.result"]) == "Paris: sunny"
    raw = [line for line in otel.raw().splitlines() if run_id in line]
    assert raw and not any(MODEL_KEY in line or WEATHER_KEY in line for line in raw), "a secret was exported"


def test_nothing_is_imported_without_an_exporter(tmp_path):
    """No OTEL_* exporter variable: a run builds no tracer and imports no OpenTelemetry SDK."""
    code = (
        "import sys; from tether.run import Run; r = Run('quiet', sys.argv[1]); "
        "assert type(r.trace).__name__ == 'NoTrace', r.trace; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk') or m.startswith('opentelemetry.exporter')))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "store")], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
    assert not telemetry.configured({}) and not telemetry.configured(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}
    )
    assert telemetry.configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x"}) and telemetry.configured(
        {"OTEL_TRACES_EXPORTER": "otlp"}
    )
    assert not telemetry.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"})


async def test_a_decided_approval_is_a_span_with_its_wait_and_who_decided(tmp_path, otel, monkeypatch):
    """The attempt that suspends says which approval it waits for; the attempt after the decision
    has an ``await_approval`` span from the request to the decision, under the same trace."""
    from tests.core.chat_adapter import ADAPTER
    from tether.agent import run_agent, tool
    from tether.approvals import decide

    @tool(approval="Refund {amount}?")
    def refund(amount: int) -> str:
        """Refund an amount."""
        return f"refunded {amount}"

    script = {
        "conversations": [
            {"match": "refund", "turns": [{"tool_calls": [{"name": "refund", "arguments": {"amount": 40}}]}, {"text": "Done."}]}
        ]
    }
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otel.endpoint)
    store = str(tmp_path / "store")
    with FakeProvider(script) as fake:
        common = dict(model="gpt-4o-mini", tools=[refund], run_id="otel-approval", store=store, upstreams={"openai": fake.url + "/openai"})
        first = await run_agent(ADAPTER, "refund 40 please", **common)
        assert first.status == "suspended" and first.pending_approval
        decide(open_store(store), "otel-approval", first.pending_approval, True, by="alice")
        done = await run_agent(ADAPTER, "refund 40 please", **common)
        assert done.status == "succeeded"
    spans = traced(otel, "otel-approval")
    attempts = {s["tether.attempt"]: s for s in spans if s.name.startswith("invoke_agent")}
    assert attempts[1]["tether.attempt.status"] == "suspended" and attempts[1]["tether.approval.pending"] == first.pending_approval
    (waited,) = [s for s in spans if s.name == "await_approval refund"]
    assert waited.parent == attempts[2].span_id and waited["tether.approval.id"] == first.pending_approval
    assert waited["tether.approval.approved"] is True and waited["tether.approval.by"] == "alice"
    assert waited["tether.approval.wait_s"] > 0 and waited.end_ns > waited.start_ns


def _sse(*events: dict, done: bool = False) -> bytes:
    out = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return out + (b"data: [DONE]\n\n" if done else b"")


@pytest.mark.parametrize(
    ("protocol", "body", "streamed", "facts"),
    [
        ("openai-chat", {"id": "chatcmpl-1", "choices": [{"finish_reason": "tool_calls"}]}, False, ("chatcmpl-1", ("tool_calls",))),
        (
            "openai-chat",
            _sse({"id": "chatcmpl-2", "choices": [{"delta": {"content": "Hi"}, "finish_reason": None}]},
                 {"id": "chatcmpl-2", "choices": [{"delta": {}, "finish_reason": "stop"}]},
                 {"id": "chatcmpl-2", "choices": [], "usage": {"prompt_tokens": 3}}, done=True),
            True,
            ("chatcmpl-2", ("stop",)),
        ),
        (
            "openai-responses",
            _sse({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
                 {"type": "response.output_text.delta", "delta": "Hi"},
                 {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}}),
            True,
            ("resp_1", ("completed",)),
        ),
        (
            "anthropic",
            _sse({"type": "message_start", "message": {"id": "msg_1", "stop_reason": None}},
                 {"type": "content_block_delta", "delta": {"text": "Hi"}},
                 {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
                 {"type": "message_stop"}),
            True,
            ("msg_1", ("end_turn",)),
        ),
        ("gemini", {"responseId": "g-1", "candidates": [{"finishReason": "STOP"}, {"finishReason": "MAX_TOKENS"}]}, False, ("g-1", ("STOP", "MAX_TOKENS"))),
        ("mistral-conversations", {"conversation_id": "conv_1", "outputs": []}, False, ("conv_1", ())),
        ("openai-chat", b"not json", False, ("", ())),
    ],
)  # fmt: skip
def test_an_answer_names_its_id_and_finish_reasons(protocol, body, streamed, facts):
    """What a ``chat`` span's gen_ai.response.id and .finish_reasons come from, per wire format."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    assert telemetry._PROTOCOLS[protocol].answer_facts(raw, streamed) == facts
