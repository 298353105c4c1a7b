"""The benchmarks that need LangGraph (parallel_tools.py, startup.py, journal_load.py) at their
smallest scale: each fails when its benchmark breaks. Figures are not checked
(tests/support/benchmarks.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.benchmarks import smoke


def test_parallel_tools(tmp_path: Path) -> None:
    smoke("parallel_tools.py", "--n", "2", "--seconds", "0.05", "--repeat", "1", results=tmp_path, name="parallel_tools")


def test_startup(tmp_path: Path) -> None:
    smoke("startup.py", "--repeat", "1", results=tmp_path, name="startup")


def test_journal_load(tmp_path: Path) -> None:
    smoke("journal_load.py", "--steps", "5", "--repeat", "1", "--s3-latency", "0", results=tmp_path, name="journal_load")
