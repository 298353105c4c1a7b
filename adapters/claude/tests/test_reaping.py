"""A killed agent takes its Claude CLI with it and leaves no HOME behind for long.

The agent runs in its own process (the conformance driver, as a node runs it) with its stderr on a
pipe, the bundled CLI against the fake Anthropic provider through Tether's proxy, and SIGKILLs
itself right after the first model turn is recorded — while the CLI is working.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.agents import script_for
from tests.conformance.driver import load_kit
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script

ROOT = Path(__file__).resolve().parents[3]
KIT = ROOT / "adapters" / "claude" / "tests" / "kit.py"


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider(Script.from_dict(script_for(load_kit(str(KIT)))), seed=3) as provider:
        yield provider


def processes_marked(mark: str) -> list[int]:
    """Pids of live processes whose environment holds ``mark`` (the agent passes its environment
    on to the CLI)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            state = next((line for line in (proc / "status").read_text().splitlines() if line.startswith("State:")), "")
        except OSError:
            continue
        if mark.encode() in environ.split(b"\0") and "zombie" not in state:
            found.append(int(proc.name))
    return found


def attempt(fake: FakeProvider, tmp: Path, mark: str, **extra: object) -> subprocess.Popen:
    args = {"kit": str(KIT), "scenario": "weather", "run_id": "reaped", "store": str(tmp / "store"), "origin": fake.url, **extra}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "TMPDIR": str(tmp / "tmp"),  # where the attempt makes its HOME
        "ANTHROPIC_API_KEY": "sk-reaping",
        "TETHER_TOOL_LOG": str(tmp / "tools.jsonl"),
        "TETHER_TEST_MARK": mark,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "tests.conformance.driver", json.dumps(args)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_agent_leaves_no_cli_and_no_home(fake: FakeProvider, tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    mark = f"TETHER_TEST_MARK=reaping-{uuid.uuid4().hex}"
    proc = attempt(fake, tmp_path, mark.partition("=")[2], kill_after_turn=1)
    stderr: list[bytes] = []
    pipe = proc.stderr
    assert pipe is not None
    reader = threading.Thread(target=lambda: stderr.append(pipe.read()), daemon=True)
    reader.start()
    try:
        assert proc.wait(120) == -9, "the agent was to SIGKILL itself after its first turn"
        killed_at = time.monotonic()
        # A caller waiting for the agent's stderr to close (a shell pipeline, a log shipper)
        # returns: no CLI holds it. Before the fix the CLI kept it open for ~175 s.
        reader.join(10)
        assert not reader.is_alive(), "the agent's stderr is still held open 10 s after its SIGKILL"
        while (alive := processes_marked(mark)) and time.monotonic() - killed_at < 5:
            time.sleep(0.1)
        assert alive == [], f"processes of the killed attempt still alive 5 s after the kill: {alive}"
    finally:
        for pid in processes_marked(mark):  # the test leaves nothing running, even when it fails
            os.kill(pid, 9)
        proc.kill()
        proc.wait()

    # The killed attempt's HOME (its CLI's session files) is still there: nothing ran its cleanup.
    left = sorted(p.name for p in (tmp_path / "tmp").glob(f"tether-claude-home-{proc.pid}-*"))
    assert len(left) == 1, left

    second = attempt(fake, tmp_path, "retry")
    out, err = second.communicate(timeout=180)
    assert second.returncode == 0, err.decode()[-3000:]
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result["status"] == "succeeded" and result["model_replayed"] == 1, result
    # The retry removed the dead attempt's HOME, and its own.
    assert sorted(p.name for p in (tmp_path / "tmp").glob("tether-claude-home-*")) == []


def test_a_live_attempts_home_is_kept(tmp_path: Path) -> None:
    """Another attempt's HOME is removed only when its process is gone: the lock it holds for its
    life keeps it, and the HOME is removed once that process has died."""
    from tether_claude.adapter import reap_homes

    code = (
        "import sys, tempfile; tempfile.tempdir = sys.argv[1]\n"
        "from tether_claude.adapter import new_home\n"
        "home, _ = new_home(); print(home, flush=True); sys.stdin.read()\n"
    )
    other = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None
        home = Path(other.stdout.readline().strip())
        assert home.name.startswith(f"tether-claude-home-{other.pid}-")
        assert reap_homes(tmp_path) == [] and home.is_dir(), "a live attempt's HOME was removed"
    finally:
        other.kill()
        other.wait()
    assert reap_homes(tmp_path) == [home] and not home.exists()
