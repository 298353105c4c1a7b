"""``tether exec REQUEST.json --store URL``: one attempt of an AgentRun, as a Flyte local
execution. Executors (the operator's local executor, ``tether run``) start it and read the exit
code: 0 succeeded, 1 recoverable (start again), 2 terminal, 3 suspended awaiting approval, 4 the
store did not answer (start again; not counted against retries); the
last stdout line is the outcome (:class:`tether.contract.Outcome`, as JSON).

The request is read and parsed once, here, and handed to :func:`tether.entrypoint.run_here` as
the object; the typed outcome comes back and is written once, here.

Secrets (``tether.secrets``) are read first, from ``$TETHER_SECRETS_DIR`` or ``$TETHER_SECRETS``
(removed from the environment then), before any agent or tool module is imported. With ``$TETHER_REQUEST_SHA256`` set (the Kubernetes
executor sets it in the pod spec) a request file with another hash is refused, exit 2.

``--warm`` starts a worker for an attempt that may come later (``tether run`` starts one beside
each attempt, for its retry): it reads its secrets and the request, imports Flyte, the runtime
task and the framework's adapter, runs one no-op Flyte task (Flyte's first local run sets up
what every later one reuses) and the adapter's ``warm_up`` (the framework's first-use costs), then waits for a line on stdin. ``go`` runs the attempt in this
already started process; end of input exits with code 0 without running anything. No tool or
agent module is imported before ``go``.

``--standby FILE`` is the same warm start for a standby pod (the Kubernetes executor's
``spec.standby``): instead of stdin it waits until FILE holds anything (a downward API file of
the pod's ``tether.dev/go`` annotation, which the operator sets once the attempt before it has
ended), then runs the attempt. A FILE that holds something from the start (a pod created told to
go: the run's first) runs the attempt at once, without the warm-up. The journal's attempt claim,
not this signal, keeps two attempts from writing at once.

``--warm-pod FRAMEWORK`` is a warm pod's (the Kubernetes executor's ``executor.warmPods``): the
request is not known yet — REQUEST is a downward API file of the pod's ``tether.dev/request``
annotation, empty until a run claims the pod — so it warms up FRAMEWORK, waits until REQUEST holds
the claiming run's request, then runs that attempt. Unclaimed for ``--idle-seconds`` (or stopped),
it exits with 130 (interrupted) without running anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import os
import sys
import time
from pathlib import Path

from .. import secrets as tether_secrets
from .. import stopping
from ..contract import EXIT_INTERRUPTED, EXIT_SUCCEEDED, EXIT_TERMINAL, PROGRESS_ENV, PROVIDER_KEY_ENV, ExecRequest
from . import parser, request_is_the_executors, secrets_or_refusal, told, wait_for

#: What a warm worker waits for on stdin before it runs its attempt.
GO = "go"


def main(argv: list[str]) -> int:
    started = time.time()
    # Start-up allocates hundreds of thousands of objects (the runtime's, Flyte's and the
    # framework's modules and models) and frees next to none: no collections until the framework
    # is imported (~15 % of a runner pod's CPU to its first model request, benchmarks/pod_start.py).
    gc.disable()
    stopping.install()  # SIGINT/SIGTERM: a clean stop, not a traceback (tether.stopping)
    secrets = secrets_or_refusal("tether exec")
    if secrets is None:
        return EXIT_TERMINAL
    p = parser("exec", "One attempt of an AgentRun request, as a Flyte local execution.", exit_codes=True)
    p.add_argument("request", help="exec request JSON file ('-' for stdin)")
    p.add_argument("--store", required=True, help="store URL: a directory, file:///dir or s3://bucket/prefix?endpoint_url=...")
    p.add_argument("--progress", action="store_true", help="print a line per step")
    p.add_argument(
        "--warm",
        action="store_true",
        help=f"start now, import everything, then wait for '{GO}' on stdin before running the attempt (end of input: exit 0)",
    )
    p.add_argument(
        "--standby",
        metavar="FILE",
        help="like --warm, but wait until FILE is not empty (a standby pod: the operator's go) instead of reading stdin",
    )
    p.add_argument(
        "--warm-pod",
        metavar="FRAMEWORK",
        help="a warm pod: import FRAMEWORK, then wait until the request file is not empty (a run claimed the pod)",
    )
    p.add_argument("--idle-seconds", type=float, default=600.0, help="--warm-pod: exit 130 when not claimed for this long")
    args = p.parse_args(argv)
    if sum(1 for way in (args.warm, args.standby, args.warm_pod) if way) > 1:
        p.error("--warm, --standby and --warm-pod: one of them")
    if (args.warm or args.warm_pod) and args.request == "-":
        p.error("--warm and --warm-pod wait before running: give the request as a file")
    worker: dict[str, float] | None = None
    if args.warm_pod:  # no request yet: warm up the framework, then wait for a run's claim
        import flyte

        flyte.init()
        ready = _warmed_up(args.warm_pod)
        print("tether exec: a warm pod (imports done), waiting for a run to claim it", file=sys.stderr, flush=True)
        if not wait_for(Path(args.request), ready + args.idle_seconds):
            return EXIT_INTERRUPTED  # stopped, or nobody claimed it: not used
        worker, go_cpu = _went(started, ready)
    data = sys.stdin.buffer.read() if args.request == "-" else Path(args.request).read_bytes()
    if not request_is_the_executors(data, args.request, "tether exec"):  # swapped or squatted
        return EXIT_TERMINAL
    text = data.decode()
    try:
        request = ExecRequest.model_validate_json(text)
    except ValueError as e:
        print(f"tether exec: invalid request: {e}", file=sys.stderr)
        return EXIT_TERMINAL
    if args.warm_pod and request.spec.framework != args.warm_pod:
        print(f"tether exec: this warm pod is {args.warm_pod}'s; the request is {request.spec.framework}'s", file=sys.stderr)
        return EXIT_TERMINAL
    tether_secrets.use(secrets, PROVIDER_KEY_ENV.get(request.spec.model.provider))

    import flyte

    from ..entrypoint import run_here, step_printer
    from ..progress import StepLines, read_progress
    from ..stores import open_store

    log = StepLines(open_store(args.store), request.run_id)  # what `tether logs` shows
    on_step = step_printer(sys.stdout if args.progress or os.environ.get(PROGRESS_ENV) == "1" else None, log)
    # A waiting pod imports the framework first: if it was told to go meanwhile (created told to go:
    # a spec.standby run's first attempt; or started beside a pod being deleted that has stopped
    # since), it runs at once: the rest of the warm-up would only delay its first turn.
    if args.standby and not told(Path(args.standby)):
        _import_framework(request.spec.framework)
    if args.warm or (args.standby and not told(Path(args.standby))):
        flyte.init()
        ready = _warmed_up(request.spec.framework)
        if args.standby:
            print(f"tether exec: standing by (imports done), waiting for {args.standby}", file=sys.stderr, flush=True)
            wait_for(Path(args.standby))
        elif sys.stdin.readline().strip() != GO:
            return EXIT_SUCCEEDED  # not needed: the run ended without this attempt
        if stopping.requested():
            return EXIT_INTERRUPTED
        worker, go_cpu = _went(started, ready)
    elif not args.warm_pod:  # (a warm pod was warmed up before it was claimed)
        flyte.init()
        _import_framework(request.spec.framework)
        gc.freeze()  # the modules' objects live as long as the process: later collections skip them
        gc.enable()
    outcome = run_here(request, args.store, on_step)
    if worker is not None:
        # CPU time from 'go' to the outcome: what the retry costs apart from waiting for a core.
        worker["cpu_ms_after_go"] = round(1000 * (time.process_time() - go_cpu), 1)
        outcome = dataclasses.replace(outcome, warm_worker=worker)
    if log.attempt == 0:  # no step: the number the journal claimed is in this attempt's progress
        progress = read_progress(open_store(args.store), request.run_id) or {}
        if (progress.get("updatedAt") or 0) >= (worker["go"] if worker else started):
            log.attempt = int(progress.get("attempt") or 0)
    log.end(f"{outcome.status} (exit code {outcome.exit_code})" + (f": {outcome.error}" if outcome.error else ""))
    print(outcome.to_json(), flush=True)
    if outcome.error:
        print(f"tether exec: {outcome.error}", file=sys.stderr)
    # The attempt is over and everything it wrote is durable (the journal closed, the outcome
    # printed): leave without the interpreter's teardown of the framework's modules and heap
    # (measured: 40 ms of a warm retry's 106 ms on an idle machine; 2.8 s of 3.1 s loaded).
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    # Pipes closed first: the kernel frees a dying process's memory before its files, so a parent
    # reading to the end of output (tether run) has the outcome without waiting for that (~20 ms).
    os.closerange(0, 3)
    os._exit(outcome.exit_code)


def _went(started: float, ready: float) -> tuple[dict[str, float], float]:
    """A waiting process told to go now: what the parent and tests read (it was started, and
    ready, before its turn) and its CPU time at the go."""
    go = time.time()
    return {
        "pid": os.getpid(),
        "started": started,
        "ready": ready,
        "go": go,
        "ready_before_go_ms": round(1000 * (go - ready), 1),
    }, time.process_time()


def _warmed_up(framework: str) -> float:
    """``_warm_up``, then the heap as it is frozen: when it was ready."""
    _warm_up(framework)
    # What is here now lives as long as the process: the collector need not walk it again
    # during the attempt (a full collection of the SDK's and Flyte's heap: milliseconds).
    gc.collect()
    gc.freeze()
    gc.enable()
    return time.time()


def _import_framework(framework: str) -> None:
    """The framework's adapter (its imports) now, while the collector is off; a failure is left for
    the attempt to report."""
    from ..agent import load_adapter

    with contextlib.suppress(Exception):
        load_adapter(framework)


def _warm_up(framework: str) -> None:
    """What a later attempt would otherwise pay for after its start: the framework's imports and
    first use, and Flyte's first local run. A failure here is left for the attempt to report."""
    import flyte

    from ..agent import load_adapter
    from ..entrypoint import warm_up

    try:
        load_adapter(framework).warm_up()
    except Exception:  # e.g. no adapter in this environment: the attempt says so
        pass
    flyte.run(warm_up).outputs()
