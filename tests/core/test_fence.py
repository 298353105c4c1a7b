"""Two attempts of one run at once (tether.journal's fence, tether.fence's handshake), as real
processes: attempt 1 (``python -m tether exec``) is stopped during a tool call or during a
streamed model turn, and attempt 2 starts while it still runs — what the Kubernetes executor does
once a deleted pod has not stopped within its grace period (its node gone), or what a pod deleted
with ``--force`` leaves (the object is gone, the container still runs). Attempt 1 gets SIGTERM (a
clean stop) or nothing at all (a zombie, SIGKILLed at the end). Against the fake provider and a
real store: the local directory, or S3 (moto on loopback).

Whatever the timing: the tool's body runs once and its side effect happens once (attempt 2 waits
for the call attempt 1 was running and replays its record), the journal holds each step once
(no step of attempt 1 after attempt 2 took over), attempt 1's late writes are refused and its
stderr says so, and attempt 2 finishes the run. (On main attempt 2 ran the tool again, and a
zombie attempt 1 went on recording turns beside attempt 2's.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.s3 import new_bucket, s3_server
from tether.contract import EXIT_INTERRUPTED, EXIT_SUCCEEDED, journal_prefix
from tether.journal import read_records
from tether.progress import read_progress
from tether.stores import open_store
from tether.testing import FakeProvider, Fault

REPO = Path(__file__).resolve().parents[2]
RUN = "fenced-run"
REFUSED = f"attempt 2 of run {RUN} has started: attempt 1's journal writes and tool calls are refused"

TOOLS = """
import os
import pathlib
import time

import tether


def refund(order: str) -> str:
    \"\"\"Refund an order.\"\"\"
    where = pathlib.Path(os.environ["FENCE_DIR"])
    with open(where / "calls", "a") as f:
        f.write(f"{os.getpid()} {tether.idempotency_key()}\\n")
    (where / f"started-{os.getpid()}").touch()
    while not (where / "release").exists():
        time.sleep(0.02)
    with open(where / "effects", "a") as f:
        f.write(order + "\\n")
    return f"refunded {order}"
"""

# The core environment has no framework: this module stands in for the openai adapter, the raw
# openai SDK in a small tool loop that streams every turn.
ADAPTER = """
import json

from tests.core.chat_adapter import ChatAdapter, _schema


class Adapter(ChatAdapter):
    framework = "openai"

    async def run(self, agent, prompt, session):
        client, spec = agent
        tools = {t.name: t for t in spec.tools}
        messages = [*session.history, {"role": "user", "content": prompt}]
        try:
            for _ in range(8):
                stream = await client.chat.completions.create(
                    model=spec.model, messages=messages, tools=[_schema(t) for t in tools.values()], stream=True
                )
                text, calls = "", {}
                async for chunk in stream:
                    if not chunk.choices:
                        continue
                    delta = chunk.choices[0].delta
                    text += delta.content or ""
                    for c in delta.tool_calls or []:
                        call = calls.setdefault(c.index, {"id": "", "name": "", "arguments": ""})
                        call["id"] = c.id or call["id"]
                        if c.function:
                            call["name"] += c.function.name or ""
                            call["arguments"] += c.function.arguments or ""
                if not calls:
                    return text
                asked = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls.values()]
                messages.append({"role": "assistant", "content": text or None, "tool_calls": asked})
                for c in calls.values():
                    result = await tools[c["name"]](**json.loads(c["arguments"] or "{}"))
                    messages.append({"role": "tool", "tool_call_id": c["id"], "content": json.dumps(result)})
        finally:
            await client.close()
        raise RuntimeError("no answer after 8 turns")


