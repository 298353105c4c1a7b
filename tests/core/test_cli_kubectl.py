"""The `tether` CLI as a kubectl user expects it, run as a user runs it (`./tether` from the
checkout, in a subprocess, against the fake provider, a store of its own):

    step lines reach a pipe as each step happens (timestamps of lines read as they arrive,
    against the time a slow tool finished), and `tether logs --follow` shows them as they come
    `tether logs RUN [--attempt N]` prints an attempt's lines, ending with how it ended
    `tether cancel RUN` stops a running `tether run` cleanly (the running tool call finishes and
    is recorded, no new step starts) and for good (status, list, a refused resume)
    a run that recorded nothing takes a fixed manifest under the same run id; a refused module
    says how a local run allows modules (not the chart's value)
    `--allow-manifest-change` prints the first divergence
    every option of every command has help; every usage line says `tether`, never `./tether`
    NAMESPACE/NAME (an AgentRun) gets the kubectl command that does it
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from tether.cli import COMMANDS
from tether.contract import Progress, runner_key
from tether.progress import StepLines, write_progress
from tether.stores.local import LocalStore

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "openai"

TOOLS = """
import os
import pathlib
import time


def slow_refund(order: str) -> str:
    where = pathlib.Path(os.environ["CLI_TEST_DIR"])
    (where / f"started-{order}").write_text(str(time.time()))
    time.sleep(3)
    with open(where / "effects", "a") as f:
        f.write(f"{order} {time.time()}\\n")
    return f"refunded {order}"
"""

MANIFEST = [
    {
        "apiVersion": "tether.dev/v1alpha1",
        "kind": "AgentRun",
        "metadata": {"name": "two-refunds"},
        "spec": {
            "framework": "openai",
            "model": {"name": "gpt-4o-mini", "provider": "openai"},
            "instructions": "Refund what is asked.",
            "input": "Refund orders A1 and A2.",
            "tools": ["slow-refund"],
        },
    },
    {
        "apiVersion": "tether.dev/v1alpha1",
        "kind": "AgentTool",
        "metadata": {"name": "slow-refund"},
        "spec": {"description": "Refund an order (slowly).", "implementation": "cli_tools:slow_refund", "cache": "off"},
    },
]

SCRIPT = {
    "conversations": [
        {
            "match": "",
            "turns": [
                {"tool_calls": [{"name": "slow-refund", "arguments": {"order": "A1"}}]},
                {"tool_calls": [{"name": "slow-refund", "arguments": {"order": "A2"}}]},
                {"text": "Both refunded."},
            ],
        }
    ]
}


def _env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k not in ("TETHER_COMMAND", "TETHER_ENV")}
    return {**clean, "OPENAI_AGENTS_DISABLE_TRACING": "1", "CLI_TEST_DIR": str(tmp_path)}


def _two_refunds(tmp_path: Path) -> Path:
    (tmp_path / "cli_tools.py").write_text(TOOLS)
    (tmp_path / "refunds.script.yaml").write_text(yaml.safe_dump(SCRIPT))
    manifest = tmp_path / "refunds.yaml"
    manifest.write_text(yaml.safe_dump_all(MANIFEST, sort_keys=False))
    return manifest


def tether(tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["./tether", *args, "--store", str(tmp_path / "store")],
        cwd=REPO,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["./tether", *args, "--store", str(tmp_path / "store")],
        cwd=REPO,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _read_as_they_come(proc: subprocess.Popen[str], into: list[tuple[float, str]]) -> threading.Thread:
    """A thread that reads ``proc``'s stdout line by line, noting when each line arrived."""

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            into.append((time.time(), line.rstrip("\n")))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _arrived(lines: list[tuple[float, str]], pattern: str) -> float:
    (when,) = [t for t, line in lines if re.search(pattern, line)]
    return when


def _effects(tmp_path: Path) -> dict[str, float]:
    path = tmp_path / "effects"
    return {order: float(t) for order, t in (line.split() for line in path.read_text().splitlines())} if path.exists() else {}


