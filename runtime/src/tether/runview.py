"""The run view: a run's attempts and steps read from the store, and the one HTML renderer of them
(``tether ui``, the operator's view, and the Flyte report of ``tether.agent.report``).

What a page is made of, per run: its progress record (the last attempt: phase, counters, usage,
error), each attempt's log (``tether.contract.attempt_log_key``: its steps in order, live /
replayed / cached, written when it ends), the journal's records (what each step was: a tool's
arguments, a turn's tokens and errors) and the approval requests with their decisions. An attempt
killed before it ended left no log: its live steps are its journal records, its replays unknown.

Never on a page: a secret (none is in the store: tool Secrets live in the attempt's process only,
API keys are left out of the journal's canonical requests), and message content (the turns'
messages, tool results) unless the viewer turned it on (``content``: ``tether ui --show-content``,
chart value ``ui.showContent``). Read only: nothing here writes to the store.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from .approvals import list_approvals
from .contract import attempt_log_key, manifest_key, run_of_progress_key, runs_prefix
from .cost import PriceTable
from .journal import Record, StepKey, read_attempts, read_records
from .progress import read_progress
from .stores import Store
from .usage import Usage

#: Characters of a tool's arguments, an error or (with content on) a message shown per step.
DETAIL_LIMIT = 400
CONTENT_LIMIT = 4000


@dataclass
class Step:
    kind: str
    name: str
    mode: str  # live | replayed | cached | unknown (a killed attempt's replays are not known)
    outcome: str
    tokens: int = 0
    cost_usd: float = 0.0  # live: what it cost; replayed: what it would have cost (saved)
    duration_ms: float = 0.0
    arguments: str = ""
    error: str = ""
    content: str = ""


@dataclass
class AttemptView:
    number: int
    started_at: float | None
    #: How it ended (Succeeded, Failed, AwaitingApproval, Interrupted), Running, or None: no log.
    phase: str | None
    steps: list[Step] = field(default_factory=list)
    error: str = ""
    live_usd: float = 0.0
    saved_usd: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    divergence: dict[str, Any] | None = None
    #: Whether the steps are the attempt's own log (else: its journal records, the live steps only).
    logged: bool = False


@dataclass
class RunView:
    run_id: str
    progress: dict[str, Any]
    framework: str
    attempts: list[AttemptView]
    approvals: list[dict[str, Any]]
    #: Message content shown (the turns, tool results, the run's result): the viewer's switch.
    content: bool = False


@dataclass
class RunRow:
    """One line of the runs list."""

    run_id: str
    link: str
    progress: dict[str, Any]
    framework: str = ""
    namespace: str = ""
    name: str = ""


def framework_of(store: Store, run_id: str) -> str:
    """The framework ``tether run`` recorded in the run's manifest."""
    data = store.get(manifest_key(run_id))
    try:
        return str(json.loads(data or b"{}").get("framework") or "")
    except ValueError:
        return ""


def local_rows(store: Store) -> list[RunRow]:
    """Every run of a store with a progress record, newest first (as ``tether list``)."""
    rows = []
    for key in store.list(runs_prefix()):
        if run_id := run_of_progress_key(key):
            rows.append(RunRow(run_id, f"runs/{quote(run_id)}", read_progress(store, run_id) or {}, framework_of(store, run_id)))
    rows.sort(key=lambda r: _number(r.progress.get("updatedAt")), reverse=True)
    return rows


def read_run(store: Store, run_id: str, *, framework: str = "", content: bool = False) -> RunView | None:
    """A run's view, or None if the store has nothing of it."""
    progress = read_progress(store, run_id)
    records = read_records(store, run_id)
    if progress is None and not records:
        return None
    progress = progress or {}
    by_key: dict[StepKey, Record] = {r.key: r for r in records}
    starts = read_attempts(store, run_id)
    numbers = sorted(set(starts) | {r.attempt for r in records} | ({progress["attempt"]} if progress.get("attempt") else set()))
    prices = PriceTable.default()
    attempts = []
    for n in numbers:
        data = store.get(attempt_log_key(run_id, n))
        log = _json(data) if data is not None else None
        if log is not None:
            attempts.append(_logged(n, starts.get(n), log, by_key, prices, content))
        else:
            own = [r for r in records if r.attempt == n]
            current = progress if progress.get("attempt") == n else None
            attempts.append(_from_journal(n, starts.get(n), own, current, prices, content))
    approvals = list_approvals(store, run_id)
    return RunView(run_id, progress, framework or framework_of(store, run_id), attempts, approvals, content)


