"""The shipped examples of this adapter, run as a new user runs them: `tether run` against the
fake provider (no API key), a kill and a resume, and an approval through `tether approve`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from .conftest import ROOT


def tether(*args: str, store, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    proc = subprocess.run(
        [sys.executable, "-m", "tether", *args, "--store", str(store)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert not check or proc.returncode in (0, 3), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def outcome(proc) -> dict:
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def examples(kit):
    folder = ROOT / "examples" / kit.FRAMEWORK
    assert folder.is_dir(), f"no examples for {kit.FRAMEWORK}"
    return folder


def test_research_killed_and_resumed(examples, tmp_path):
    proc = tether("run", str(examples / "research.yaml"), "--kill-after", "3", store=tmp_path)
    out = proc.stdout
    assert re.search(r"using Tether's fake [a-z]+ provider", out), out  # the manifest's own provider
    assert "killing the agent process after step 3" in out
    attempt2 = out.split("attempt 2:")[1]
    assert len(re.findall(r"step +\d+ +replayed", attempt2)) == 3
    assert attempt2.count("search(") == 0  # the finished slow tool did not run again
    assert outcome(proc)["exit_code"] == 0 and "Summary:" in out


def test_weather_runs_again_by_replaying(examples, tmp_path):
    first = tether("run", str(examples / "weather.yaml"), store=tmp_path)
    again = tether("run", str(examples / "weather.yaml"), store=tmp_path)
    assert "live" in first.stdout and "sunny" in first.stdout
    assert " live " not in again.stdout.split("attempt 1:")[1].split("Answer:")[0]
    assert first.stdout.split("Answer:")[1].splitlines()[1] == again.stdout.split("Answer:")[1].splitlines()[1]


def test_refund_waits_for_approval(examples, tmp_path):
    first = tether("run", str(examples / "refund.yaml"), store=tmp_path)
    assert outcome(first)["exit_code"] == 3 and "Waiting for approval" in first.stdout
    run_id, approval_id = re.search(r"tether approve (refund-[-\w]+) (\w+) --yes", first.stdout).groups()
    assert "issue_refund(" not in first.stdout
    tether("approve", run_id, approval_id, "--yes", "--by", "alice", store=tmp_path)
    done = tether("run", str(examples / "refund.yaml"), store=tmp_path)
    assert outcome(done)["exit_code"] == 0
    assert done.stdout.count("issue_refund(") == 1 and "Refunded 40 USD on order A1" in done.stdout