def _wait_for(path: Path, proc: subprocess.Popen[str], seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def test_step_lines_reach_a_pipe_as_they_happen_and_logs_follows_them(tmp_path: Path) -> None:
    manifest = _two_refunds(tmp_path)
    run = _start(tmp_path, "run", str(manifest))
    run_lines: list[tuple[float, str]] = []
    reader = _read_as_they_come(run, run_lines)
    follow = None
    try:
        _wait_for(tmp_path / "started-A1", run)  # the first turn is done: its line is out, its log written
        follow = _start(tmp_path, "logs", "two-refunds", "--follow")
        follow_lines: list[tuple[float, str]] = []
        follower = _read_as_they_come(follow, follow_lines)
        assert run.wait(timeout=300) == 0, run.stderr.read() if run.stderr else ""
        reader.join(10)
        assert follow.wait(timeout=30) == 0, follow.stderr.read() if follow.stderr else ""  # it ends with the attempt
        follower.join(10)
    finally:
        for proc in (run, follow):
            if proc is not None and proc.poll() is None:
                proc.kill()
    effects = _effects(tmp_path)
    assert sorted(effects) == ["A1", "A2"]
    # Each step line was read before the next slow tool call had finished: printed as it happened,
    # not all at once when the attempt ended (each call takes 3 s).
    assert _arrived(run_lines, r"step +1  live +turn") < effects["A1"]
    assert _arrived(run_lines, r"step +2  live +tool  slow-refund") < effects["A2"]
    assert _arrived(run_lines, r"step +3  live +turn") < effects["A2"]
    assert effects["A2"] <= _arrived(run_lines, r"step +4  live +tool  slow-refund") < _arrived(run_lines, "^Answer:")
    # The follower printed the lines the run printed, as they came, and stopped at the end line.
    steps = [line for _, line in run_lines if line.startswith("  step")]
    followed = [line for _, line in follow_lines]
    assert followed[:-1] == steps and followed[-1] == "-- attempt ended: succeeded (exit code 0)", followed
    assert _arrived(follow_lines, r"step +3  live +turn") < effects["A2"]

    again = tether(tmp_path, "logs", "two-refunds")
    assert again.returncode == 0 and again.stdout.splitlines() == followed
    assert tether(tmp_path, "logs", "two-refunds", "--attempt", "1").stdout.splitlines() == followed
    missing = tether(tmp_path, "logs", "two-refunds", "--attempt", "7")
    assert missing.returncode == 1
    assert "attempt 7 of run 'two-refunds' logged nothing (the run: Succeeded, attempt 1;" in missing.stderr
    unknown = tether(tmp_path, "logs", "no-such-run")
    assert unknown.returncode == 1 and "no run 'no-such-run'" in unknown.stderr


def test_logs_follows_an_attempt_that_said_its_run_is_at_rest_to_its_end_line(tmp_path: Path) -> None:
    """An attempt publishes its run at rest (its last progress) before its process writes its
    last step lines and the end line: a follower that stopped there printed neither. The test
    plays the attempt and its `tether run` in that order, through the store `tether logs` reads."""
    store, run_id = LocalStore(tmp_path / "store"), "at-rest"
    step = "  step   {}  live      turn  gpt-4o-mini"
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "tether-run-stand-in"])
    store.put(runner_key(run_id), json.dumps({"host": socket.gethostname(), "pid": runner.pid, "startedAt": time.time()}).encode())
    write_progress(store, run_id, Progress(phase="Running", attempt=1, updated_at=time.time()))
    lines = StepLines(store, run_id)
    lines.add(step.format(1), attempt=1)
    lines.flush()
    follow = _start(tmp_path, "logs", run_id, "--follow", "--interval", "0.05")
    followed: list[tuple[float, str]] = []
    try:
        follower = _read_as_they_come(follow, followed)
        deadline = time.monotonic() + 240
        while not followed:
            assert follow.poll() is None and time.monotonic() < deadline, follow.communicate()
            time.sleep(0.05)
        write_progress(store, run_id, Progress(phase="Succeeded", attempt=1, updated_at=time.time()))
        time.sleep(2)  # forty reads of the follower: the run is at rest, its attempt's process not done
        assert follow.poll() is None, f"the follower stopped before the attempt's end line: {followed}"
        lines.add(step.format(2), attempt=1)
        lines.end("succeeded (exit code 0)")
        store.delete(runner_key(run_id))  # tether run leaves once its attempt exited
        assert follow.wait(timeout=60) == 0, follow.stderr.read() if follow.stderr else ""
        follower.join(10)
    finally:
        for proc in (runner, follow):
            if proc.poll() is None:
                proc.kill()
        runner.wait()
    assert [line for _, line in followed] == [step.format(1), step.format(2), "-- attempt ended: succeeded (exit code 0)"]


