"""The run's timeline as HTML in the Flyte report of the task it ran in."""

from __future__ import annotations

from .in_flyte import flyte_ctx
from .result import AgentResult


def wants_report(report: bool | None) -> bool:
    """Inside a Flyte task the timeline is always logged to the task's report; Flyte publishes
    it only when the task was declared ``report=True``. ``report=False`` skips it."""
    return report is not False and flyte_ctx() is not None


async def render_report(result: AgentResult) -> None:
    """The run's timeline (turns and tools, live or replayed, tokens, cost) into the Flyte report."""
    import html

    import flyte.report

    from ..runview import Step, steps_table

    steps = [Step(e.kind, e.name, e.mode, e.outcome, e.usage.total, e.cost_usd, e.duration_ms) for e in result.events]
    await flyte.report.log.aio(
        f"<h2>Tether run {html.escape(result.run_id)} — {result.status}</h2>"
        f"<p>attempt {result.attempt}: model {result.model_live} live / {result.model_replayed} replayed, "
        f"tools {result.tool_live} live / {result.tool_replayed} replayed; cost ${result.cost_usd:.6f}, saved ${result.saved_usd:.6f}</p>"
        + steps_table(steps)
    )
