"""A minimal tool-calling loop over the raw ``openai`` SDK, for the runtime's own tests and
benchmarks — and for users who want to watch a kill and a resume without any framework.

Adapters never use it: there the framework owns the loop. Run as a process:

    python -m tether.testing.chat_loop --store DIR --scope run-1 --upstream http://127.0.0.1:PORT/openai \\
        --question "weather in Paris?" [--stream] [--via proxy] [--kill-after-step 4] \\
        [--overlap-writes] [--kill-on-answer 1]

It prints one JSON line: the answer, the journal counters, the replay time and the usage.
Tools are the demo tools below; ``--tool-sleep NAME=SECONDS`` makes one slow, and each execution
is appended to ``$TETHER_TOOL_LOG`` (JSON lines: tool, arguments, idempotency key, attempt) so
tests can count re-executions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx

from ..errors import ToolError
from ..run import Run, StepEvent
from ..tools import ToolSpec, call_tool, idempotency_key

_sleeps: dict[str, float] = {}
#: ``--kill-on-answer N``: SIGKILL right after the SDK handed back the N-th answer (0: never).
_kill_on_answer = 0


def _log_execution(tool: str, arguments: dict[str, Any]) -> None:
    if path := os.environ.get("TETHER_TOOL_LOG"):
        line = {"tool": tool, "arguments": arguments, "key": idempotency_key(), "pid": os.getpid()}
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


async def get_weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    await asyncio.sleep(_sleeps.get("get_weather", 0))
    _log_execution("get_weather", {"city": city})
    return {"city": city, "forecast": "sunny", "celsius": 21}


async def lookup(topic: str) -> str:
    """Look a topic up in the knowledge base."""
    await asyncio.sleep(_sleeps.get("lookup", 0))
    _log_execution("lookup", {"topic": topic})
    return f"{topic}: the knowledge base says it is well documented"


def flaky(reason: str) -> str:
    """A tool that always fails (to show the loop survives tool errors)."""
    _log_execution("flaky", {"reason": reason})
    raise RuntimeError(f"flaky tool failed: {reason}")


DEMO_TOOLS = [ToolSpec("get_weather", get_weather), ToolSpec("lookup", lookup), ToolSpec("flaky", flaky)]


def _schema(spec: ToolSpec) -> dict[str, Any]:
    params = {name: {"type": "string"} for name in spec.fn.__annotations__ if name != "return"}
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.fn.__doc__ or "",
            "parameters": {"type": "object", "properties": params, "required": sorted(params)},
        },
    }


async def chat_loop(client: Any, model: str, question: str, tools: list[ToolSpec], *, stream: bool = False, max_turns: int = 8) -> str:
    """Ask, run the tools the model asks for through the tool seam, until it answers."""
    by_name = {t.name: t for t in tools}
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    schemas = [_schema(t) for t in tools]
    for _ in range(max_turns):
        if stream:
            async with client.chat.completions.stream(model=model, messages=messages, tools=schemas) as s:
                completion = await s.get_final_completion()
        else:
            completion = await client.chat.completions.create(model=model, messages=messages, tools=schemas)
        _answered()
        message = completion.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
                    for c in message.tool_calls
                ],
            }
        )
        for call in message.tool_calls:
            try:
                result = await call_tool(by_name[call.function.name], json.loads(call.function.arguments or "{}"))
            except ToolError as e:
                result = f"error: {e.message}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    raise RuntimeError(f"no answer after {max_turns} turns")


_answers = 0


def _answered() -> None:
    global _answers
    _answers += 1
    if _answers == _kill_on_answer:  # with --overlap-writes its record may still be in flight
        os.kill(os.getpid(), signal.SIGKILL)


def _kill_after(n: int) -> Callable[[StepEvent], None]:
    def listener(event: StepEvent) -> None:
        if event.index >= n:
            os.kill(os.getpid(), signal.SIGKILL)

    return listener


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from openai import AsyncOpenAI

    from ..wire.proxy import shared_proxy
    from ..wire.transport import AsyncWireTransport

    started = time.time()
    run = Run(args.scope, args.store, upstreams={"openai": args.upstream}, overlap_writes=args.overlap_writes)
    if args.kill_after_step:
        run.listeners.append(_kill_after(args.kill_after_step))
    key = os.environ.get("OPENAI_API_KEY", "sk-test-key")
    if args.via == "proxy":
        client = AsyncOpenAI(base_url=shared_proxy().base_url(run, "openai") + "/v1", api_key=key, max_retries=0)
    else:
        http = httpx.AsyncClient(transport=AsyncWireTransport("openai", run))
        # The SDK accepts a plain httpx client as well as its typed httpx2 one.
        client = AsyncOpenAI(base_url=run.upstreams["openai"] + "/v1", api_key=key, http_client=http, max_retries=0)  # type: ignore[arg-type]
    with run.activate():
        answer = await chat_loop(client, args.model, args.question, DEMO_TOOLS, stream=args.stream)
        await run.seam.recorded()  # the last answer is durable before the run reports its end
    await client.close()  # its connections belong to this event loop: close them before it ends
    await run.aclose()
    c = run.counters
    return {
        "answer": answer,
        "attempt": run.attempt,
        "model_live": c.model_live,
        "model_replayed": c.model_replayed,
        "tool_live": c.tool_live,
        "tool_replayed": c.tool_replayed,
        "first_divergence": c.first_divergence,
        "corrupt": c.corrupt,
        "replay_ms": 1000 * (run.replay_s if run.replay_s is not None else time.time() - run.started_at),
        "wall_s": time.time() - started,
        "usage_live": run.accounting.live.to_dict(),
        "usage_replayed": run.accounting.replayed.to_dict(),
    }


def parser() -> argparse.ArgumentParser:
    """The command line; callers in one process build their arguments with it too, so a new
    option reaches them with its default."""
    p = argparse.ArgumentParser(prog="python -m tether.testing.chat_loop")
    p.add_argument("--store", required=True)
    p.add_argument("--scope", required=True)
    p.add_argument("--upstream", required=True, help="OpenAI upstream base, e.g. http://127.0.0.1:PORT/openai")
    p.add_argument("--question", required=True)
    p.add_argument("--model", default="gpt-4o-mini")
    p.add_argument("--stream", action="store_true")
    p.add_argument("--via", choices=["transport", "proxy"], default="transport")
    p.add_argument("--kill-after-step", type=int, default=0)
    p.add_argument("--kill-on-answer", type=int, default=0, help="SIGKILL right after the SDK got the N-th answer")
    p.add_argument("--overlap-writes", action="store_true", help="hand answers back while they are recorded (as run_agent does)")
    p.add_argument("--tool-sleep", action="append", default=[], metavar="NAME=SECONDS")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    global _kill_on_answer
    _kill_on_answer = args.kill_on_answer
    for item in args.tool_sleep:
        name, _, secs = item.partition("=")
        _sleeps[name] = float(secs)
    print(json.dumps(asyncio.run(main_async(args))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