def test_cancel_stops_a_running_tether_run_cleanly_and_for_good(tmp_path: Path) -> None:
    manifest = _two_refunds(tmp_path)
    run = _start(tmp_path, "run", str(manifest))
    try:
        _wait_for(tmp_path / "started-A1", run)  # the first refund is running
        cancel = tether(tmp_path, "cancel", "two-refunds", "--by", "alice", "--reason", "wrong customer", timeout=120)
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    assert "stopping tether run (pid" in cancel.stdout and "cancelled run two-refunds" in cancel.stdout
    assert run.returncode == 130, (out, err)
    assert "Traceback" not in out + err
    # The call that was running finished and was recorded; the second one never started.
    assert sorted(_effects(tmp_path)) == ["A1"] and not (tmp_path / "started-A2").exists()
    assert "step   2  live      tool  slow-refund" in out and "step   3" not in out
    assert "Cancelled by alice (tether cancel)" in out
    assert json.loads(out.strip().splitlines()[-1]) == {"run_id": "two-refunds", "exit_code": 130, "phase": "Cancelled"}

    status = tether(tmp_path, "status", "two-refunds")
    assert "run two-refunds: Cancelled" in status.stdout and "error: cancelled by alice: wrong customer" in status.stdout
    listed = tether(tmp_path, "list").stdout.splitlines()
    assert listed[1].split()[:2] == ["two-refunds", "Cancelled"]
    logs = tether(tmp_path, "logs", "two-refunds").stdout.splitlines()
    assert logs[-1].startswith("-- attempt ended: interrupted (exit code 130)"), logs

    resumed = tether(tmp_path, "run", str(manifest))
    assert resumed.returncode == 2
    assert "run 'two-refunds' was cancelled by alice (tether cancel): it is never resumed; use --run-id NEW" in resumed.stderr
    assert sorted(_effects(tmp_path)) == ["A1"] and "attempt 1:" not in resumed.stdout
    assert "already cancelled" in tether(tmp_path, "cancel", "two-refunds").stdout
    nothing = tether(tmp_path, "cancel", "no-such-run")
    assert nothing.returncode == 1 and "no run 'no-such-run'" in nothing.stderr


def _weather(tmp_path: Path, edit=None) -> Path:
    for f in ("weather.script.yaml", "example_tools.py"):
        shutil.copy(EXAMPLES / f, tmp_path / f)
    docs = list(yaml.safe_load_all((EXAMPLES / "weather.yaml").read_text()))
    if edit is not None:
        edit(docs)
    path = tmp_path / "weather.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def test_a_run_that_recorded_nothing_takes_the_fixed_manifest_and_a_change_prints_the_divergence(tmp_path: Path) -> None:
    def typo(docs: list[dict]) -> None:
        docs[1]["spec"]["implementation"] = "exmaple_tools:get_weather"

    broken = tether(tmp_path, "run", str(_weather(tmp_path, typo)))
    assert broken.returncode == 2, broken.stdout + broken.stderr
    # Said as it applies on this machine: no chart here, the manifest's folder is what counts.
    assert "AgentTool get-weather: module exmaple_tools is not an allowed tool module (allowed: none;" in broken.stdout, broken.stdout
    assert f"a local run allows the modules beside its manifest in {tmp_path} and those in $TETHER_TOOL_MODULES" in broken.stdout
    assert "chart value" not in broken.stdout

    fixed = tether(tmp_path, "run", str(_weather(tmp_path)))  # the same run id, no flag: nothing was recorded
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "Answer:" in fixed.stdout and "first divergence" not in fixed.stdout

    def other_instructions(docs: list[dict]) -> None:
        docs[0]["spec"]["instructions"] = "You answer questions about the weather, briefly."

    refused = tether(tmp_path, "run", str(_weather(tmp_path, other_instructions)))
    assert refused.returncode == 2 and "was started from a different manifest" in refused.stderr  # it recorded steps now
    changed = tether(tmp_path, "run", str(_weather(tmp_path, other_instructions)), "--allow-manifest-change")
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert re.search(
        r"first divergence: step 1 of attempt 2 sent a model turn the journal does not hold \(fingerprint [0-9a-f]{16}…\) "
        r"while recorded model steps were left unused",
        changed.stdout,
    ), changed.stdout