def _logged(
    n: int, started: float | None, log: dict[str, Any], by_key: dict[StepKey, Record], prices: PriceTable, content: bool
) -> AttemptView:
    p = log.get("progress") or {}
    usage, steps = p.get("usage") or {}, p.get("steps") or {}
    view = AttemptView(n, started or _number(log.get("startedAt")) or None, p.get("phase"), logged=True)
    view.error = str(p.get("error") or "")
    view.live_usd, view.saved_usd = _number(usage.get("liveCostUSD")), _number(usage.get("savedUSD"))
    view.counts = {k: int(steps.get(k) or 0) for k in ("modelLive", "modelReplayed", "toolLive", "toolReplayed")}
    view.divergence = steps.get("firstDivergence")
    for event in log.get("events") or []:
        key = event.get("key")
        record = by_key.get((key[0], key[1], key[2])) if isinstance(key, list) and len(key) == 3 else None
        step = Step(
            str(event.get("kind")),
            str(event.get("name")),
            str(event.get("mode")),
            str(event.get("outcome")),
            int(event.get("tokens") or 0),
            _number(event.get("costUSD")),
            _number(event.get("durationMs")),
        )
        if record is not None:
            _describe(step, record, content)
            if step.mode == "replayed" and step.kind == "model":
                step.cost_usd = (prices.dollars(record.model, Usage(**record.usage)) or 0.0) if record.usage else 0.0
        view.steps.append(step)
    return view


def _from_journal(
    n: int, started: float | None, records: list[Record], progress: dict[str, Any] | None, prices: PriceTable, content: bool
) -> AttemptView:
    """An attempt without a log: killed, or still running (``progress`` is then its own)."""
    view = AttemptView(n, started, progress.get("phase") if progress else None)
    for r in records:
        usage = Usage(**r.usage) if r.usage else Usage()
        cost = (prices.dollars(r.model, usage) or 0.0) if r.kind == "model" and r.usage else 0.0
        # A result from an earlier run's cache is written with this attempt's number but keeps its
        # own (earlier) start time.
        mode = "cached" if started is not None and r.started_at and r.started_at < started - 1 else "live"
        step = Step(r.kind, r.model if r.kind == "model" else str(r.response.get("tool") or r.request.get("tool") or ""), mode, r.outcome)
        step.tokens, step.cost_usd, step.duration_ms = usage.total, cost, r.duration_ms
        _describe(step, r, content)
        view.steps.append(step)
        view.live_usd += cost if mode == "live" else 0.0
    if progress:
        figures, steps = progress.get("usage") or {}, progress.get("steps") or {}
        view.error = str(progress.get("error") or "")
        view.live_usd, view.saved_usd = _number(figures.get("liveCostUSD")), _number(figures.get("savedUSD"))
        view.counts = {k: int(steps.get(k) or 0) for k in ("modelLive", "modelReplayed", "toolLive", "toolReplayed")}
        view.divergence = steps.get("firstDivergence")
    return view


def _describe(step: Step, record: Record, content: bool) -> None:
    """What the record says about the step: a tool's arguments and error; a turn's error."""
    if record.kind == "tool":
        step.arguments = _clip(json.dumps(record.request.get("arguments"), sort_keys=True, default=str), DETAIL_LIMIT)
        if record.outcome == "error":
            error = _json(record.body) or {}
            step.error = _clip(f"{error.get('type', 'error')}: {error.get('message', '')}", DETAIL_LIMIT)
        elif content:
            step.content = _clip(record.body.decode("utf-8", "replace"), CONTENT_LIMIT)
    else:
        if record.outcome == "error":
            status = record.response.get("status")
            step.error = f"HTTP {status}" if status else "error"
            step.error += f": {_clip(record.body.decode('utf-8', 'replace'), DETAIL_LIMIT)}" if content else ""
        if content:
            request = {k: v for k, v in record.request.items() if k not in ("model", "url", "path")}
            step.content = _clip(
                f"request: {json.dumps(request, default=str)}\nanswer: {record.body.decode('utf-8', 'replace')}", CONTENT_LIMIT
            )
    if not step.tokens and record.usage:
        step.tokens = Usage(**record.usage).total


