"""``tether run MANIFEST.yaml``: run an AgentRun on this machine, the embedded default.

Each attempt is ``tether exec`` in a child process (a Flyte local execution with the local
store), so a crash is a real process death and the retry a real new process. Progress prints as
steps complete (live or replayed, tokens, cost); the answer and a summary at the end.

- The manifest may hold the AgentRun and the AgentTools it names (multi-document YAML). Tool
  modules are imported from the manifest's folder.
- Without an API key for the model's provider (and no ``model.baseURL``), a fake provider is
  started with the script beside the manifest (``<name>.script.yaml``) — said plainly, so
  nobody mistakes it for a real model.
- The run id defaults to the AgentRun's name: running the same manifest again replays it. Use
  ``--run-id`` for a fresh run. A run id means one run: resuming it from a manifest whose
  framework, model, instructions, agent, tools or input differ from the one it was started with
  is refused, saying what differs (``--allow-manifest-change`` resumes it anyway).
- An attempt's exit code reads as in the operator's executors (``tether.contract.attempt_end``):
  1, a signal or any code outside the contract starts the next attempt while retries last; 0, 2,
  3 and 130 end the run.
- A run that recorded nothing (it failed before its first step: a typo in a tool's module, a
  missing adapter) is not yet bound to its manifest: fix the manifest and run it again, under
  the same run id.
- ``tether cancel RUN`` (another terminal) stops a running ``tether run`` of that run cleanly,
  as Ctrl-C does, and marks the run cancelled: it is never resumed (``--run-id NEW`` starts anew).
- Step lines print as each step completes, to a terminal or a pipe alike; ``tether logs RUN``
  shows them again (each attempt's, kept in the store).
- ``--kill-after N`` kills the agent process after N steps and starts it again, to watch a
  resume replay the finished steps.
- Ctrl-C (or SIGTERM) stops cleanly: the running attempt starts no new step, lets tool calls
  already running finish and be recorded (``tether.stopping``), and ``tether run`` exits 130 with
  "run the same command again to resume". A second Ctrl-C stops at once. Attempts run in a
  process group of their own, so the terminal's signal reaches ``tether run`` only, which passes
  exactly one on.
- A retry runs in a warm worker: beside each attempt the next one's process is started
  (``tether exec --warm``: imports, Flyte set up, waiting on a pipe), so a retry pays only for
  its replay. ``--no-warm`` starts each attempt afresh instead (one process at a time, less
  memory). The spare worker exits unused when the run ends.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..api import AgentRunManifest, AgentRunSpec, AgentToolManifest, ManifestError, load_manifests
from ..contract import (
    EXIT_INTERRUPTED,
    EXIT_RECOVERABLE,
    EXIT_STORE_UNREACHABLE,
    EXIT_SUCCEEDED,
    EXIT_TERMINAL,
    KILL_AFTER_STEP_ENV,
    LOCAL_RUN_ENV,
    PROGRESS_ENV,
    AttemptEnd,
    ExecRequest,
    Outcome,
    attempt_end,
    cancel_key,
    journal_prefix,
    manifest_key,
    runner_key,
)
from ..progress import read_progress, run_spend_note, unknown_cost_note, write_progress
from ..stores import Store, default_store_url, open_store
from ..tools import AGENT_MODULES_ENV, TOOL_MODULES_ENV, allowed_agent_modules, allowed_tool_modules
from ..wire.providers import API_KEY_ENV
from . import command_name, parser, store_option
from .exec import GO


def cancelled(store: Store, run_id: str) -> dict[str, Any] | None:
    """Who cancelled the run and when (``tether cancel``), or None."""
    data = store.get(cancel_key(run_id))
    return None if data is None else dict(json.loads(data))


def runner(store: Store, run_id: str) -> dict[str, Any] | None:
    """The ``tether run`` process running the run now (its record at ``runner_key``), or None
    (none, or one that died without saying so: its pid is gone, or is another program now)."""
    data = store.get(runner_key(run_id))
    if data is None:
        return None
    record = dict(json.loads(data))
    if record.get("host") != socket.gethostname():
        return record
    pid = int(record.get("pid") or 0)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # it exists, as another user
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists() and b"tether" not in cmdline.read_bytes():
        return None  # the pid was reused by another program
    return record


def recorded_anything(store: Store, run_id: str) -> bool:
    """Whether the run recorded a step or asked for an approval: only then is it bound to the
    manifest it started from (an attempt that failed before its first step recorded only its
    number, under ``attempts/``)."""
    from ..approvals import list_approvals

    journal = journal_prefix(run_id)
    return any(not k.startswith(journal + "attempts/") for k in store.list(journal)) or bool(list_approvals(store, run_id))


def identity(spec: AgentRunSpec, tools: dict[str, AgentToolManifest]) -> dict[str, Any]:
    """What makes a run this run: resuming it from anything else would replay the wrong steps.
    (Not the model's baseURL: a fake provider listens on a new port each time.)"""
    return {
        "framework": spec.framework,
        "model": f"{spec.model.provider}:{spec.model.name}",
        "instructions": spec.instructions,
        "agent": spec.agent,
        "input": spec.input,
        "tools": {name: f"{_tool_identity(t)} (version {t.spec.version})" for name, t in sorted(tools.items()) if name in spec.tools},
    }


def _tool_identity(tool: AgentToolManifest) -> str:
    mcp = tool.spec.mcp
    if mcp is None:
        return str(tool.spec.implementation)
    return f"mcp {mcp.url or ' '.join(mcp.command or [])}: {', '.join(mcp.tools)}"


def manifest_changes(store: Store, run_id: str, current: dict[str, Any]) -> list[str]:
    """How ``current`` differs from the manifest the run was started with ([] for a new run, and
    for one that recorded nothing: it is not bound to a manifest yet)."""
    data = store.get(manifest_key(run_id))
    if data is None:
        return []
    recorded = json.loads(data)
    changes = []
    for field in current:
        before, now = recorded.get(field), current[field]
        if before == now:
            continue
        if isinstance(before, dict) and isinstance(now, dict):
            for name in sorted(set(before) | set(now)):
                if before.get(name) != now.get(name):
                    changes.append(f"tool {name}: {_short(before.get(name))} -> {_short(now.get(name))}")
        else:
            changes.append(f"{field}: {_short(before)} -> {_short(now)}")
    return changes if changes and recorded_anything(store, run_id) else []


def _short(value: Any) -> str:
    text = "(none)" if value is None else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _load(path: Path) -> tuple[AgentRunManifest, dict[str, AgentToolManifest]]:
    manifests = load_manifests(path)
    runs = [m for m in manifests if isinstance(m, AgentRunManifest)]
    if len(runs) != 1:
        raise ManifestError(f"{path}: expected exactly one AgentRun, found {len(runs)}")
    tools = {m.metadata.name: m for m in manifests if isinstance(m, AgentToolManifest)}
    return runs[0], tools


def main(argv: list[str]) -> int:
    # Each line reaches a terminal or a pipe as it is printed (a pipe is block-buffered by default).
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    p = parser("run", __doc__.split("\n\n")[0], exit_codes=True)
    p.add_argument("manifest", type=Path, help="AgentRun manifest (YAML; may hold the AgentTools it names)")
    p.add_argument("--run-id", help="run id (default: the AgentRun's name; the same id resumes/replays)")
    p.add_argument(
        "--allow-manifest-change",
        action="store_true",
        help="resume the run id even though the manifest's framework, model, instructions, agent, tools or input changed",
    )
    store_option(p)
    p.add_argument("--kill-after", type=int, default=0, metavar="N", help="kill the first attempt after N steps, then resume")
    p.add_argument("--retries", type=int, default=None, metavar="N", help="attempts after a crash (default: spec.retries)")
    p.add_argument(
        "--no-warm", dest="warm", action="store_false", help="start each retry as a new process instead of in a worker started ahead"
    )
    args = p.parse_args(argv)

    try:
        run, tool_manifests = _load(args.manifest)
    except (ManifestError, OSError) as e:
        print(f"tether run: {e}", file=sys.stderr)
        return 2
    spec = run.spec
    missing = [t for t in spec.tools if t not in tool_manifests]
    if missing:
        print(f"tether run: the manifest names AgentTool(s) it does not define: {', '.join(missing)}", file=sys.stderr)
        return 2
    run_id = args.run_id or run.metadata.name
    store = args.store or default_store_url()
    the_store = open_store(store)  # fail early on a bad store URL
    if (cancel := cancelled(the_store, run_id)) is not None:
        print(
            f"tether run: run {run_id!r} was cancelled{_by(cancel)} ({command_name()} cancel): it is never resumed; "
            "use --run-id NEW for a new run",
            file=sys.stderr,
        )
        return EXIT_TERMINAL
    current = identity(spec, tool_manifests)
    changes = manifest_changes(the_store, run_id, current)
    if changes and not args.allow_manifest_change:
        print(f"tether run: run id {run_id!r} was started from a different manifest:", file=sys.stderr)
        for change in changes:
            print(f"  {change}", file=sys.stderr)
        print(
            "  resuming it would replay that run's steps; use --run-id NEW for a new run, or --allow-manifest-change to resume it anyway",
            file=sys.stderr,
        )
        return EXIT_TERMINAL
    the_store.put(manifest_key(run_id), json.dumps(current, sort_keys=True).encode())
    here = args.manifest.resolve().parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(here), os.environ.get("PYTHONPATH")])),
        PROGRESS_ENV: "1",
        LOCAL_RUN_ENV: str(here),
    }
    env.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    # The manifest's own tool modules (beside it: the user's code on the user's machine) are
    # allowed besides the image's declared ones; the standard library never is (tether.tools).
    mine = {t.spec.implementation.partition(":")[0].split(".")[0] for t in tool_manifests.values() if t.spec.implementation}
    mine = {m for m in mine if (here / f"{m}.py").is_file() or (here / m / "__init__.py").is_file()}
    env[TOOL_MODULES_ENV] = ",".join(sorted(set(allowed_tool_modules(env)) | mine))
    agent = (spec.agent or "").partition(":")[0].split(".")[0]  # the same for a bring-your-own agent
    if agent and ((here / f"{agent}.py").is_file() or (here / agent / "__init__.py").is_file()):
        env[AGENT_MODULES_ENV] = ",".join(sorted(set(allowed_agent_modules(env)) | {agent}))

    provider = spec.model.provider
    fake = None
    if not spec.model.base_url and not os.environ.get(API_KEY_ENV[provider]):
        script = args.manifest.with_name(f"{args.manifest.stem}.script.yaml")
        if not script.exists():
            print(f"tether run: no {API_KEY_ENV[provider]} set and no fake-provider script at {script}", file=sys.stderr)
            return 2
        try:  # a separate distribution: the runtime wheel does not ship test doubles
            from tether.testing.fake_provider import FakeProvider
            from tether.testing.script import Script
        except ImportError:
            print(
                f"tether run: no {API_KEY_ENV[provider]} set; running against the fake provider needs tether-testing "
                "(pip install tether-testing; a checkout's tether script has it)",
                file=sys.stderr,
            )
            return 2

        # Server-side state (Mistral conversations) outlives each invocation, as on a real server.
        state = Path(store) / "fake-provider" / f"{run_id}.json" if "://" not in store else None
        fake = FakeProvider(Script.load(script), latency=0.2, state_path=state).start()
        spec = spec.model_copy(update={"model": spec.model.model_copy(update={"base_url": fake.base_url(provider)})})
        env[API_KEY_ENV[provider]] = "fake-key-no-real-model"
        print(f"No {API_KEY_ENV[provider]} set: using Tether's fake {provider} provider at {fake.url}")
        print(f"  scripted by {script.name}; no real model is called and nothing is billed.\n")

    request = ExecRequest(
        run_id=run_id,
        namespace=run.metadata.namespace or "default",
        name=run.metadata.name,
        spec=spec,
        tools={n: t.spec for n, t in tool_manifests.items()},
    )
    retries = spec.retries if args.retries is None else args.retries
    print(f"AgentRun {run.metadata.name} ({spec.framework}, {spec.model.name}) run id {run_id}, store {store}")
    started = time.time()
    # Who runs the run now: `tether cancel` signals this process (a clean stop, as Ctrl-C).
    the_store.put(runner_key(run_id), json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "startedAt": started}).encode())
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            f.write(request.model_dump_json(by_alias=True))
        code, outcome = _attempts(f.name, store, env, args.kill_after, retries, warm=args.warm)
        final = code if code >= 0 else EXIT_RECOVERABLE  # killed by a signal, retries ran out
        cancel = cancelled(the_store, run_id)
        if cancel is not None and final == EXIT_SUCCEEDED:  # it finished first: nothing was cancelled
            the_store.delete(cancel_key(run_id))
            cancel = None
        if cancel is not None:
            mark_cancelled(the_store, run_id, cancel)
            final = EXIT_INTERRUPTED
        elif outcome is None and code != EXIT_SUCCEEDED:  # it died mid-step: its progress still says Running
            died = f"the agent process died (signal {-code})" if code < 0 else f"the agent process exited with code {code}"
            _mark(the_store, run_id, "Failed", f"{died}; run the same command again to resume", since=started)
    finally:
        os.unlink(f.name)
        the_store.delete(runner_key(run_id))
        if fake is not None:
            fake.stop()
    _summary(store, run_id, code, final, outcome, started, cancel)
    return final


