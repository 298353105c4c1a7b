"""Which modules a fresh process loads for ``import <package>`` and a finished run's ``run_agent``.

Run in a subprocess (``python -m tests.support.startup PACKAGE STORE UPSTREAM``) so nothing the
test process already imported counts. It imports the package, decorates a tool with its ``@tool``
and runs one agent to its end twice under the same run id (the second call replays every step),
then prints one JSON object: the modules loaded after the import and after the finished run.
The fake provider runs in the parent, so its own server modules are not counted here.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # not at run time: the probe counts what importing loads
    from tether.agent import AgentResult

REPO = Path(__file__).resolve().parents[2]

#: Heavy or out-of-layer modules a plain agent process must not load (Flyte only under Flyte or
#: for a Flyte task, the proxy only when an SDK is pointed at it, Kubernetes never in the runtime,
#: YAML only for a manifest or a price file: a runner pod reads JSON).
HEAVY = ("flyte", "kopf", "kubernetes", "tether.wire.proxy", "tether_operator", "boto3", "yaml")


def probe(package: str, store: str, upstream: str) -> dict[str, object]:
    """Run this module for ``package`` in a fresh interpreter of this environment; its figures."""
    env = {**os.environ, "OPENAI_API_KEY": "sk-startup", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.startup", package, store, upstream],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    # What the framework loads on its own is not Tether's doing (LangChain imports yaml itself).
    theirs = set(framework_loads(package))
    for key in ("after_import", "after_run"):
        listed = figures[key]
        assert isinstance(listed, list)
        figures[key] = [name for name in listed if name not in theirs]
    return figures


def framework_loads(package: str) -> list[str]:
    """The :data:`HEAVY` modules a fresh interpreter loads for the framework of ``package`` alone
    (its adapter's framework modules); none for the runtime itself."""
    from tests.support.import_contracts import frameworks

    modules = next((f.modules for f in frameworks() if f.package == package), ())
    if not modules:
        return []
    code = f"import json, sys; import {', '.join(modules)}; print(json.dumps([n for n in {HEAVY!r} if n in sys.modules]))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


#: The agent both runs answer: one tool call, then an answer quoting it.
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


def probe_finished_run(package: str, store: str) -> dict[str, object]:
    """:func:`probe` against a fake provider answering :data:`SCRIPT` (the first run pays both
    turns; the second replays them)."""
    from tether.testing.fake_provider import FakeProvider
    from tether.testing.script import Script

    with FakeProvider(Script.from_dict(SCRIPT)) as fake:
        figures = probe(package, store, fake.url + "/openai")
        assert fake.live_calls() == 2
    return figures


def loaded() -> list[str]:
    return sorted(name for name in HEAVY if name in sys.modules)


def main() -> None:
    package, store, upstream = sys.argv[1:4]
    started = time.perf_counter()
    mod = importlib.import_module(package)
    import_ms = 1000 * (time.perf_counter() - started)
    after_import = loaded()
    if package == "tether":  # the runtime alone: the core tests' minimal adapter runs the agent
        from tests.core.chat_adapter import ADAPTER
        from tether.agent import bind

        run_agent = bind(ADAPTER)[0]
    else:
        run_agent = mod.run_agent

    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return f"Sunny in {city}"

    tools = [mod.tool(get_weather)]
    kwargs = {"tools": tools, "model": "gpt-4o-mini", "run_id": "startup", "store": store, "upstreams": {"openai": upstream}}

    async def twice() -> tuple[AgentResult, float]:
        await run_agent("weather in Paris?", **kwargs)
        started = time.perf_counter()
        result = await run_agent("weather in Paris?", **kwargs)
        return result, 1000 * (time.perf_counter() - started)

    result, finished_ms = asyncio.run(twice())
    print(
        json.dumps(
            {
                "after_import": after_import,
                "after_run": loaded(),
                "import_ms": import_ms,
                "finished_run_ms": finished_ms,
                "model_live": result.model_live,
                "model_replayed": result.model_replayed,
                "tool_replayed": result.tool_replayed,
            }
        )
    )


if __name__ == "__main__":
    main()
