"""What only the Claude Agent SDK adapter has: the CLI's volatile request parts (date, kernel,
working directory) normalised out of fingerprints, built-in tools off, the SDK's own cost figure,
and no provider key in anything Tether stores. The shared conformance suite covers the rest.

Every test runs the SDK's real bundled CLI, through Tether's loopback proxy, against the fake
Anthropic provider over HTTP.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from claude_agent_sdk import ClaudeAgentOptions

from tether.progress import read_progress
from tether.run import Run
from tether.stores import open_store
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script
from tether.wire.proxy import shared_proxy
from tether_claude import ClaudeAgent, run_agent, tool, tool_name

MODEL = "claude-sonnet-4-5"
KEY = "sk-ant-test-secret-0123456789"
executions: list[str] = []


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    executions.append(f"get_weather:{city}")
    return f"The weather in {city} is sunny, 21 C."


SCRIPT = {
    "conversations": [
        {
            "match": "",
            "turns": [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Done:"},
            ],
        }
    ]
}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    executions.clear()
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with FakeProvider(Script.from_dict(SCRIPT), seed=5) as provider:
        yield provider


def options(fake: FakeProvider, tmp_path: Path, run_id: str, **extra: object) -> dict:
    return {"run_id": run_id, "store": str(tmp_path / "store"), "upstreams": {"anthropic": f"{fake.url}/anthropic"}, **extra}


def ask(fake: FakeProvider, tmp_path: Path, run_id: str, **extra: object):
    return asyncio.run(
        run_agent("weather: how is it in Paris?", model=MODEL, tools=[get_weather], **options(fake, tmp_path, run_id, **extra))
    )


def drifted(body: bytes) -> bytes:
    """The CLI's request as it would be on another node, another day, in another directory."""
    text = body.decode()
    for line in ("OS Version: ", "Primary working directory: "):
        assert line in text, f"the CLI no longer sends {line!r}: revisit the normalisation"
    import re

    text = re.sub(r"OS Version: [^\\]+", "OS Version: Linux 5.4.0-1099-other-kernel", text)
    text = re.sub(r"Primary working directory: [^\\]+", "Primary working directory: /srv/elsewhere", text)
    text, dates = re.subn(r"Today's date is \d{4}-\d{2}-\d{2}", "Today's date is 2031-07-14", text)
    assert dates, "the CLI no longer sends today's date: revisit the normalisation"
    return text.encode()


def test_retry_on_another_day_and_kernel_replays(fake: FakeProvider, tmp_path: Path) -> None:
    """The CLI's requests with a different date, kernel string and working directory replay with
    0 live calls (sent through the proxy with the CLI's own headers); the same drift from another
    client (no claude-cli User-Agent) is not normalised and goes live."""
    first = ask(fake, tmp_path, "drift")
    assert first.status == "succeeded" and first.model_live == 2
    sent = [e for e in fake.ledger.snapshot() if e.status == 200]
    assert len(sent) == 2
    progress = read_progress(open_store(str(tmp_path / "store")), "drift")
    assert progress is not None
    assert progress["steps"]["normalisedParts"] >= 2 * 4  # 2 turns × (date, kernel, cwd, platform, …)

    async def retry(user_agent: str) -> Run:
        run = Run("drift", str(tmp_path / "store"), upstreams={"anthropic": f"{fake.url}/anthropic"})
        base = shared_proxy().base_url(run, "anthropic")
        async with httpx.AsyncClient() as client:
            for entry in sent:
                headers = {
                    "user-agent": user_agent,
                    "x-api-key": KEY,
                    "anthropic-version": "2023-06-01",
                    "content-type": "application/json",
                }
                headers["anthropic-beta"] = (
                    "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,thinking-token-count-2026-05-13,thinking-display-updates-2026-08-18"
                )
                r = await client.post(f"{base}/v1/messages?beta=true", content=drifted(entry.body), headers=headers)
                assert r.status_code == 200
        await run.aclose()
        return run

    calls = fake.live_calls()
    run = asyncio.run(retry("claude-cli/2.1.332 (external, sdk-py, agent-sdk/0.2.189)"))
    assert fake.live_calls() == calls
    assert run.counters.model_replayed == 2 and run.counters.model_live == 0
    assert run.normalised_parts >= 2 * 4
    other = asyncio.run(retry("Anthropic/Python 0.70.0"))
    assert other.counters.model_replayed == 0 and fake.live_calls() == calls + 2


def test_rerun_from_another_working_directory_replays(fake: FakeProvider, tmp_path: Path) -> None:
    """The real CLI, run again in another working directory, replays every turn and every tool."""
    first = ask(fake, tmp_path, "cwd")
    assert first.model_live == 2 and executions == ["get_weather:Paris"]
    calls = fake.live_calls()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    agent = ClaudeAgent(
        ClaudeAgentOptions(model=MODEL, system_prompt="", allowed_tools=[tool_name(get_weather)], cwd=str(elsewhere)), [get_weather]
    )
    again = asyncio.run(run_agent("weather: how is it in Paris?", agent=agent, **options(fake, tmp_path, "cwd")))
    assert fake.live_calls() == calls and again.model_replayed == 2 and again.tool_replayed == 1
    assert again.output == first.output and executions == ["get_weather:Paris"]


