"""One results file per benchmark run: benchmarks/results/<name>.json, read by report.py.

Each file holds the figures the script printed as its last line, the command that produced them,
when, and the machine's load at the end of the run (``uptime``): figures move with the load.
``$TETHER_BENCH_RESULTS`` names another directory (the suite's smoke runs write there).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
RESULTS_ENV = "TETHER_BENCH_RESULTS"  # another directory: the suite's smoke runs never touch the committed figures


def machine_load() -> str:
    """``uptime`` as printed (load averages over 1, 5 and 15 minutes)."""
    out = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    return out[out.index("load average") :] if "load average" in out else out


def save(name: str, figures: dict) -> Path:
    """Writes the results file ``name`` and returns its path; the command is this process's."""
    # An absolute path given (where to keep logs, a baseline checkout) is this machine's: not kept.
    args = ["<path>" if os.path.isabs(a) else shlex.quote(a) for a in sys.argv[1:]]
    command = " ".join(["benchmarks/" + Path(sys.argv[0]).name, *args])
    where = Path(os.environ.get(RESULTS_ENV) or RESULTS)
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{name}.json"
    record = {
        "benchmark": name,
        "command": command,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine_load": machine_load(),
        "figures": figures,
    }
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    shown = path.relative_to(RESULTS.parents[1]) if path.is_relative_to(RESULTS.parents[1]) else path
    print(f"results written to {shown}", file=sys.stderr)
    return path