def _by(cancel: dict[str, Any]) -> str:
    return f" by {cancel['by']}" if cancel.get("by") else ""


def mark_cancelled(store: Store, run_id: str, cancel: dict[str, Any]) -> None:
    """The run's progress says Cancelled (its figures as the last attempt left them)."""
    _mark(store, run_id, CANCELLED, f"cancelled{_by(cancel)}" + (f": {cancel['reason']}" if cancel.get("reason") else ""))


def _mark(store: Store, run_id: str, phase: str, error: str, *, since: float = 0.0) -> None:
    """Set the run's phase and error in its progress, its figures kept (if written ``since``)."""
    from ..contract import Progress

    progress = Progress.model_validate(read_progress(store, run_id) or {})
    if not isinstance(progress.updated_at, float | int) or progress.updated_at < since:
        progress = Progress()
    write_progress(store, run_id, progress.model_copy(update={"phase": phase, "error": error, "updated_at": time.time()}))


#: The phase of a run ``tether cancel`` stopped (local runs only: the operator's phases are tether.api.Phase).
CANCELLED = "Cancelled"


def _attempts(
    request_file: str, store: str, env: dict[str, str], kill_after: int, retries: int, *, warm: bool = True
) -> tuple[int, Outcome | None]:
    """Run attempts until one ends for good; the exit code and the last attempt's outcome.

    With ``warm``, while an attempt runs the next one's process is already started and waiting
    (``tether exec --warm``), so a retry does not pay for Python, Flyte and the framework again."""
    code, outcome = EXIT_RECOVERABLE, None
    last = retries + 1
    command = [sys.executable, "-m", "tether", "exec", request_file, "--store", store]

    def start(attempt: int) -> subprocess.Popen[str]:
        attempt_env = dict(env)
        if kill_after and attempt == 1:
            attempt_env[KILL_AFTER_STEP_ENV] = str(kill_after)
        extra = ["--warm"] if warm else []
        return subprocess.Popen(
            command + extra,
            env=attempt_env,
            stdin=subprocess.PIPE if warm else None,
            stdout=subprocess.PIPE,
            text=True,
            process_group=0,  # the terminal's Ctrl-C reaches tether run only, which passes one on
        )

    spare: subprocess.Popen[str] | None = None
    ended: list[subprocess.Popen[str]] = []
    running: list[subprocess.Popen[str]] = []
    signals: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        """Ctrl-C or SIGTERM: pass one signal to the running attempt (which stops cleanly; a
        second one stops it at once) and start no further attempt."""
        signals.append(signum)
        for proc in running:
            try:
                proc.send_signal(signum)
            except ProcessLookupError:
                pass

    handled = (signal.SIGINT, signal.SIGTERM) if threading.current_thread() is threading.main_thread() else ()
    previous = {sig: signal.signal(sig, forward) for sig in handled}
    try:
        for attempt in range(1, last + 1):
            if signals:
                return EXIT_INTERRUPTED, outcome  # stopped between two attempts
            print(f"attempt {attempt}:", flush=True)
            proc, spare = spare or start(attempt), None
            running[:] = [proc]
            if warm and attempt < last:
                spare = start(attempt + 1)  # imports beside this attempt, ready before it ends
            outcome = _stream(proc, GO + "\n" if warm else None)
            ended.append(proc)
            # Once its outcome is printed the attempt is over (it closes its output, then exits with
            # that code): waiting for the exit would add the kernel's teardown of its memory.
            code = outcome.exit_code if outcome else proc.wait()
            worker = outcome.warm_worker if outcome and attempt > 1 else None
            if worker:
                print(
                    f"  (ran in the worker started beside attempt {attempt - 1}, ready {worker['ready_before_go_ms'] / 1000:.1f} s before it was needed)"
                )
            running.clear()
            if signals and code != EXIT_SUCCEEDED:
                return EXIT_INTERRUPTED, outcome  # stopped by the user: no further attempt
            if attempt_end(code) not in (AttemptEnd.RECOVERABLE, AttemptEnd.STORE_UNREACHABLE):
                return code, outcome  # interrupted too: here only the user stops an attempt
            again = "starting it again — finished steps will replay" if attempt < last else f"no retries left ({retries})"
            if code < 0:
                print(f"  the agent process died (signal {-code}); {again}\n")
            elif code in (EXIT_RECOVERABLE, EXIT_STORE_UNREACHABLE):
                why = f": {outcome.error}" if outcome and outcome.error else ""
                what = "recoverable failure" if code == EXIT_RECOVERABLE else "the store did not answer"
                print(f"  {what}{why}; {again}\n")
            else:
                print(f"  the agent process exited with code {code}; {again}\n")
        return code, outcome
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if spare is not None:  # not needed; it ran no agent or tool code, only imports
            spare.kill()
            spare.communicate()
        for proc in ended:
            proc.wait()


