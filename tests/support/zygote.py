"""A zygote: a Python process that imports the expensive modules once, then forks one child per job.

Tests that need a real process per attempt (SIGKILL of the process running the agent, a second
process replaying what the first recorded) would otherwise pay the imports of an agent framework
(seconds) for every attempt. Each child is a real process: it runs ``call(args)`` (a
``module:function`` reference) with its own stdout/stderr files and exits with its return value;
the zygote (its parent) kills it when asked, reaps it, and answers one JSON line — so a pid is
never reused under our feet and a SIGKILL is exactly what a dying node does to an agent.

Fork copies only the calling thread, so the zygote refuses to start (and to warm up) with any
thread but its main one: a lock or event loop thread left behind would hang the children.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = r"""
import contextlib, importlib, io, json, os, signal, sys, threading, time, traceback

def resolve(ref):
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)

config = json.loads(sys.argv[1])
for name in config["imports"]:
    importlib.import_module(name)
if config["prepare"]:
    resolve(config["prepare"])()
call = resolve(config["call"])
print(json.dumps({"ready": True, "threads": threading.active_count()}), flush=True)

for line in sys.stdin:
    job = json.loads(line)
    if job.get("warm"):
        # One run in the zygote itself, so lazy imports and first-call set-up happen once, not in
        # every child. It must leave no thread behind: fork copies only this one.
        with contextlib.redirect_stdout(io.StringIO()):
            call(job["args"])
        print(json.dumps({"threads": threading.active_count()}), flush=True)
        continue
    t0 = time.time()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.environ.update(job["env"])
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(os.open(job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
            os.dup2(os.open(job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
            code = call(job["args"]) or 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(code)
    kill_at, deadline = job.get("kill_after_s"), job.get("timeout_s")
    # Or: kill a moment after the n-th new line of a log file, i.e. just after a side effect.
    log, nth, delay = job.get("tool_log"), job.get("kill_after_execution"), job.get("delay", 0.0)
    lines_before = open(log).read().count("\n") if log and os.path.exists(log) else 0
    precise = kill_at is not None or nth
    killed = timed_out = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        now = time.time() - t0
        if nth and os.path.exists(log) and open(log).read().count("\n") >= lines_before + nth:
            kill_at, nth = now + delay, None
        if kill_at is not None and now >= kill_at:
            os.kill(pid, signal.SIGKILL)
            killed, kill_at = True, None
        if deadline is not None and now >= deadline and not timed_out:
            os.kill(pid, signal.SIGKILL)
            timed_out = True
        time.sleep(0.0005 if precise else 0.005)
    signaled = os.WIFSIGNALED(status)
    print(json.dumps({"pid": pid, "t0": t0, "t1": time.time(), "killed_by_timer": killed, "timed_out": timed_out,
                      "signal": os.WTERMSIG(status) if signaled else 0,
                      "exit": os.WEXITSTATUS(status) if not signaled else None}), flush=True)
os._exit(0)  # every child is reaped; tearing the imported modules down would only cost seconds
"""


class Zygote:
    """``Zygote("pkg.mod:function", imports=[...])``: ``run(args, ...)`` forks a child that calls
    ``function(args)``; used by one thread at a time."""

    def __init__(self, call: str, *, imports: Sequence[str] = (), prepare: str | None = None, env: dict | None = None) -> None:
        config = {"call": call, "imports": list(imports), "prepare": prepare}
        pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PROGRAM, json.dumps(config)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {}), "PYTHONPATH": pythonpath},
        )
        ready = self._answer()
        assert ready == {"ready": True, "threads": 1}, f"the zygote must hold one thread to fork safely: {ready}"

    def _answer(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the zygote died (exit {self.proc.poll()}); its stderr is in the test's captured output"
        answer: dict = json.loads(line)
        return answer

    def _send(self, job: dict) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def warm(self, args: object) -> None:
        assert self._send({"warm": True, "args": args}) == {"threads": 1}, "the warm-up left a thread running"

    def run(
        self,
        args: object,
        workdir: Path,
        name: str,
        *,
        env: dict | None = None,
        kill_after_s: float | None = None,
        timeout_s: float | None = None,
        **kill: object,
    ) -> dict:
        """One child process; returns pid, times, exit or signal, and its stdout/stderr text.
        ``kill`` may name ``tool_log``, ``kill_after_execution`` and ``delay``: SIGKILL ``delay``
        seconds after the child appended that many lines to the log."""
        out, err = workdir / f"{name}.out", workdir / f"{name}.err"
        job = {"args": args, "env": env or {}, "stdout": str(out), "stderr": str(err), "kill_after_s": kill_after_s, "timeout_s": timeout_s}
        result = self._send({**job, **kill})
        result["killed"] = result["signal"] == signal.SIGKILL
        # A child killed at once may not have opened its files yet.
        result["stdout"], result["stderr"] = (f.read_text() if f.exists() else "" for f in (out, err))
        return result

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
