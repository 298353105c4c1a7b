"""The benchmark figures in benchmarks/README.md and the root README come from the committed
results files only: regenerating them reproduces the committed text exactly (drift check)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _report():
    spec = importlib.util.spec_from_file_location("benchmarks_report", ROOT / "benchmarks" / "report.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmarks_readme_is_generated_from_the_results():
    report = _report()
    results = report.load()
    assert {"replay_cost", "record_overhead"} <= set(results), "a results file is missing"
    for record in results.values():
        assert record["command"].startswith("benchmarks/") and "load average" in record["machine_load"]
    expected = report.render_readme(results)
    assert (ROOT / "benchmarks" / "README.md").read_text() == expected, (
        "benchmarks/README.md differs from the results: run `python benchmarks/report.py`"
    )


def test_root_readme_quotes_the_generated_table():
    report = _report()
    results = report.load()
    readme = (ROOT / "README.md").read_text()
    assert readme == report.render_root(readme, results), "README.md's Measured table differs: run `python benchmarks/report.py`"
    figures = json.loads((ROOT / "benchmarks" / "results" / "record_overhead.json").read_text())["figures"]
    assert f"×{figures['s3']['plain']['transport_ratio']:.3f} transport" in readme
