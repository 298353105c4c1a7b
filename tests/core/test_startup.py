"""Start-up: a plain ``import tether`` and a finished run's ``run_agent`` load nothing heavy —
no Flyte outside a Flyte task (``@tool`` used to import it to ask whether a function is a Flyte
task), no loopback proxy unless an SDK is pointed at it, no Kubernetes client, no S3 client
with a local store. Measured in a fresh process (tests/support/startup.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.startup import probe_finished_run


def test_import_and_finished_run_load_nothing_heavy(tmp_path: Path) -> None:
    figures = probe_finished_run("tether", str(tmp_path / "store"))
    assert figures["after_import"] == [] and figures["after_run"] == []
    assert (figures["model_live"], figures["model_replayed"], figures["tool_replayed"]) == (0, 2, 1)
