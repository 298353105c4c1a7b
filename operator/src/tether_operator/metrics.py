"""A few Prometheus metrics on `/metrics` (text format 0.0.4), without a client library.

tether_operator_submissions_total          executions submitted (first submission of a run)
tether_operator_submit_seconds_{sum,count} time spent in Executor.submit
tether_operator_status_patches_total       AgentRun status patches sent
tether_operator_executions{state=...}      executions the executor holds, by state
"""

from __future__ import annotations

from collections import Counter as _Tally
from collections.abc import Callable
from typing import Any

from aiohttp import web


class Counter:
    def __init__(self, name: str, help: str) -> None:
        self.name, self.help, self.value = name, help, 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def render(self) -> str:
        return f"# HELP {self.name} {self.help}\n# TYPE {self.name} counter\n{self.name} {self.value:g}\n"


class Summary:
    def __init__(self, name: str, help: str) -> None:
        self.name, self.help, self.sum, self.count = name, help, 0.0, 0

    def observe(self, seconds: float) -> None:
        self.sum += seconds
        self.count += 1

    def render(self) -> str:
        return (
            f"# HELP {self.name} {self.help}\n# TYPE {self.name} summary\n{self.name}_sum {self.sum:.6f}\n{self.name}_count {self.count}\n"
        )


SUBMISSIONS = Counter("tether_operator_submissions_total", "Executions submitted.")
SUBMIT_SECONDS = Summary("tether_operator_submit_seconds", "Seconds spent submitting executions.")
STATUS_PATCHES = Counter("tether_operator_status_patches_total", "AgentRun status patches sent.")


def render(states: Callable[[], list[str]] | None = None) -> str:
    text = "".join(m.render() for m in (SUBMISSIONS, SUBMIT_SECONDS, STATUS_PATCHES))
    if states is not None:
        text += "# HELP tether_operator_executions Executions held by the executor, by state.\n# TYPE tether_operator_executions gauge\n"
        for state, n in sorted(_Tally(states()).items()):
            text += f'tether_operator_executions{{state="{state}"}} {n}\n'
    return text


async def serve(port: int, executor: Any) -> web.AppRunner:
    """Start the endpoint; the caller keeps the runner and cleans it up on shutdown."""

    def states() -> list[str]:
        return [st.state.value for st in executor.executions()]

    async def handle(_: web.Request) -> web.Response:
        return web.Response(text=render(states), content_type="text/plain", charset="utf-8", headers={"X-Content-Type-Options": "nosniff"})

    app = web.Application()
    app.router.add_get("/metrics", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner
