"""The benchmarks that need LangGraph (parallel_tools.py, startup.py, journal_load.py,
import_time.py, journal_size.py, peer_turns.py, pod_start.py) at their smallest scale: each fails
when its benchmark breaks. Figures are not checked (tests/support/benchmarks.py), but for
import_time.py's module count, which load does not move."""

from __future__ import annotations

from pathlib import Path

from tests.support.benchmarks import smoke


def test_parallel_tools(tmp_path: Path) -> None:
    smoke("parallel_tools.py", "--n", "2", "--seconds", "0.05", "--repeat", "1", results=tmp_path, name="parallel_tools")


def test_startup(tmp_path: Path) -> None:
    smoke("startup.py", "--repeat", "1", results=tmp_path, name="startup")


def test_pod_start(tmp_path: Path) -> None:
    figures = smoke("pod_start.py", "--framework", "langgraph", "--repeat", "1", results=tmp_path, name="pod_start-langgraph", timeout=900)
    assert figures["framework"] == "langgraph" and figures["tree"]["first_replayed_turn_cpu_ms"] > 0


def test_journal_load(tmp_path: Path) -> None:
    smoke("journal_load.py", "--steps", "5", "--repeat", "1", "--s3-latency", "0", results=tmp_path, name="journal_load")


def test_import_time(tmp_path: Path) -> None:
    """The framework imports not one module more with a plain install of tether beside it (the
    default install carried aiohttp, rich, click and opentelemetry, which it then imported)."""
    figures = smoke("import_time.py", "--frameworks", "langgraph", "--repeat", "1", results=tmp_path, name="import_time", timeout=900)
    assert figures["langgraph"]["extra_top_level"] == [] and figures["langgraph"]["extra_modules"] == 0
    assert figures["langgraph"]["alone"]["modules"] == figures["langgraph"]["tether"]["modules"] > 100


def test_journal_size(tmp_path: Path) -> None:
    """Bytes stored per turn: Tether's journal and SqliteSaver (DBOS is in the pydantic-ai environment)."""
    figures = smoke("journal_size.py", "--turns", "2,4,6", "--no-dbos", results=tmp_path, name="journal_size")
    assert set(figures) == {"turns", "tether_langgraph", "sqlite_saver"}
    assert figures["tether_langgraph"]["bytes"]["2"] < figures["tether_langgraph"]["bytes"]["6"]


def test_peer_turns(tmp_path: Path) -> None:
    smoke("peer_turns.py", "--turns", "2", "--latency", "0", "--repeat", "1", results=tmp_path, name="peer_turns")