# -- HTML ------------------------------------------------------------------------------------------
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1f24}
table{border-collapse:collapse;margin:.5em 0 1.2em}th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f4f6}.mode{font-weight:600;padding:1px 6px;border-radius:8px}
.live .mode{background:#dbeafe}.replayed .mode{background:#dcfce7}.cached .mode{background:#fef9c3}.unknown .mode{background:#eee}
.error{color:#b42318}.note{color:#57606a}pre{white-space:pre-wrap;max-width:70em;margin:0;font-size:12px}
code{font-size:12px}.Failed{color:#b42318}.Succeeded{color:#1a7f37}
"""


def page(title: str, body: str) -> str:
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>{body}</body></html>"
    )


def _money(x: float) -> str:
    return f"${x:.6f}"


def _when(t: Any) -> str:
    n = _number(t)
    if not n and isinstance(t, str) and t:
        return html.escape(t)
    return datetime.fromtimestamp(n, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if n else "-"


def runs_table(rows: Iterable[RunRow]) -> str:
    """The runs list: phase, framework, attempts, turns, cost live and saved."""
    rows = list(rows)
    if not rows:
        return '<p class="note">No runs.</p>'
    namespaced = any(r.namespace for r in rows)
    head = ("<th>namespace</th>" if namespaced else "") + (
        "<th>run</th><th>phase</th><th>framework</th><th>attempts</th><th>turns live/replayed (last attempt)</th>"
        "<th>tools live/replayed (last attempt)</th><th>cost live (all attempts)</th><th>saved by replay</th><th>updated</th>"
    )
    out = []
    for r in rows:
        p = r.progress
        steps, usage = p.get("steps") or {}, p.get("usage") or {}
        phase = str(p.get("phase") or "-")
        out.append(
            f'<tr class="run" data-run="{html.escape(r.run_id)}">'
            + (f"<td>{html.escape(r.namespace)}</td>" if namespaced else "")
            + f'<td><a href="{html.escape(r.link)}">{html.escape(r.name or r.run_id)}</a></td>'
            f'<td class="phase {html.escape(phase)}">{html.escape(phase)}</td><td class="framework">{html.escape(r.framework or "-")}</td>'
            f'<td class="attempt">{int(p.get("attempt") or 0)}</td>'
            f"<td>{int(steps.get('modelLive') or 0)}/{int(steps.get('modelReplayed') or 0)}</td>"
            f"<td>{int(steps.get('toolLive') or 0)}/{int(steps.get('toolReplayed') or 0)}</td>"
            f'<td class="cost">{_money(_number(usage.get("runLiveCostUSD", usage.get("liveCostUSD"))))}</td>'
            f'<td class="saved">{_money(_number(usage.get("savedUSD")))}</td><td>{_when(p.get("updatedAt"))}</td></tr>'
        )
    return f"<table><tr>{head}</tr>{''.join(out)}</table>"


def steps_table(steps: Iterable[Step]) -> str:
    """An attempt's steps in order, each live / replayed / cached; the one step renderer."""
    rows = []
    for i, s in enumerate(steps, 1):
        what = f"<code>{html.escape(s.arguments)}</code>" if s.arguments else ""
        if s.error:
            what += f'<div class="error">{html.escape(s.error)}</div>'
        if s.content:
            what += f'<pre class="content">{html.escape(s.content)}</pre>'
        cost = _money(s.cost_usd) + (" saved" if s.mode in ("replayed", "cached") and s.cost_usd else "")
        took = "-" if s.mode in ("replayed", "cached") else f"{s.duration_ms:.0f} ms"  # served from the store: no time of its own
        rows.append(
            f'<tr class="step {html.escape(s.mode)} {html.escape(s.kind)}" data-mode="{html.escape(s.mode)}" data-kind="{html.escape(s.kind)}">'
            f'<td>{i}</td><td>{html.escape(s.kind)}</td><td class="name">{html.escape(s.name)}</td>'
            f'<td><span class="mode">{html.escape(s.mode)}</span></td><td class="outcome">{html.escape(s.outcome)}</td>'
            f"<td>{s.tokens}</td><td>{cost}</td><td>{took}</td><td>{what}</td></tr>"
        )
    head = "<tr><th>#</th><th>kind</th><th>name</th><th>mode</th><th>outcome</th><th>tokens</th><th>cost</th><th>time</th><th>arguments / error</th></tr>"
    return f'<table class="steps">{head}{"".join(rows)}</table>'


def run_body(view: RunView, *, title: str = "") -> str:
    """A run's page: summary, attempts with their steps, approvals."""
    p = view.progress
    usage = p.get("usage") or {}
    phase = str(p.get("phase") or "-")
    saved = sum(a.saved_usd for a in view.attempts)
    parts = [
        f"<h1>Run {html.escape(title or view.run_id)}</h1>",
        '<table class="summary">'
        f'<tr><th>phase</th><td class="phase {html.escape(phase)}">{html.escape(phase)}</td></tr>'
        f'<tr><th>framework</th><td class="framework">{html.escape(view.framework or "-")}</td></tr>'
        f'<tr><th>attempts</th><td class="attempts">{len(view.attempts)}</td></tr>'
        f'<tr><th>cost live (all attempts)</th><td class="cost-live">{_money(_number(usage.get("runLiveCostUSD", usage.get("liveCostUSD"))))}</td></tr>'
        f'<tr><th>saved by replay</th><td class="cost-saved">{_money(saved)}</td></tr>'
        f"<tr><th>updated</th><td>{_when(p.get('updatedAt'))}</td></tr>"
        + (f'<tr><th>error</th><td class="error run-error">{html.escape(str(p["error"]))}</td></tr>' if p.get("error") else "")
        + "</table>",
    ]
    for a in view.attempts:
        ended = a.phase or "ended without a log (killed, or it could not write to the store)"
        parts.append(
            f'<section class="attempt" data-attempt="{a.number}"><h2>Attempt {a.number} '
            f'<span class="attempt-phase {html.escape(a.phase or "")}">{html.escape(ended)}</span></h2>'
            f'<p class="note">started {_when(a.started_at)}; cost live {_money(a.live_usd)}, saved by replay {_money(a.saved_usd)}'
        )
        if a.counts:
            c = a.counts
            parts.append(
                f"; model turns {c['modelLive']} live / {c['modelReplayed']} replayed, tools {c['toolLive']} live / {c['toolReplayed']} replayed"
            )
        parts.append("</p>")
        if a.divergence:
            d = a.divergence
            parts.append(
                f'<p class="divergence">First divergence: step {int(d.get("step") or 0)} ({html.escape(str(d.get("kind")))}) '
                "left the recorded path: from there on the run went live.</p>"
            )
        if not a.logged:
            replayed = (a.counts.get("modelReplayed", 0) + a.counts.get("toolReplayed", 0)) if a.counts else 0
            known = f" ({replayed} replayed, as its last progress said)" if replayed else ""
            parts.append(f'<p class="note">Its live steps as the journal recorded them; the steps it replayed are not known{known}.</p>')
        if a.phase == "AwaitingApproval":
            parts.append('<p class="note">Suspended: waiting for a human decision (see Approvals); the next attempt replays to it.</p>')
        if a.error:
            parts.append(f'<p class="error attempt-error">{html.escape(a.error)}</p>')
        parts.append(steps_table(a.steps) + "</section>")
    if view.approvals:
        rows = []
        for r in view.approvals:
            d = r.get("decision") or {}
            decision = "pending" if not d else ("approved" if d.get("approved") else "declined")
            rows.append(
                f'<tr class="approval {decision}"><td>{html.escape(str(r.get("id")))}</td><td>{html.escape(str(r.get("tool")))}</td>'
                f"<td><code>{html.escape(_clip(json.dumps(r.get('arguments'), sort_keys=True, default=str), DETAIL_LIMIT))}</code></td>"
                f"<td>{html.escape(str(r.get('prompt') or ''))}</td><td>{_when(r.get('requestedAt'))}</td>"
                f'<td class="decision">{decision}</td><td class="by">{html.escape(str(d.get("by") or ""))}</td>'
                f"<td>{_when(d.get('decided_at'))}</td><td>{html.escape(str(d.get('reason') or ''))}</td></tr>"
            )
        parts.append(
            '<h2>Approvals</h2><table class="approvals"><tr><th>id</th><th>tool</th><th>arguments</th><th>prompt</th><th>asked</th>'
            f"<th>decision</th><th>by</th><th>decided</th><th>reason</th></tr>{''.join(rows)}</table>"
        )
    if p.get("result") and view.content:
        parts.append(f'<h2>Result</h2><pre class="result">{html.escape(str(p["result"]))}</pre>')
    return "".join(parts)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more characters)"


def _number(x: Any) -> float:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    if isinstance(x, str):
        try:
            return datetime.fromisoformat(x).timestamp()
        except ValueError:
            return 0.0
    return 0.0


def _json(data: bytes | None) -> Any:
    try:
        return json.loads(data or b"")
    except ValueError:
        return None


#: Headers of every page: no script, no frame, no sniffing, nothing cached or sent on.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