def _undocumented(help_text: str) -> list[str]:
    """Arguments listed in argparse --help output without a help text of their own."""
    lines, missing, in_arguments = help_text.splitlines(), [], False
    for i, line in enumerate(lines):
        if line and not line.startswith(" "):
            in_arguments = line.endswith(":") and not line.startswith("usage:")
            continue
        if in_arguments and re.match(r"  \S", line):
            inline = re.search(r"\S {2,}\S", line.strip())
            wrapped = i + 1 < len(lines) and re.match(r" {4,}\S", lines[i + 1])
            if not (inline or wrapped):
                missing.append(line.strip())
    return missing


def test_every_option_has_help_and_every_usage_says_tether(tmp_path: Path) -> None:
    cli = Path(sys.executable).with_name("tether")  # the installed command (the core env has every part)
    missing = {}
    for command in COMMANDS:
        proc = subprocess.run([str(cli), command, "--help"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (command, proc.stderr)
        assert proc.stdout.startswith(f"usage: tether {command}"), proc.stdout
        if undocumented := _undocumented(proc.stdout):
            missing[command] = undocumented
    assert not missing, missing
    # The checkout's script prints the same name: hints are copied as they are.
    top = subprocess.run(["./tether", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "usage: tether COMMAND" in top.stdout and "./tether" not in top.stdout


def test_an_agent_run_on_kubernetes_gets_the_kubectl_command(tmp_path: Path) -> None:
    logs = tether(tmp_path, "logs", "shop/refund-7")
    assert logs.returncode == 2
    assert "kubectl logs -n shop -l tether.dev/run=refund-7 -c runtime --prefix --tail=-1" in logs.stderr
    cancel = tether(tmp_path, "cancel", "shop/refund-7")
    assert cancel.returncode == 2 and "kubectl delete agentrun refund-7 -n shop" in cancel.stderr


def test_help_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    """`tether --help | head -n 1` (the usage is longer than a pipe's first read): no traceback."""
    for args in ("--help", "run --help", "logs --help"):
        piped = subprocess.run(f"./tether {args} | head -n 1", shell=True, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert piped.stdout.startswith("usage: tether"), piped.stdout
        assert "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr, piped.stderr


def test_logs_shows_a_run_agent_runs_attempts_from_their_records(tmp_path: Path) -> None:
    # A run made in your own process (run_agent) prints no step lines; `tether logs` shows each
    # attempt from the record it leaves when it ends, in the same form (docs/getting-started).
    import asyncio

    from tests.core.chat_adapter import ADAPTER
    from tether.agent import run_agent
    from tether.testing import FakeProvider

    script = {"conversations": [{"match": "", "turns": [{"text": "Hello."}]}]}
    with FakeProvider(script) as fake:
        for _ in range(2):
            result = asyncio.run(
                run_agent(
                    ADAPTER,
                    "Hi",
                    model="gpt-4o-mini",
                    run_id="own",
                    store=str(tmp_path / "store"),
                    upstreams={"openai": fake.url + "/openai"},
                )
            )
            assert result.output == "Hello."
    latest, first = tether(tmp_path, "logs", "own"), tether(tmp_path, "logs", "own", "--attempt", "1")
    assert latest.returncode == 0 and first.returncode == 0, latest.stderr + first.stderr
    assert re.fullmatch(r"  step +1  replayed  turn  gpt-4o-mini +\d+ tok  \$0\.00000\n-- attempt ended: succeeded\n", latest.stdout), (
        latest.stdout
    )
    assert re.fullmatch(r"  step +1  live      turn  gpt-4o-mini +\d+ tok  \$0\.\d{5}\n-- attempt ended: succeeded\n", first.stdout), (
        first.stdout
    )