def _stream(proc: subprocess.Popen[str], go: str | None) -> Outcome | None:
    """Tell a warm worker to go, and print the attempt's lines as they come, to its end; its
    outcome line (printed last), or None if it died before printing one."""
    assert proc.stdout is not None
    if go is not None and proc.stdin is not None:
        try:
            proc.stdin.write(go)
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it died before its turn: its exit status says how
    outcome, held = None, ""
    with proc.stdout:
        for line in proc.stdout:  # a line as soon as the attempt prints it
            print(held, end="")  # a line like an outcome that was not the last one after all
            outcome = _outcome(line) if line.startswith("{") else None
            held = line if outcome is not None else ""
            if outcome is None:
                print(line, end="")
    return outcome


def _outcome(line: str) -> Outcome | None:
    """The outcome ``tether exec`` prints last, or None if the attempt died before printing it."""
    try:
        return Outcome.from_json(line)
    except (ValueError, KeyError, TypeError):
        return None


#: The phase the run is in after ``tether run`` exits, by how its exit code reads (else Failed).
PHASE_OF_END = {AttemptEnd.SUCCEEDED: "Succeeded", AttemptEnd.SUSPENDED: "AwaitingApproval", AttemptEnd.INTERRUPTED: "Interrupted"}


def _summary(
    store: str, run_id: str, code: int, final: int, outcome: Outcome | None, started: float, cancel: dict[str, Any] | None = None
) -> None:
    """What the run did; ``code`` is the last attempt's (negative: killed by that signal),
    ``final`` the exit code of ``tether run``; ``cancel``: who cancelled it (``tether cancel``)."""
    progress = read_progress(open_store(store), run_id) or {}
    if not isinstance(progress.get("updatedAt"), (int, float)) or progress["updatedAt"] < started:
        progress = {}  # written by an earlier invocation: its figures are not this run's
    steps, usage = progress.get("steps", {}), progress.get("usage", {})
    cli = command_name()
    end = attempt_end(code)
    output = outcome.figures.output if outcome and outcome.figures else None
    error = outcome.error if outcome else None
    print()
    if cancel is not None:
        print(f"Cancelled{_by(cancel)} ({cli} cancel): tool calls that were running finished and were recorded.")
        print(f"  The run is not resumed; {cli} run MANIFEST --run-id NEW starts a new one.")
    elif end is AttemptEnd.SUCCEEDED:
        print("Answer:\n  " + (progress.get("result") or output or "").replace("\n", "\n  "))
    elif end is AttemptEnd.SUSPENDED:
        for a in progress.get("approvals", []):
            if not a.get("decision"):
                print(f"Waiting for approval {a['id']}: {a['prompt']}")
                print(f"  approve:  {cli} approve {run_id} {a['id']} --yes")
                print(f"  decline:  {cli} approve {run_id} {a['id']} --no --reason '...'")
                print("  then run the same command again to continue (finished steps replay).")
    elif end is AttemptEnd.INTERRUPTED:
        print(f"Interrupted ({error or 'stopped'}): tool calls that were running finished and were recorded.")
        print("  Run the same command again to resume (finished steps replay).")
    else:
        died = f"the agent process died (signal {-code})" if code < 0 else f"exit code {code}"
        print(f"Failed: {error or progress.get('error') or died}")
    if steps and progress.get("attempt"):  # attempt 0: the agent never started, nothing to count
        print(
            f"\nSummary (last attempt {progress.get('attempt')}): model turns {steps['modelLive']} live / {steps['modelReplayed']} replayed, "
            f"tools {steps['toolLive']} live / {steps['toolReplayed']} replayed; "
            f"tokens {usage.get('liveTokens', 0)} live / {usage.get('replayedTokens', 0)} replayed; "
            f"cost ${usage.get('liveCostUSD', 0):.6f}, saved by replay ${usage.get('savedUSD', 0):.6f}{unknown_cost_note(usage)}"
        )
        print(f"  {run_spend_note(usage)}")
        if usage.get("frameworkCostUSD") is not None:
            print(f"  the framework's own cost figure (replayed turns included): ${usage['frameworkCostUSD']:.6f}")
        if steps.get("normalisedParts"):
            print(f"  normalised {steps['normalisedParts']} volatile parts of model requests (left out of fingerprints)")
        if d := steps.get("firstDivergence"):
            what = "model turn" if d.get("kind") == "model" else "tool call"
            print(
                f"  first divergence: step {d.get('step')} of attempt {d.get('attempt')} sent a {what} the journal does not hold "
                f"(fingerprint {str(d.get('fingerprint'))[:16]}…) while recorded {d.get('kind')} steps were left unused: "
                "from there on the run went live instead of replaying"
            )
    phase = CANCELLED if cancel is not None else PHASE_OF_END.get(attempt_end(final), "Failed")
    last = {"run_id": run_id, "exit_code": final, "phase": phase}
    if code < 0:
        last["signal"] = -code  # the last attempt was killed; tether run exits 1
    print(json.dumps(last))
