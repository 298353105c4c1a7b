"""benchmarks/chaos_kind.py's "status backwards" check, fed the watch events a killed attempt makes
(no cluster: the Observer's handlers are called as its watches would call them)."""

from __future__ import annotations

from typing import Any

from benchmarks.chaos_kind import Observer


def pod(attempt: int) -> dict[str, Any]:
    labels = {"tether.dev/run": "r", "tether.dev/attempt": str(attempt)}
    return {"metadata": {"name": f"r-{attempt}", "labels": labels}, "spec": {"nodeName": "n"}, "status": {"phase": "Running"}}


def run(attempts: int, model_live: int) -> dict[str, Any]:
    return {"metadata": {"name": "r"}, "status": {"phase": "Running", "attempts": attempts, "steps": {"modelLive": model_live}}}


def test_the_old_attempts_last_progress_read_after_the_newer_pod_then_the_newer_attempts_first():
    obs = Observer()
    obs._pod("ADDED", pod(1))
    obs._run("MODIFIED", run(1, 0))
    obs._pod("ADDED", pod(2))
    obs._run("MODIFIED", run(2, 1))  # attempt 1's last progress, read once attempt 2's pod was made
    obs._run("MODIFIED", run(2, 0))  # attempt 2 starts from 0 and replays
    obs._run("MODIFIED", run(2, 1))
    assert (obs.regressions, obs.attempt_resets) == ([], 1)


def test_a_second_decrease_within_one_attempt_is_backwards():
    obs = Observer()
    obs._pod("ADDED", pod(1))
    obs._run("MODIFIED", run(1, 2))
    obs._pod("ADDED", pod(2))
    obs._run("MODIFIED", run(2, 0))
    obs._run("MODIFIED", run(2, 2))
    obs._run("MODIFIED", run(2, 1))
    assert obs.attempt_resets == 1 and obs.regressions == ["r: steps.modelLive 2 -> 1"]


def test_status_attempts_ahead_of_the_pod_watch_counts_as_a_newer_attempt():
    obs = Observer()
    obs._pod("ADDED", pod(1))
    obs._run("MODIFIED", run(1, 1))
    obs._run("MODIFIED", run(2, 0))  # the newer pod not seen yet by the pod watch
    assert (obs.regressions, obs.attempt_resets) == ([], 1)
