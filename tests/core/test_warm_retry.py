"""`tether run` retries in a warm worker: beside each attempt the next attempt's process is
started and imports everything (`tether exec --warm`), so a retry after a kill runs in a process
that was ready before it was needed — and replays like any retry: no live model call, every
finished tool once. `--no-warm` starts the retry afresh."""

from __future__ import annotations

import re
from pathlib import Path

from tests.core.test_cli import example, tether


def test_retry_runs_in_the_worker_started_ahead_and_replays(tmp_path: Path) -> None:
    # Killed after the research agent's last step (turn, search, turn, read-source, turn) was
    # recorded, before the answer was returned: the retry has nothing left to do live.
    proc = tether("run", str(example(tmp_path, "research")), "--kill-after", "5", store=tmp_path / "store")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    first, retry = out.split("attempt 2:")
    assert "killing the agent process after step 5" in first
    ready = re.search(r"\(ran in the worker started beside attempt 1, ready ([\d.]+) s before it was needed\)", retry)
    assert ready and float(ready.group(1)) > 0, retry
    assert len(re.findall(r"step +\d+ +replayed", retry)) == 5 and not re.search(r"step +\d+ +live", retry)
    assert out.count("search(") == 1 and out.count("read_source(") == 1  # each tool ran once, in attempt 1
    assert "model turns 0 live / 3 replayed, tools 0 live / 2 replayed" in out


def test_no_warm_starts_the_retry_afresh(tmp_path: Path) -> None:
    proc = tether("run", str(example(tmp_path, "research")), "--kill-after", "5", "--no-warm", store=tmp_path / "store")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    retry = proc.stdout.split("attempt 2:")[1]
    assert "ran in the worker" not in retry and len(re.findall(r"step +\d+ +replayed", retry)) == 5
