"""Start-up of a LangGraph agent process: ``import tether_langgraph`` and a finished run's
``run_agent`` (a declarative graph with a ``@tool``, every step replayed) load no Flyte, no
loopback proxy, no Kubernetes client and no S3 client. Measured in a fresh process."""

from __future__ import annotations

from pathlib import Path

from tests.support.startup import probe_finished_run


def test_import_and_finished_run_load_nothing_heavy(tmp_path: Path) -> None:
    figures = probe_finished_run("tether_langgraph", str(tmp_path / "store"))
    assert figures["after_import"] == [] and figures["after_run"] == []
    assert (figures["model_live"], figures["model_replayed"], figures["tool_replayed"]) == (0, 2, 1)
