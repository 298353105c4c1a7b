"""A clean stop: Ctrl-C (SIGINT) or SIGTERM to `tether run` while a tool call runs.

The attempt starts no new step, the running tool call finishes and is recorded, progress says
Interrupted, `tether run` exits 130 with "run the same command again to resume" and no traceback;
running the same command again replays the finished call (its side effect stays single) and goes
on to the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

TOOLS = """
import os
import pathlib
import time


def slow_refund(order: str) -> str:
    where = pathlib.Path(os.environ["STOP_TEST_DIR"])
    (where / "started").write_text(order)
    time.sleep(3)
    with open(where / "effects", "a") as f:
        f.write(order + "\\n")
    return f"refunded {order}"
"""

MANIFEST = [
    {
        "apiVersion": "tether.dev/v1alpha1",
        "kind": "AgentRun",
        "metadata": {"name": "stop-me"},
        "spec": {
            "framework": "openai",
            "model": {"name": "gpt-4o-mini", "provider": "openai"},
            "instructions": "Refund what is asked.",
            "input": "Refund order A1.",
            "tools": ["slow-refund"],
            "retries": 2,
        },
    },
    {
        "apiVersion": "tether.dev/v1alpha1",
        "kind": "AgentTool",
        "metadata": {"name": "slow-refund"},
        "spec": {"description": "Refund an order (slowly).", "implementation": "stop_tools:slow_refund", "cache": "off"},
    },
]

SCRIPT = {
    "conversations": [{"match": "", "turns": [{"tool_calls": [{"name": "slow-refund", "arguments": {"order": "A1"}}]}, {"text": "Done."}]}]
}


def _env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k not in ("TETHER_COMMAND", "TETHER_ENV")}
    return {**clean, "OPENAI_AGENTS_DISABLE_TRACING": "1", "STOP_TEST_DIR": str(tmp_path)}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_cleanly_and_the_running_tool_call_is_recorded(tmp_path: Path, sig: signal.Signals) -> None:
    (tmp_path / "stop_tools.py").write_text(TOOLS)
    (tmp_path / "stop.script.yaml").write_text(yaml.safe_dump(SCRIPT))
    manifest = tmp_path / "stop.yaml"
    manifest.write_text(yaml.safe_dump_all(MANIFEST, sort_keys=False))
    store = tmp_path / "store"
    command = ["./tether", "run", str(manifest), "--store", str(store)]
    proc = subprocess.Popen(command, cwd=REPO, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not (tmp_path / "started").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the tool call never started"
            time.sleep(0.05)
        proc.send_signal(sig)  # as the terminal (Ctrl-C) or `kill` would: to tether run
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in out + err, (out, err)
    assert "Run the same command again to resume" in out
    assert json.loads(out.strip().splitlines()[-1]) == {"run_id": "stop-me", "exit_code": 130, "phase": "Interrupted"}
    # The call that was running when the signal came finished and was recorded; no attempt followed.
    assert (tmp_path / "effects").read_text() == "A1\n"
    assert "attempt 1:" in out and "attempt 2:" not in out
    status = subprocess.run(["./tether", "status", "stop-me", "--store", str(store)], cwd=REPO, capture_output=True, text=True)
    assert "Interrupted" in status.stdout

    again = subprocess.run(command, cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert "Done." in again.stdout
    assert (tmp_path / "effects").read_text() == "A1\n"  # replayed, never run again
    assert "replayed  tool  slow-refund" in again.stdout
