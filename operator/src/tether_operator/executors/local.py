"""The local executor: each execution is `python -m tether exec` in a subprocess of the operator.

The runtime inside runs as a Flyte local execution (no cluster, no backend). Child processes
belong to the operator: they get SIGKILL when the operator dies (PR_SET_PDEATHSIG), so after an
operator restart there is never an orphan still calling the model while a new attempt starts;
the new attempt replays the journal instead.

The child's environment is built, not inherited: only the harmless variables below (plus the
names in `runtime_env`, chart `executor.runtimeEnv`) pass from the operator's own environment, so
its token, kubeconfig and anything else it holds never reach agent or tool code. The run's secrets
travel as one variable, TETHER_SECRETS (JSON, the contract in `tether.secrets`), which the runtime
removes from its environment before importing any agent or tool module. The store's credentials
(AWS_*) pass too: the runtime writes the journal with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

from tether.contract import AGENT_MODULES_ENV, SECRETS_ENV, TOOL_MODULES_ENV, Outcome
from tether.secrets import Secrets

from .base import EXIT_SUCCEEDED, AttemptingExecutor, Capability, Execution, ExecutionState, Submission

log = logging.getLogger(__name__)

# What the runtime may see of the operator's environment: locale, paths, the Python setup,
# Tether's non-secret runtime knobs, and the store's credentials.
_PASSED_ENV = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
        "PYTHONPATH", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV",
        "SSL_CERT_FILE", "SSL_CERT_DIR", "OPENAI_AGENTS_DISABLE_TRACING",
        TOOL_MODULES_ENV, AGENT_MODULES_ENV, "TETHER_PRICES",
    }
)  # fmt: skip
_PASSED_PREFIXES = ("LC_", "AWS_", "TETHER_UPSTREAM_")


def runtime_env(environ: dict[str, str], extra: tuple[str, ...] = ()) -> dict[str, str]:
    """The part of `environ` a runtime process may inherit."""
    allowed = _PASSED_ENV | set(extra)
    return {k: v for k, v in environ.items() if k in allowed or k.startswith(_PASSED_PREFIXES)}


def secrets_env(secrets: Secrets) -> dict[str, str]:
    """TETHER_SECRETS for the runtime (nothing if the run has no secrets)."""
    if not secrets.model_key and not secrets.tools:
        return {}
    doc = {"model": {"apiKey": secrets.model_key} if secrets.model_key else {}, "tools": {t: dict(env) for t, env in secrets.tools.items()}}
    return {SECRETS_ENV: json.dumps(doc)}


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class LocalExecutor(AttemptingExecutor[Execution]):
    """Development mode only (chart value `executor.kind: local`): agent code runs inside the
    operator's pod, with the Secret values the operator read. No image, resources or placement."""

    kind = "local"
    supports: frozenset[Capability] = frozenset({Capability.TOOL_MCP})  # in its one process, as every tool
    refusal_hint = "a development mode; the kubernetes executor honours the run's image, resources and placement"
    reads_secrets = True
    starting = "waiting for a free slot"

    def __init__(
        self,
        store_url: str,
        workdir: str | Path,
        concurrency: int = 4,
        python: str | None = None,
        retry_backoff: float = 0.5,
        command: list[str] | None = None,
        passed_env: tuple[str, ...] = (),
    ) -> None:
        self.store_url = store_url
        self.workdir = Path(workdir)
        self.python = python or sys.executable
        self.retry_backoff = retry_backoff
        # argv before REQUEST.json; replaceable so the executor's own tests can drive exit codes.
        self.command = command or [self.python, "-m", "tether", "exec"]
        self._slots = asyncio.Semaphore(concurrency)
        self._runs: dict[str, Execution] = {}
        self.passed_env = passed_env
        self._probes: dict[str, tuple[float, str | None]] = {}

    # --------------------------------------------------------------------------- interface

    def _execution(self, submission: Submission) -> Execution:
        return Execution(submission, attempts=submission.attempts, failures=submission.failures)

    async def probe_tool(self, implementation: str) -> str | None:
        """Import the tool's module where the runtime will: in a child process with the runtime's
        interpreter and environment (never in the operator). An answer holds for a minute."""
        now = time.monotonic()
        cached = self._probes.get(implementation)
        if cached is not None and now - cached[0] < 60:
            return cached[1]
        code = "import sys; from tether.tools import probe_implementation as p; r = p(sys.argv[1]); print(' '.join((r or '').split())); sys.exit(1 if r else 0)"
        self.workdir.mkdir(parents=True, exist_ok=True)  # cwd: no modules of the operator's own folder
        proc = await asyncio.create_subprocess_exec(
            self.python,
            "-c",
            code,
            implementation,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=runtime_env(dict(os.environ), self.passed_env),
            cwd=str(self.workdir),
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), 60)
        except TimeoutError:
            _kill(proc)
            await proc.wait()
            return f"importing {implementation} took over 60 s"
        text = out.decode(errors="replace").strip()
        answer = None if proc.returncode == 0 else (text.splitlines()[-1] if text else f"the probe exited with {proc.returncode}")
        self._probes[implementation] = (now, answer)
        return answer

    async def close(self) -> None:
        for name in list(self._runs):
            await self.abort(name)

    # ----------------------------------------------------------------------------- driving

    async def _prepare(self, run: Execution, adopt: bool) -> None:
        # The request holds the spec only; the API key travels in the child's environment.
        request = self._folder(run) / "request.json"
        request.parent.mkdir(parents=True, exist_ok=True)
        request.write_text(json.dumps(run.sub.request.wire()))
        request.chmod(0o600)

    def _folder(self, run: Execution) -> Path:
        return self.workdir / run.sub.name

    async def _attempt(self, run: Execution) -> tuple[int, str]:
        async with self._slots:
            run.attempts += 1
            run.set(ExecutionState.RUNNING, f"attempt {run.attempts}")
            code = await self._process(run, self._folder(run))
        if code == EXIT_SUCCEEDED:
            return code, "the runtime finished"
        if code == _TIMED_OUT:
            return code, f"timed out after {run.sub.timeout_seconds:g}s"
        return code, f"killed by signal {-code}" if code < 0 else f"exit code {code}"

    def _terminal_error(self, run: Execution) -> str | None:
        # The cause is the runtime's outcome line (also in its progress), not the whole log:
        # logs may hold what status must not. The operator scrubs Secret values from it.
        return _outcome_error(self._folder(run) / f"attempt-{run.attempts}.log")

    async def _process(self, run: Execution, folder: Path) -> int:
        """One attempt: `tether exec` in a child process, to its end (its exit code)."""
        env = runtime_env(dict(os.environ), self.passed_env)
        env.update(run.sub.env)
        env.update(secrets_env(run.sub.secrets))
        logfile = folder / f"attempt-{run.attempts}.log"
        with logfile.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                *self.command,
                str(folder / "request.json"),
                "--store",
                run.sub.store_url or self.store_url,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                cwd=str(folder),
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        (folder / "pid").write_text(str(proc.pid))
        try:
            return await asyncio.wait_for(proc.wait(), run.sub.timeout_seconds)
        except TimeoutError:
            _kill(proc)
            await proc.wait()
            return _TIMED_OUT
        except asyncio.CancelledError:  # aborted: stop the whole process group, then go
            _kill(proc)
            with contextlib.suppress(Exception):
                await asyncio.shield(proc.wait())
            raise


_TIMED_OUT = -1000


def _outcome_error(log: Path) -> str | None:
    """The `error` of the JSON outcome `tether exec` prints as its last stdout line, if any."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines[-50:]):
        if line.startswith("{") and '"exit_code"' in line:
            try:
                error = Outcome.from_json(line).error
            except (ValueError, KeyError, TypeError):
                return None
            return str(error)[:1024] if error else None
    return None


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
