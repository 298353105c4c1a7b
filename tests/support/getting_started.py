"""Run a getting-started page (docs/getting-started/<framework>.md) as its reader would.

The page's fenced blocks are tagged after their language (the tag is what the page calls the file):

    yaml script.yaml    the fake provider's script (`tether fake-provider --script script.yaml`)
    sh env              the variables the reader exports (the fake provider's port replaced by ours)
    python weather.py     the agent, run with `python weather.py` in the adapter's environment
    text first run      what that prints
    text second run     what running it again prints: everything replayed

The fake provider is started from the page's script on a free port (a real HTTP server, the real
SDK at the other end); the second run must make no live call. `tether status` and `tether logs`
are run on the page's run id, as the page says. Then, as the page's "kill it halfway": the agent
under a new run id is SIGKILLed once its tool has run, and run again: one turn live, one replayed.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tether.progress import read_progress
from tether.stores import open_store
from tether.testing import FakeProvider

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w+) ([^\n`]+)\n(.*?)^```", re.M | re.S)
#: The port the pages use for the fake provider.
PAGE_PORT = "127.0.0.1:8080"


def blocks(page: Path) -> dict[str, str]:
    """The page's tagged blocks, by tag."""
    found: dict[str, str] = {}
    for m in FENCE.finditer(page.read_text()):
        tag = m.group(2).strip()
        assert tag not in found, f"{page}: two blocks tagged {tag!r}"
        found[tag] = m.group(3)
    return found


def exported(text: str) -> dict[str, str]:
    """``export A=1 B=2`` lines as a mapping."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] == "export":
            out.update(w.split("=", 1) for w in words[1:])  # type: ignore[misc]
    return out


def run_page(framework: str, tmp_path: Path) -> None:
    page = REPO / "docs" / "getting-started" / f"{framework}.md"
    found = blocks(page)
    missing = {"script.yaml", "env", "weather.py", "first run", "second run"} - set(found)
    assert not missing, f"{page.name} lacks blocks tagged {sorted(missing)}"
    code = found["weather.py"]
    lines = [line for line in code.splitlines() if line.strip()]
    assert len(lines) <= 15, f"{page.name}: the agent takes {len(lines)} lines, the page promises at most 15"
    run_id = re.search(r'run_id="([^"]+)"', code)
    assert run_id, f"{page.name}: weather.py names no run_id"

    (tmp_path / "weather.py").write_text(code)
    with FakeProvider(yaml.safe_load(found["script.yaml"])) as fake:
        variables = {k: v.replace(PAGE_PORT, f"{fake.host}:{fake.port}") for k, v in exported(found["env"]).items()}
        keys = {k for k in os.environ if k.endswith(("_API_KEY", "_BASE_URL", "_API_BASE")) or k.startswith("TETHER_UPSTREAM_")}
        env = {k: v for k, v in os.environ.items() if k not in keys and k != "PYTHONPATH"}
        env.update(variables, TETHER_STORE=str(tmp_path / "store"), PYTHONUNBUFFERED="1")

        def python(*args: str) -> str:
            done = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"python {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            return done.stdout

        assert python("weather.py") == found["first run"], "the first run printed something else than the page shows"
        live = fake.live_calls()
        assert live >= 2, f"the fake provider heard {live} calls: the agent did not reach it"
        assert python("weather.py") == found["second run"], "the second run printed something else than the page shows"
        assert fake.live_calls() == live, "the second run called the model again instead of replaying"

    status = python("-m", "tether", "status", run_id.group(1))
    assert "Succeeded" in status, status
    logs = python("-m", "tether", "logs", run_id.group(1))
    assert "replayed" in logs, logs

    # "Kill it halfway": SIGKILLed once the tool has run (the second answer is slow), under a new
    # run id; run again, the first turn and the tool replay and only the second turn is live.
    killed = run_id.group(1) + "-killed"
    (tmp_path / "killed.py").write_text(code.replace(run_id.group(0), f'run_id="{killed}"'))
    with FakeProvider(yaml.safe_load(found["script.yaml"]), latency=1.0) as slow:
        env.update({k: v.replace(PAGE_PORT, f"{slow.host}:{slow.port}") for k, v in exported(found["env"]).items()})
        agent = subprocess.Popen([sys.executable, "killed.py"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while ((read_progress(open_store(str(tmp_path / "store")), killed) or {}).get("steps") or {}).get("toolLive", 0) < 1:
                assert agent.poll() is None, f"killed.py exited ({agent.returncode}) before its tool ran"
                assert time.monotonic() < deadline, "the tool never ran"
                time.sleep(0.05)
        finally:
            os.killpg(agent.pid, signal.SIGKILL)  # the agent and any process it started (the Claude CLI)
            agent.wait()
        resumed = python("killed.py")
    assert resumed == found["first run"].replace("turns live 2, replayed 0", "turns live 1, replayed 1"), resumed


def run_flyte_example(tmp_path: Path) -> None:
    """docs/reference/python.md's "Under Flyte" program, run as `python ask.py` against the fake
    provider: a local Flyte execution whose task runs the agent through Tether."""
    section = (REPO / "docs" / "reference" / "python.md").read_text().split("## Under Flyte", 1)[1]
    code = re.search(r"^```python\n(.*?)^```", section, re.M | re.S)
    assert code, "python.md's Under Flyte section has no program"
    (tmp_path / "ask.py").write_text(code.group(1))
    script = {
        "conversations": [
            {
                "match": "",
                "turns": [
                    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                    {"text_from_tool_results": True, "text": "Weather in Paris:"},
                ],
            }
        ]
    }
    with FakeProvider(script) as fake:
        env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL", "_API_BASE")) and k != "PYTHONPATH"}
        env.update(
            OPENAI_BASE_URL=fake.base_url("openai"), OPENAI_API_KEY="fake-key", TETHER_STORE=str(tmp_path / "store"), HOME=str(tmp_path)
        )
        done = subprocess.run([sys.executable, "ask.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        assert done.stdout.strip().endswith("Weather in Paris: sunny in Paris"), done.stdout
        assert fake.live_calls() == 2
