"""benchmarks/crash_resume_agents.py (the reference scenario through this adapter and `tether
exec`, cold and warm retry), import_time.py and pod_start.py (the runner pod's path, phase by
phase) at their smallest scale: each fails when its benchmark breaks. Figures are not checked
(tests/support/benchmarks.py), but for import_time.py's module count, which load does not move."""

from __future__ import annotations

from pathlib import Path

from tests.support.benchmarks import smoke


def test_crash_resume_agents(tmp_path: Path) -> None:
    figures = smoke("crash_resume_agents.py", "--scale", "0.01", results=tmp_path, name="crash_resume_agents")
    assert figures["scale"] == 0.01 and "warm" in figures


def test_import_time(tmp_path: Path) -> None:
    """The framework imports not one module more with a plain install of tether beside it (the
    default install carried aiohttp, rich, click and opentelemetry, which it then imported)."""
    figures = smoke("import_time.py", "--frameworks", "openai", "--repeat", "1", results=tmp_path, name="import_time", timeout=900)
    assert figures["openai"]["extra_top_level"] == [] and figures["openai"]["extra_modules"] == 0
    assert figures["openai"]["alone"]["modules"] == figures["openai"]["tether"]["modules"] > 100


def test_pod_start(tmp_path: Path) -> None:
    figures = smoke("pod_start.py", "--repeat", "1", "--no-bytecode", results=tmp_path, name="pod_start-openai", timeout=900)
    assert figures["framework"] == "openai" and set(figures["no_bytecode_ratio"]) >= {"first_request_cpu_ms"}
