"""A framework's import time alone and with Tether installed beside it (issue 28, item 6).

    $(scripts/env.sh core)/bin/python benchmarks/import_time.py [--frameworks langgraph,openai] [--repeat 7]

Per framework two venvs are built (uv, into a temporary directory, bytecode compiled as
scripts/env.sh does): **alone**, the framework's packages as the adapter declares them
(adapters/<id>/pyproject.toml, its dependencies other than Tether's); **with tether**, a plain
`pip install tether tether-<id>` from this checkout's sources (no extras). Both take their versions
from the adapter's lock (envs/<id>.txt), so the framework is the same in both and what differs is
only what Tether's install brings beside it. Then the framework's own import statement
(``import langchain_openai, langgraph.graph, langgraph.prebuilt``; ``import agents``) runs in
fresh processes, alternating between the two, ``--repeat`` times each: wall and CPU time of the
statement, medians. The statement is the same in both: a difference is the framework importing
more because of what is installed (aiohttp, rich, click, opentelemetry are optional imports of the
OpenAI SDK, httpx and langsmith), which the modules each process ends with show exactly
(``extra_modules``: in the Tether venv and not alone). Beside it, ``import tether_<id>`` after the
framework: tether + the adapter's own cost. Goal: with tether − alone ≤ 50 ms. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import save  # noqa: E402

#: What each framework's adapter imports of it (the rest of the adapter's framework-modules, the
#: top-level packages, would import next to nothing).
STATEMENTS = {
    "langgraph": "import langchain_openai, langgraph.graph, langgraph.prebuilt",
    "openai": "import agents",
}

PROBE = """
import json, sys, time
wall, cpu = time.perf_counter(), time.process_time()
exec(sys.argv[1])
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
modules = sorted(sys.modules)
adapter_ms = None
if sys.argv[2]:
    t = time.perf_counter()
    __import__(sys.argv[2])
    adapter_ms = 1000 * (time.perf_counter() - t)
print(json.dumps({"wall_ms": 1000 * wall, "cpu_ms": 1000 * cpu, "modules": modules, "adapter_ms": adapter_ms}))
"""


def _pyproject(path: Path) -> dict:
    return tomllib.loads((path / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    return re.split(r"[\[=<>~! ;]", requirement, maxsplit=1)[0]


def _uv(*args: str, venv: Path | None = None) -> None:
    env = {**os.environ, **({"VIRTUAL_ENV": str(venv)} if venv else {})}
    env.pop("PYTHONPATH", None)
    subprocess.run(["uv", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=1200)


def build(framework: str, work: Path) -> tuple[Path, Path]:
    """The two venvs of ``framework``: alone, and with tether + tether-<id> (no extras)."""
    adapter = ROOT / "adapters" / framework
    lock = (ROOT / "envs" / f"{framework}.txt").read_text().splitlines()
    constraints = work / f"{framework}-constraints.txt"
    constraints.write_text("\n".join(line for line in lock if re.match(r"^[A-Za-z0-9]", line)) + "\n")
    deps = _pyproject(adapter)["project"]["dependencies"]
    ours = {p["project"]["name"]: p for p in (_pyproject(d.parent) for d in ROOT.glob("adapters/*/pyproject.toml"))}
    framework_deps = [d for d in deps if not _name(d).startswith("tether")]
    sources = ["./runtime", f"./adapters/{framework}"]
    sources += [f"./adapters/{_name(d).removeprefix('tether-')}" for d in deps if _name(d) in ours]
    venvs = (work / f"{framework}-alone", work / f"{framework}-tether")
    for venv, packages in zip(venvs, (framework_deps, sources), strict=True):
        _uv("venv", "-q", "-p", "3.11", str(venv))
        _uv("pip", "install", "-q", "--compile-bytecode", "-c", str(constraints), *packages, venv=venv)
    return venvs


def probe(venv: Path, statement: str, adapter_module: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", PROBE, statement, adapter_module],
        cwd=venv,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    sample: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return sample


def measure(framework: str, work: Path, repeat: int) -> dict:
    started = time.perf_counter()
    alone, ours = build(framework, work)
    built_s = time.perf_counter() - started
    statement = STATEMENTS.get(framework) or "import " + ", ".join(
        _pyproject(ROOT / "adapters" / framework)["tool"]["tether"]["framework-modules"]
    )
    adapter_module = "tether_" + framework.replace("-", "_")
    samples: dict[str, list[dict]] = {"alone": [], "tether": []}
    probe(alone, statement)  # the first process after a build pays the page cache: not a sample
    probe(ours, statement)
    for i in range(repeat):
        order = [("alone", alone, ""), ("tether", ours, adapter_module)]
        for side, venv, module in order if i % 2 == 0 else order[::-1]:
            samples[side].append(probe(venv, statement, module))

    def median(side: str, key: str) -> float:
        values: list[float] = [s[key] for s in samples[side]]
        return round(statistics.median(values), 1)

    extra = sorted(set(samples["tether"][-1]["modules"]) - set(samples["alone"][-1]["modules"]))
    figures: dict[str, Any] = {
        "statement": statement,
        "alone": {
            "wall_ms": median("alone", "wall_ms"),
            "cpu_ms": median("alone", "cpu_ms"),
            "modules": len(samples["alone"][-1]["modules"]),
        },
        "tether": {
            "wall_ms": median("tether", "wall_ms"),
            "cpu_ms": median("tether", "cpu_ms"),
            "modules": len(samples["tether"][-1]["modules"]),
            "adapter_import_ms": median("tether", "adapter_ms"),
        },
        "extra_modules": len(extra),
        "extra_top_level": sorted({m.split(".")[0] for m in extra}),
        "venvs_built_s": round(built_s, 1),
    }
    figures["overhead_wall_ms"] = round(figures["tether"]["wall_ms"] - figures["alone"]["wall_ms"], 1)
    figures["overhead_cpu_ms"] = round(figures["tether"]["cpu_ms"] - figures["alone"]["cpu_ms"], 1)
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frameworks", default="langgraph,openai", help="adapter ids, comma-separated")
    ap.add_argument("--repeat", type=int, default=7, help="fresh processes per venv")
    args = ap.parse_args()
    if shutil.which("uv") is None:
        sys.exit("import_time.py needs uv on PATH (pip install uv)")
    work = Path(tempfile.mkdtemp(prefix="tether-import-time-"))
    results: dict = {"repeat": args.repeat, "goal_ms": 50}
    try:
        for framework in args.frameworks.split(","):
            f = results[framework] = measure(framework, work, args.repeat)
            print(
                f"{framework}: `{f['statement']}` alone {f['alone']['wall_ms']:.0f} ms (CPU {f['alone']['cpu_ms']:.0f}), "
                f"with tether installed {f['tether']['wall_ms']:.0f} ms (CPU {f['tether']['cpu_ms']:.0f}): "
                f"{f['overhead_wall_ms']:+.0f} ms wall, {f['overhead_cpu_ms']:+.0f} ms CPU; modules {f['alone']['modules']} vs "
                f"{f['tether']['modules']} ({f['extra_modules']} more: {', '.join(f['extra_top_level']) or 'none'}); "
                f"then import tether_{framework.replace('-', '_')} {f['tether']['adapter_import_ms']:.0f} ms"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save("import_time", results)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
