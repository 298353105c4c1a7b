"""The MCP conformance scenario every framework's own MCP client runs (README.md, "MCP servers"):
a bring-your-own agent whose only tool comes from an MCP server (tests/support/mcp_ledger.py, the
official Python SDK), reached through ``tether.mcp_url`` (Streamable HTTP) or ``tether.mcp_stdio``
(stdio, ``tether mcp-relay``). The first attempt is SIGKILLed right after the MCP tool's side
effect was recorded; the retry must run the tool 0 more times (the server's ledger, read from
outside) and call the model only for the turn that never finished.

An adapter's test hands :func:`kill_after_the_mcp_tool_then_resume` a module of its own that
defines ``async def run(target, **run_args) -> AgentResult``: build the framework's agent with its
MCP client pointed at ``target`` (``{"url": ...}`` from mcp_url, or ``{"command", "args"}`` from
mcp_stdio), then ``run_agent(..., agent=agent, **run_args)``.

    python -m tests.support.mcp_scenario '{"module": ..., "target": ..., "store": ..., "origin": ..., "kill": true}'
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "charge: alice 5 cents"


#: Turn 1 asks for the MCP tool; turn 2 answers from its result.
def script(tool: str = "charge", match: str = "charge:", arguments: dict[str, Any] | None = None, text: str = "Done:") -> dict[str, Any]:
    """The fake provider's script: ``tool`` is the name the framework offers the MCP tool under
    (most: the server's own; Hermes prefixes it: ``mcp__<server>__<tool>``)."""
    args = {"customer": "alice", "amount": 5} if arguments is None else arguments
    turns = [{"tool_calls": [{"name": tool, "arguments": args}]}, {"text_from_tool_results": True, "text": text}]
    return {"conversations": [{"match": match, "turns": turns}]}


#: The approval scenario's prompt: turn 1 asks for ``void``, which the server marks destructive
#: (MCP's defaults: no annotations); turn 2 answers from its result (or from the refusal).
VOID_PROMPT = "void: alice"
KEYS = {
    "OPENAI_API_KEY": "sk-mcp",
    "ANTHROPIC_API_KEY": "sk-mcp",
    "GEMINI_API_KEY": "mcp",
    "GOOGLE_API_KEY": "mcp",
    "MISTRAL_API_KEY": "mcp",
}


def kill_after_the_mcp_tool_then_resume(tmp_path: Path, module: Path, transport: str, tool: str = "charge", **env: str) -> dict[str, Any]:
    """Run the scenario; returns the retry's result (the assertions every framework shares are made here)."""
    from tether.testing.fake_provider import FakeProvider
    from tether.testing.script import Script

    from .mcp_ledger import charges, http_server, stdio_command

    ledger = tmp_path / "ledger.jsonl"
    with contextlib.ExitStack() as stack:
        provider = stack.enter_context(FakeProvider(Script.from_dict(script(tool))))
        if transport.startswith("http"):  # "http-in-process": the agent hands its client tether.mcp_http_client
            target: dict[str, Any] = {"url": stack.enter_context(http_server(ledger)).url, "in_process": transport == "http-in-process"}
        else:
            command, *command_args = stdio_command(ledger)
            target = {"command": command, "args": command_args}
        args = {"module": str(module), "target": target, "store": str(tmp_path / "store"), "origin": provider.url}
        child_env = {**os.environ, **KEYS, "PYTHONPATH": str(ROOT), "OPENAI_AGENTS_DISABLE_TRACING": "1", **env}

        def attempt(kill: bool) -> subprocess.CompletedProcess[str]:
            argv = [sys.executable, "-m", "tests.support.mcp_scenario", json.dumps({**args, "kill": kill})]
            return subprocess.run(argv, env=child_env, cwd=ROOT, capture_output=True, text=True, timeout=300)

        first = attempt(kill=True)
        assert first.returncode == -signal.SIGKILL, first.stderr[-4000:]
        assert len(charges(ledger)) == 1 and provider.live_calls() == 1  # the tool ran; the model answered once
        retry = attempt(kill=False)
        assert retry.returncode == 0, retry.stderr[-4000:]
        result: dict[str, Any] = json.loads(retry.stdout.strip().splitlines()[-1])
        assert len(charges(ledger)) == 1, charges(ledger)  # 0 re-runs of the MCP tool
        assert provider.live_calls() == 2  # only the turn that never finished was asked again
        assert (result["model_replayed"], result["model_live"]) == (1, 1), result
        assert (result["tool_replayed"], result["tool_live"]) == (1, 0), result
        assert result["attempt"] == 2 and result["status"] == "succeeded"
        assert "charged alice 5 cents" in result["output"], result
    return result


def approve_the_destructive_mcp_tool_then_resume(
    tmp_path: Path, module: Path, transport: str, approve: bool, tool: str = "void"
) -> dict[str, Any]:
    """The framework's MCP client calls ``void``, which the server marks destructive: the run ends
    suspended (the process exits, holding nothing) before the server hears the call; after
    ``tether approve --yes`` the next attempt calls it once, after ``--no`` the model reads the
    refusal as the tool's error and the server never hears it. Returns the last attempt's result."""
    from tether.testing.fake_provider import FakeProvider
    from tether.testing.script import Script

    from .cli import tether
    from .mcp_ledger import charges, http_server, stdio_command

    ledger, store = tmp_path / "ledger.jsonl", tmp_path / "store"
    with contextlib.ExitStack() as stack:
        provider = stack.enter_context(FakeProvider(Script.from_dict(script(tool, "void:", {"customer": "alice"}, "Result:"))))
        if transport == "http":
            target: dict[str, Any] = {"url": stack.enter_context(http_server(ledger)).url}
        else:
            command, *command_args = stdio_command(ledger)
            target = {"command": command, "args": command_args}
        args = {"module": str(module), "target": target, "store": str(store), "origin": provider.url, "prompt": VOID_PROMPT}
        child_env = {**os.environ, **KEYS, "PYTHONPATH": str(ROOT), "OPENAI_AGENTS_DISABLE_TRACING": "1"}

        def attempt() -> dict[str, Any]:
            argv = [sys.executable, "-m", "tests.support.mcp_scenario", json.dumps({**args, "kill": False})]
            proc = subprocess.run(argv, env=child_env, cwd=ROOT, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, proc.stderr[-4000:]
            result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
            return result

        first = attempt()
        assert first["status"] == "suspended" and first["pending_approval"], first
        assert charges(ledger, "void") == [] and provider.live_calls() == 1  # the server heard nothing
        listed = tether("approve", "mcp-scenario", store=store)
        assert "mcp:ledger/void: Call void of MCP server ledger, which it marks destructive?" in listed.stdout, listed.stdout
        decided = tether("approve", "mcp-scenario", first["pending_approval"], "--yes" if approve else "--no", store=store)
        assert decided.returncode == 0, decided.stderr
        second = attempt()
        assert second["status"] == "succeeded", second
        assert provider.live_calls() == 2 and (second["model_replayed"], second["model_live"]) == (1, 1), second
        if approve:
            assert len(charges(ledger, "void")) == 1 and "voided alice" in second["output"], second
            assert second["tool_live"] == 1
        else:
            assert charges(ledger, "void") == [] and "declined by a human reviewer" in second["output"], second
        third = attempt()  # the run again: everything replays, the server hears nothing more
        assert third["status"] == "succeeded" and provider.live_calls() == 2 and third["model_live"] == 0, third
        assert len(charges(ledger, "void")) == (1 if approve else 0)
    return second


async def _main(args: dict[str, Any]) -> dict[str, Any]:
    from tether.wire.providers import PROVIDERS

    spec = importlib.util.spec_from_file_location("tether_mcp_agents", args["module"])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def on_step(event: Any) -> None:
        if args["kill"] and event.kind == "tool" and not event.replayed and event.name.startswith("mcp:"):
            os.kill(os.getpid(), signal.SIGKILL)  # the MCP tool's record is durable; the node dies now

    result = await module.run(
        args["target"],
        prompt=args.get("prompt", PROMPT),
        run_id="mcp-scenario",
        store=args["store"],
        upstreams={p: f"{args['origin']}/{p}" for p in PROVIDERS},
        on_step=on_step,
    )
    return {
        "output": result.output,
        "status": result.status,
        "attempt": result.attempt,
        "model_live": result.model_live,
        "model_replayed": result.model_replayed,
        "tool_live": result.tool_live,
        "tool_replayed": result.tool_replayed,
        "pending_approval": result.pending_approval,
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_main(json.loads(sys.argv[1])))), flush=True)