ADAPTER = Adapter()
"""

SCRIPT = {
    "conversations": [{"match": "", "turns": [{"tool_calls": [{"name": "refund", "arguments": {"order": "A1"}}]}, {"text": "Done."}]}]
}


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    with s3_server() as endpoint:
        yield endpoint


class Attempts:
    """The files of the run and the attempts' processes."""

    def __init__(self, root: Path, fake_url: str, store: str) -> None:
        self.root, self.store_url = root, store
        (root / "mods").mkdir()
        (root / "mods" / "fence_tools.py").write_text(TOOLS)
        (root / "mods" / "tether_openai.py").write_text(ADAPTER)
        (root / "secrets" / "model").mkdir(parents=True)
        (root / "secrets" / "model" / "apiKey").write_text("sk-test")
        tools = {"refund": {"description": "Refund an order", "implementation": "fence_tools:refund"}}
        request = {
            "runId": RUN,
            "namespace": "ns",
            "name": RUN,
            "spec": {
                "framework": "openai",
                "model": {"name": "gpt-4o-mini", "baseURL": f"{fake_url}/openai/v1"},
                "input": "Refund order A1.",
                "tools": list(tools),
            },
            "tools": tools,
        }
        self.request = root / "request.json"
        self.request.write_text(json.dumps(request))
        self.store = open_store(store)

    def start(self, *, warm: bool = False) -> subprocess.Popen[str]:
        keep = ("PATH", "HOME", "LANG", "TMPDIR", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
        env = {k: v for k, v in os.environ.items() if k in keep}
        env |= {
            "PYTHONPATH": os.pathsep.join([str(self.root / "mods"), str(REPO), *sys.path]),
            "TETHER_TOOL_MODULES": "fence_tools",
            "TETHER_SECRETS_DIR": str(self.root / "secrets"),
            "FENCE_DIR": str(self.root),
            "TETHER_STOP_GRACE_SECONDS": "60",
        }
        argv = [sys.executable, "-m", "tether", "exec", str(self.request), "--store", self.store_url, *(["--warm"] if warm else [])]
        stdin = subprocess.PIPE if warm else subprocess.DEVNULL
        return subprocess.Popen(argv, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=self.root)

    def lines(self, name: str) -> list[str]:
        path = self.root / name
        return path.read_text().splitlines() if path.exists() else []


def wait_for(what: str, check, procs: list[subprocess.Popen[str]], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        for proc in procs:
            assert proc.poll() is None, f"{what}: a process ended first: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.05)


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


CASES = [
    pytest.param("tool", "sigterm", "s3", id="tool-sigterm-s3"),
    pytest.param("tool", "sigkill", "local", id="tool-sigkill-local"),
    pytest.param("tool", "zombie", "local", id="tool-zombie-local"),
    pytest.param("stream", "sigterm", "local", id="stream-sigterm-local"),
    pytest.param("stream", "sigkill", "s3", id="stream-sigkill-s3"),
    pytest.param("stream", "zombie", "s3", id="stream-zombie-s3"),
]


@pytest.mark.parametrize(("moment", "old", "store"), CASES)
def test_a_second_attempt_while_the_first_still_runs(tmp_path: Path, s3: str, moment: str, old: str, store: str) -> None:
    store_url = str(tmp_path / "store") if store == "local" else f"s3://{new_bucket(s3)}/tether/ns?endpoint_url={s3}"
    with FakeProvider(SCRIPT) as fake:
        if moment == "stream":
            (tmp_path / "release").touch()  # the tool does not wait
            fake.inject(Fault("stall:20", match_protocol="openai", after=1))  # the second turn stalls halfway
        run = Attempts(tmp_path, fake.url, store_url)
        first = run.start()
        second = run.start(warm=True)  # the next attempt's process, started beside it (a standby)
        procs = [first, second]
        try:
            if moment == "tool":
                wait_for("attempt 1 in its tool call", lambda: (tmp_path / f"started-{first.pid}").exists(), procs)
            else:
                wait_for("attempt 1 streaming its second turn", lambda: len(fake.ledger) == 2, procs)
                time.sleep(0.5)  # halfway through its events, then stalled
            stalled_at = time.monotonic()
            assert second.stdin is not None
            second.stdin.write("go\n")
            second.stdin.flush()
            wait_for("attempt 2 loaded the journal", lambda: run.store.get(journal_prefix(RUN) + "attempts/00002") is not None, procs)
            assert moment == "tool" or time.monotonic() - stalled_at < 15, "attempt 1's stream ended before attempt 2 loaded"
            if old != "zombie":  # a zombie: a pod force-deleted, or on a lost node, is never told
                first.send_signal(signal.SIGTERM if old == "sigterm" else signal.SIGKILL)
            if moment == "tool":
                time.sleep(1)  # attempt 2 has reached the call attempt 1 is running
                (tmp_path / "release").touch()
            code2, out2, err2 = finish(second)
            code1, out1, err1 = finish(first)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
        live_turns = fake.live_calls()

    assert code2 == EXIT_SUCCEEDED, err2
    assert json.loads(out2.strip().splitlines()[-1])["output"] == "Done."
    assert run.lines("effects") == ["A1"]  # the side effect once
    calls = run.lines("calls")
    records = read_records(run.store, RUN)
    tool_by = 2 if (moment, old) == ("tool", "sigkill") else 1
    if tool_by == 1:  # the tool's body ran once, in attempt 1: attempt 2 waited for its record
        assert len(calls) == 1 and calls[0].startswith(f"{first.pid} "), calls
    else:  # attempt 1 was killed inside it: attempt 2 ran it, once its announcement went stale, with the same idempotency key
        assert [c.split()[0] for c in calls] == [str(first.pid), str(second.pid)] and len({c.split()[1] for c in calls}) == 1, calls
    # Each step once: attempt 1's first turn, the tool call, attempt 2's last turn.
    assert [(r.kind, r.occurrence, r.attempt) for r in records] == [("model", 1, 1), ("tool", 1, tool_by), ("model", 1, 2)], records
    assert len({r.fingerprint for r in records if r.kind == "model"}) == 2
    # Attempt 1 started no turn after attempt 2 took over; a turn it had begun was refused if it finished.
    assert live_turns == (2 if moment == "tool" else 3)
    if old != "sigkill":
        assert REFUSED in err1, err1
        assert code1 in (EXIT_INTERRUPTED, 1), err1
    else:
        assert code1 == -signal.SIGKILL
    assert "Traceback" not in err1 + err2, err1 + err2
    progress = read_progress(run.store, RUN) or {}
    assert (progress.get("phase"), progress.get("attempt")) == ("Succeeded", 2), progress  # attempt 1's end said nothing