def test_a_changed_claude_md_line_shaped_like_the_clis_goes_live(fake: FakeProvider, tmp_path: Path) -> None:
    """The CLI quotes a project's CLAUDE.md in a <system-reminder> of its own: a line there shaped
    like the CLI's date or kernel line is the user's text. Changed before a re-run, every turn goes
    live with it (issue 23); unchanged, the re-run replays (the CLI's own date and kernel are still
    normalised beside it)."""
    project = tmp_path / "project"
    project.mkdir()

    def run(lines: str):
        (project / "CLAUDE.md").write_text(f"Project rules.\n{lines}\n")
        options_ = ClaudeAgentOptions(model=MODEL, setting_sources=["project"], cwd=str(project), allowed_tools=[tool_name(get_weather)])
        agent = ClaudeAgent(options_, [get_weather])
        return asyncio.run(run_agent("weather: how is it in Paris?", agent=agent, **options(fake, tmp_path, "claude-md")))

    first = run("Today's date is 1999-01-01.\nOS Version: Linux 6.1.0-mine")
    assert first.model_live == 2
    assert run("Today's date is 1999-01-01.\nOS Version: Linux 6.1.0-mine").model_replayed == 2
    calls = fake.live_calls()
    changed = run("Today's date is 1999-01-02.\nOS Version: Linux 6.1.0-mine")
    assert changed.model_replayed == 0 and changed.model_live == 2 and fake.live_calls() == calls + 2
    assert "Today's date is 1999-01-02." in fake.ledger.snapshot()[-2].body.decode()
    changed = run("Today's date is 1999-01-02.\nOS Version: Linux 5.4.0-mine")
    assert changed.model_replayed == 0 and changed.model_live == 2


def test_builtin_tools_off_unless_the_options_list_them(fake: FakeProvider, tmp_path: Path) -> None:
    """A declarative agent offers the model its Tether tools only; a bring-your-own
    ClaudeAgentOptions that lists built-in tools gets exactly those."""
    ask(fake, tmp_path, "tools")
    offered = [t["name"] for t in json.loads(fake.ledger.snapshot()[0].body)["tools"]]
    assert offered == ["mcp__tether__get_weather"]
    fake.ledger.clear()
    agent = ClaudeAgent(ClaudeAgentOptions(model=MODEL, tools=["Read"], allowed_tools=[tool_name(get_weather)]), [get_weather])
    asyncio.run(run_agent("weather: how is it in Paris?", agent=agent, **options(fake, tmp_path, "tools-byo")))
    offered = sorted(t["name"] for t in json.loads(fake.ledger.snapshot()[0].body)["tools"])
    assert offered == ["Read", "mcp__tether__get_weather"]


def test_sdk_cost_beside_tethers_and_no_key_stored(fake: FakeProvider, tmp_path: Path) -> None:
    """The SDK's own total_cost_usd is in the progress document beside Tether's live cost; the
    provider key appears nowhere in the store (journal, progress, memory transcript)."""
    first = ask(fake, tmp_path, "cost", memory_key="costs")
    assert first.cost_usd > 0
    progress = read_progress(open_store(str(tmp_path / "store")), "cost")
    assert progress is not None
    usage = progress["usage"]
    assert usage["liveCostUSD"] == pytest.approx(first.cost_usd, abs=1e-6)
    assert usage["frameworkCostUSD"] > 0
    stored = [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
    assert any("memory" in str(p) for p in stored)
    for path in stored:
        assert KEY.encode() not in path.read_bytes(), path
    assert os.environ["ANTHROPIC_API_KEY"] == KEY


def test_your_own_sdk_tools_are_not_journaled(fake: FakeProvider, tmp_path: Path) -> None:
    """A bring-your-own agent's own SDK MCP tool (not a Tether tool) is run by the CLI: a second
    attempt replays both model turns but runs that tool again."""
    from claude_agent_sdk import create_sdk_mcp_server
    from claude_agent_sdk import tool as sdk_tool

    @sdk_tool("get_weather", "Get the current weather in a city.", {"city": str})
    async def plain(args: dict) -> dict:
        executions.append(f"plain:{args['city']}")
        return {"content": [{"type": "text", "text": f"The weather in {args['city']} is sunny, 21 C."}]}

    options_ = ClaudeAgentOptions(
        model=MODEL, mcp_servers={"mine": create_sdk_mcp_server("mine", tools=[plain])}, allowed_tools=["mcp__mine__get_weather"]
    )
    first = asyncio.run(run_agent("weather: how is it in Paris?", agent=options_, **options(fake, tmp_path, "plain")))
    again = asyncio.run(run_agent("weather: how is it in Paris?", agent=options_, **options(fake, tmp_path, "plain")))
    assert first.model_live == 2 and again.model_replayed == 2 and again.model_live == 0
    assert first.tool_live == again.tool_live == again.tool_replayed == 0
    assert executions == ["plain:Paris", "plain:Paris"]


def test_memory_continues_the_session_over_three_runs(fake: FakeProvider, tmp_path: Path) -> None:
    """Each run on a memory key resumes the SDK session the earlier runs left (the provider sees
    every earlier turn, once), and the store keeps each turn once."""
    for i in range(3):
        fake.ledger.clear()
        done = asyncio.run(
            run_agent(f"memory: run {i} here", model=MODEL, tools=[get_weather], **options(fake, tmp_path, f"m{i}", memory_key="m"))
        )
        assert done.status == "succeeded"
    sent = fake.ledger.snapshot()[0].body.decode()
    assert [sent.count(f"memory: run {i} here") for i in range(3)] == [1, 1, 1]
    assert sent.count("The weather in Paris is sunny") >= 2  # the earlier runs' tool results
    store = open_store(str(tmp_path / "store"))
    stored = b"".join(store.get(k) or b"" for k in store.list("memory/default/m/segments/"))
    assert [stored.count(f"memory: run {i} here".encode()) for i in range(3)] == [1, 1, 1]
