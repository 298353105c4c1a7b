"""One AgentRun, from creation to a terminal phase: accept, submit, follow, settle approvals.

`RunLoop.run()` is the body of the kopf daemon that exists for every unfinished AgentRun. It is
sequential on purpose (one writer of the run's status, no races between handlers):

    accept   check the tools, Secrets and resources the spec names; wait while something is
             missing (condition Accepted=False with the exact reason), fail if invalid
    submit   under the execution name derived from the uid (idempotent: a restarted operator
             adopts its execution instead of starting a second one)
    follow   mirror the executor's state and the runtime's progress into status, at most one
             patch per `status_interval_seconds` except on phase changes
    approve  while suspended: apply timeouts, resume when all decided (a person's decision is an
             AgentApproval, recorded in the store by approvals.py; annotations are not honoured)

The finalizer `tether.dev/cleanup` is held only while the executor runs something (a pod, a
process) that deleting the run must stop: not while waiting to be accepted, not while suspended
awaiting approval, not once finished. So with the operator gone (uninstalled), runs and their
namespaces can still be deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError

from tether import approvals as tether_approvals
from tether.api import (
    GROUP,
    VERSION,
    AgentRunSpec,
    AgentRunStatus,
    AgentToolSpec,
    Approval,
    ApprovalStatus,
    ManifestError,
    Phase,
    parse_duration,
    read_spec,
    validation_problems,
)
from tether.contract import AGENT_MODULES_ENV, LEGACY_APPROVAL_ANNOTATIONS, RUN_LABEL, RUN_UID_LABEL, ExecRequest, Progress, progress_key
from tether.secrets import Secrets
from tether.stores import Store

from . import conditions as C
from . import kube, metrics
from .checks import Problem, check_run
from .cloudevents import APPROVAL_DECIDED, APPROVAL_REQUESTED, RUN_TYPE, Emitter, run_source
from .conditions import Reason
from .executors.base import (
    AttemptingExecutor,
    ExecutionState,
    ExecutionStatus,
    Executor,
    SecretFile,
    Submission,
    execution_name,
    unsupported,
)
from .placement import placement, propagated
from .settings import Settings
from .times import epoch

log = logging.getLogger(__name__)

FINISHED = (Phase.SUCCEEDED.value, Phase.FAILED.value)
FINALIZER = "tether.dev/cleanup"
MODEL_KEY_FILE = "model/apiKey"
RESULT_LIMIT = 4096


def _iso(value: Any) -> str | None:
    """Epoch seconds or an ISO string as RFC 3339 (what metav1.Time looks like)."""
    if value in (None, ""):
        return None
    if isinstance(value, (int, float)):
        value = datetime.fromtimestamp(value, UTC)
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return str(value)


def finished_at(status: Mapping[str, Any]) -> float | None:
    """When the run finished (epoch seconds): status.completionTime, else when its Ready or
    Stalled condition last turned True; None while it has not."""
    done = epoch(status.get("completionTime"))
    if done is None:
        conditions = list(status.get("conditions") or [])
        final = [
            c for c in (C.get_condition(conditions, C.READY), C.get_condition(conditions, C.STALLED)) if c and c.get("status") == "True"
        ]
        done = epoch(final[0].get("lastTransitionTime")) if final else None
    return done


async def expire(body: kopf.Body, stopped: Any, logger: logging.Logger | logging.LoggerAdapter[Any] = log) -> None:
    """Delete a finished run `spec.ttlSecondsAfterFinished` seconds after it finished, like a
    Job's TTL. The delete names the run's uid: a run created again under the same name (by a
    GitOps tool, say) is never deleted in its place. An operator that was down deletes what
    expired meanwhile as soon as it is back."""
    ttl = body.spec.get("ttlSecondsAfterFinished")
    finished = finished_at(body.status)
    if ttl is None or finished is None or body.status.get("phase") not in FINISHED:
        return
    remaining = finished + ttl - time.time()
    if remaining > 0:
        await stopped.wait(remaining)
        if stopped:
            return
    meta = body.meta
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{meta['namespace']}/agentruns/{meta['name']}"
    if await kube.delete(path, uid=meta["uid"]):
        message = f"{body.status.get('phase')} {int(time.time() - finished)}s ago, spec.ttlSecondsAfterFinished is {ttl}: deleted"
        kopf.event(body, type="Normal", reason=Reason.EXPIRED, message=message)
        logger.info("%s", message)


def secret_files(spec: AgentRunSpec, tools: dict[str, AgentToolSpec]) -> list[SecretFile]:
    """Where each Secret key the run needs appears in the runner's secrets directory:
    `model/apiKey` and `tools/<AgentTool>/<ENV>`, an MCP server's headers as
    `tools/<AgentTool>/<Header>` (each tool reads only its own)."""
    files = []
    ref = spec.model.api_key_secret_ref
    if ref is not None:
        files.append(SecretFile(ref.name, ref.key, MODEL_KEY_FILE))
    for name, tool in sorted(tools.items()):
        files += [SecretFile(e.secret_key_ref.name, e.secret_key_ref.key, f"tools/{name}/{e.name}") for e in tool.env or []]
        headers = tool.mcp.headers if tool.mcp is not None else None
        files += [SecretFile(h.secret_key_ref.name, h.secret_key_ref.key, f"tools/{name}/{h.name}") for h in headers or []]
    return files


def approval_policy(tools: dict[str, AgentToolSpec], tool: str) -> Approval | None:
    """The approval settings of the run's tool named `tool`: its AgentTool's, or for a tool of an
    MCP server (named as the server names it) the AgentTool that allows it."""
    spec = tools.get(tool)
    if spec is None or spec.mcp is not None:
        spec = next((t for t in tools.values() if t.mcp is not None and tool in t.mcp.tools), None)
    return spec.approval if spec is not None else None


# The states in which the store changes: an attempt runs (its progress) or waits for decisions.
_LOOKED_AT = (ExecutionState.RUNNING, ExecutionState.SUSPENDED)


class Cadence:
    """When to read a run's records in the store again: `fast` seconds after a look that found a
    change, twice as long after each look that found none, up to `slow`. Runs move in bursts (a
    turn, its tool calls, the next turn): followed closely while they move, a store request every
    `slow` seconds while one waits on a slow model, a long tool or a person. (Growing by half
    instead would show a moving run's steps sooner, ~1.3 s p95 rather than ~1.9 s, simulated,
    but read a run 8 times in the 40 s after a change rather than 7: 0.2 requests/s, the budget.)"""

    def __init__(self, fast: float, slow: float) -> None:
        self.fast, self.slow = fast, max(fast, slow)
        self.interval = self.fast
        self.at = 0.0  # when the next look is due (monotonic)

    def looked(self, changed: bool) -> None:
        self.interval = self.fast if changed else min(self.interval * 2, self.slow)
        self.at = time.monotonic() + self.interval

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def due(self) -> bool:
        return time.monotonic() >= self.at


class RunLoop:
    def __init__(
        self,
        *,
        body: kopf.Body,
        settings: Settings,
        executor: Executor,
        store: Store,
        store_url: str = "",
        logger: logging.Logger | logging.LoggerAdapter[Any] = log,
        events: Emitter | None = None,
        wake: asyncio.Event | None = None,
    ) -> None:
        self.body = body  # kopf keeps this view live: annotations set later show up here
        self.settings = settings
        self.executor = executor
        self.store = store  # the run's namespace's store
        self.store_url = store_url
        self.logger = logger
        self._held = FINALIZER in (body.meta.get("finalizers") or [])
        meta = body.meta
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.uid: str = meta["uid"]
        self.generation: int = meta.get("generation", 1)
        self.exec_name = execution_name(self.uid)
        self.status: dict[str, Any] = json.loads(json.dumps(dict(body.get("status") or {})))
        self.tools: dict[str, AgentToolSpec] = {}
        self.run_secrets = Secrets()  # for the runtime only: never logged, never in status
        self.secrets: list[str] = []  # values to scrub from anything written
        self._sent: dict[str, Any] | None = None
        self._sent_at = 0.0
        self._withheld = False  # a status change publish() held back (status_interval_seconds)
        self._unread = False  # the last progress read found the store not answering
        self.wake = wake  # set when an AgentApproval for this run was recorded
        self._announced: set[str] = set(a["id"] for a in self.status.get("approvals") or [] if a.get("id"))
        self._ignored: dict[str, str] = {}  # approval annotations already warned about
        # CloudEvents: what status already said when this loop started is not sent again
        self.events = events
        self._emitted: set[str] = {f"{self.uid}/{self.status.get('phase')}/{self.status.get('attempts') or 0}"}
        for a in self.status.get("approvals") or []:
            self._emitted |= {f"{self.uid}/approval/{a.get('id')}/requested"} | (
                {f"{self.uid}/approval/{a.get('id')}/decided"} if a.get("decision") else set()
            )
        spec = body.get("spec") or {}
        retries = spec.get("retries", 2)
        self.account = metrics.RunAccount(
            self.namespace,
            str(spec.get("framework") or ""),
            executor.kind,
            self.status,
            meta.get("creationTimestamp"),
            retries=retries if isinstance(retries, int) else 2,
            exit_codes=isinstance(executor, AttemptingExecutor),
        )

    # ------------------------------------------------------------------------------ status

    def _scrub(self, text: str) -> str:
        for value in self.secrets:
            if value and len(value) >= 4:
                text = text.replace(value, "***")
        return text

    def _conditions(self) -> list[dict[str, Any]]:
        return list(self.status.get("conditions") or [])

    def _set(self, type_: str, value: bool, reason: str, message: str = "") -> None:
        self.status["conditions"] = C.set_condition(self._conditions(), type_, value, reason, self._scrub(message), self.generation)

    def _kstatus(self, **kw: tuple[str, str]) -> None:
        kw = {k: (r, self._scrub(m)) for k, (r, m) in kw.items()}
        self.status["conditions"] = C.kstatus(self._conditions(), generation=self.generation, **kw)

    async def publish(self, urgent: bool = False) -> None:
        """Patch status if it changed; at most once per interval unless urgent."""
        self.status["observedGeneration"] = self.generation
        doc = AgentRunStatus.model_validate(self.status).wire()
        if doc == self._sent:
            self._withheld = False
            return
        if not urgent and time.monotonic() - self._sent_at < self.settings.timing.status_interval_seconds:
            self._withheld = True  # the loop comes back when the interval is over; the newest state is sent then
            return
        # Shielded: a finished status makes kopf cancel this daemon, maybe before the patch's
        # answer is read; the patch is counted (a finish too, and its CloudEvents sent) only once
        # written, and always then.
        await asyncio.shield(self._patch(doc))

    async def _patch(self, doc: dict[str, Any]) -> None:
        await kube.patch_status("agentruns", self.namespace, self.name, doc)
        metrics.STATUS_PATCHES.inc()
        if doc.get("phase") in FINISHED:
            failed = C.get_condition(doc.get("conditions") or [], C.FAILED) or {}
            reason = failed.get("reason") if doc["phase"] == Phase.FAILED.value else Reason.SUCCEEDED
            self.account.finish(doc["phase"], str(reason or doc["phase"]))
        self._sent, self._sent_at, self._withheld = doc, time.monotonic(), False
        if self.events is not None:
            self._cloud_events(self.events, doc)

    def _cloud_events(self, events: Emitter, status: dict[str, Any]) -> None:
        """The transitions and approvals this status shows that were not sent yet (cloudevents.py)."""
        source = run_source(self.namespace, self.name)
        phase, attempts = status.get("phase"), status.get("attempts") or 0
        id_ = f"{self.uid}/{phase}/{attempts}"
        if phase and id_ not in self._emitted:
            self._emitted.add(id_)
            kstatus = [C.get_condition(status.get("conditions") or [], t) for t in (C.RECONCILING, C.READY, C.STALLED)]
            said: dict[str, Any] = next((c for c in kstatus if c and c.get("status") == "True"), {})
            data = {"namespace": self.namespace, "name": self.name, "uid": self.uid, "phase": phase, "attempts": attempts,
                    "reason": said.get("reason"), "message": said.get("message"), "usage": status.get("usage"),
                    "completionTime": status.get("completionTime")}  # fmt: skip
            events.emit(RUN_TYPE + phase, source, self.name, id_, data)
        for approval in status.get("approvals") or []:
            for what, type_ in (("requested", APPROVAL_REQUESTED), ("decided", APPROVAL_DECIDED)):
                id_ = f"{self.uid}/approval/{approval['id']}/{what}"
                if id_ in self._emitted or (what == "decided" and not approval.get("decision")):
                    continue
                self._emitted.add(id_)
                events.emit(type_, source, self.name, id_, {"namespace": self.namespace, "run": self.name, "uid": self.uid, **approval})

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        kopf.event(self.body, type="Warning" if warning else "Normal", reason=reason, message=self._scrub(message)[:1024])

    def _phase(self, phase: Phase) -> bool:
        """Set the phase; True if it changed (an urgent patch and an Event)."""
        changed = self.status.get("phase") != phase.value
        self.status["phase"] = phase.value
        return changed

    # ------------------------------------------------------------------------------- steps

    async def run(self, stopped: Any = None) -> None:
        if self.status.get("phase") in FINISHED:
            return
        self._warn_annotations()
        try:
            spec = read_spec(AgentRunSpec, dict(self.body.spec))
        except ManifestError as exc:  # past the apiserver, refused by the runtime's model: say which field
            self._set(C.ACCEPTED, False, Reason.INVALID_SPEC, str(exc))
            return await self._fail(Reason.FAILED, f"invalid spec: {exc}", Reason.INVALID_SPEC)
        if not await self.accept(spec, stopped):
            return
        await self.follow(await self.submit(spec), stopped)

    async def accept(self, spec: AgentRunSpec, stopped: Any) -> bool:
        """Wait until everything the spec names exists; False if the run cannot go on."""
        last_reason = last_seen = None
        delay = self.settings.timing.recheck_seconds
        while not stopped:
            resolved = await check_run(
                self.namespace,
                spec,
                self.settings,
                read_secrets=self.executor.reads_secrets,
                created=self.body.meta.get("creationTimestamp"),
            )
            refused = unsupported(spec, resolved.tools, self.executor.supports)
            if refused:
                resolved.problems.append(
                    Problem(
                        Reason.UNSUPPORTED_BY_EXECUTOR,
                        f"the {self.executor.kind} executor does not honour {', '.join(refused)} ({self.executor.refusal_hint})",
                        terminal=True,
                    )
                )
            if not resolved.problems:
                self.tools, self.run_secrets = resolved.tools, resolved.secrets
                self.secrets = self.run_secrets.values()
                was_accepted = C.is_true(self._conditions(), C.ACCEPTED)
                self._set(C.ACCEPTED, True, Reason.ACCEPTED, "tools, Secrets and resources resolved")
                if not was_accepted:
                    self.event(Reason.ACCEPTED, "tools, Secrets and resources resolved")
                return True
            first = next((p for p in resolved.problems if p.terminal), resolved.problems[0])
            message = "; ".join(p.message for p in resolved.problems)
            if any(p.terminal for p in resolved.problems):
                self._set(C.ACCEPTED, False, first.reason, message)
                await self._fail(first.reason, message)
                return False
            self._set(C.ACCEPTED, False, first.reason, message)
            self._kstatus(reconciling=(first.reason, f"waiting: {message}"))
            changed = self._phase(Phase.PENDING)
            await self.publish(urgent=changed or first.reason != last_reason)
            if first.reason != last_reason:
                self.event(first.reason, f"waiting: {message}", warning=True)
                last_reason = first.reason
            # Back off while nothing changes (1000 waiting runs must not hammer the apiserver).
            timing = self.settings.timing
            delay = min(delay * 2, timing.max_recheck_seconds) if first.reason == last_seen else timing.recheck_seconds
            last_seen = first.reason
            await asyncio.sleep(delay)
        return False

    async def submit(self, spec: AgentRunSpec) -> ExecutionStatus:
        first_time = not (self.status.get("execution") or {}).get("name")
        request = ExecRequest(run_id=self.uid, namespace=self.namespace, name=self.name, spec=spec, tools=self.tools)
        where = placement(spec.resources, spec.node_selector, spec.tolerations, self.settings.gpu_node_pools)
        labels = propagated(self.body.meta.get("labels"), self.settings.propagated_labels)
        labels.update({RUN_LABEL: self.name, RUN_UID_LABEL: self.uid})
        started = time.monotonic()
        suspended = self.status.get("phase") == Phase.AWAITING_APPROVAL.value
        if not suspended:
            await self._hold(True)
        ex = await self.executor.submit(
            Submission(
                name=self.exec_name,
                request=request,
                secrets=self.run_secrets,
                env=self._runtime_env(),
                retries=spec.retries,
                timeout_seconds=spec.timeout_seconds,
                attempts=int(self.status.get("attempts") or 0),
                fresh=first_time,
                suspended=suspended,
                node_selector=where.node_selector,
                tolerations=where.tolerations,
                labels=labels,
                store_url=self.store_url,
                secret_files=[] if self.executor.reads_secrets else secret_files(spec, self.tools),
            )
        )
        metrics.SUBMIT_SECONDS.observe(time.monotonic() - started)
        if first_time:
            metrics.SUBMISSIONS.inc()
        self.status["execution"] = {"executor": self.executor.kind, "name": self.exec_name, "url": ex.url}
        self.status.setdefault("startTime", C.now())
        self._mirror(ex, None, None)
        await self.publish(urgent=True)
        if first_time:
            self.event(Reason.SUBMITTED, f"submitted to the {self.executor.kind} executor as {self.exec_name}")
        else:
            self.logger.info("adopted execution %s (%s)", self.exec_name, ex.state.value)
        return ex

    async def follow(self, ex: ExecutionStatus, stopped: Any) -> None:
        """Mirror the execution into status until it ends. The store is read when something can
        have changed there (`Cadence`): at once when the execution moves (an attempt starts or
        ends: a pod event, a process exit), then while an attempt runs (progress) or the run is
        suspended (approval decisions) at an interval that starts at `poll_seconds` after a change
        and doubles while nothing changes, up to `max_poll_seconds`; an AgentApproval for the run
        wakes it (`wake`). A queued execution (a pod Pending) writes nothing: nothing is read."""
        failures = ex.failures
        timing = self.settings.timing
        look = Cadence(timing.poll_seconds, timing.max_poll_seconds)
        at: tuple[ExecutionState, int, int] | None = None  # where the execution was at the last look
        progress: Progress | None = None
        requests: list[dict[str, Any]] = []
        while not stopped:
            await self._wait(ex, look)
            current = await self.executor.status(self.exec_name)
            if current is None:  # aborted under us (deletion): the finalizer takes it from here
                return
            ex = current
            where = (ex.state, ex.attempts, ex.failures)
            woken = self.wake is not None and self.wake.is_set()
            if where != at or woken or (ex.state in _LOOKED_AT and look.due()):
                if self.wake is not None:
                    self.wake.clear()
                fresh = await self._progress() if where != at or ex.state is ExecutionState.RUNNING else progress
                if ex.state.finished and self._unread:
                    # The result is in the store, not lost: a finished status without it would
                    # stay so for good (this loop ends with it). Say why and look again.
                    look.looked(False)
                    await self.publish()
                    await asyncio.sleep(look.remaining())
                    continue
                listed = await self._approvals() if ex.state is ExecutionState.SUSPENDED or (fresh and fresh.approvals) else []
                if ex.state is ExecutionState.SUSPENDED and listed is None:
                    look.looked(False)
                    continue  # the store did not answer; look again rather than guess
                changed = where != at or (fresh is not None and fresh != progress) or (listed or []) != requests
                look.looked(changed)
                at, progress, requests = where, fresh or progress, listed or []
                if ex.state is ExecutionState.SUSPENDED:
                    if not requests:  # exit 3 with nothing to decide: resuming would loop forever
                        self._failed(Reason.FAILED, "the runtime suspended without an approval request")
                        await self.executor.abort(self.exec_name, self.namespace)
                        await self._hold(False)
                        await self.publish(urgent=True)
                        return
                    requests = await self._settle(requests)
                    if not any(r.get("decision") is None for r in requests):
                        await self._hold(True)
                        await self.executor.resume(self.exec_name)
                        ex = await self.executor.status(self.exec_name) or ex
            if ex.failures > failures and not ex.state.finished:
                self.event(Reason.RETRYING, ex.message, warning=True)
                failures = ex.failures
            changed = self._mirror(ex, progress, requests)
            if ex.state.finished or ex.state is ExecutionState.SUSPENDED:
                # Nothing runs: deleting the run needs no cleanup. Before the status patch: a
                # finished status makes kopf stop this daemon.
                await self._hold(False)
            await self.publish(urgent=changed or ex.state.finished)
            if ex.state.finished:
                self.executor.forget(self.exec_name)
                return

    async def _wait(self, ex: ExecutionStatus, look: Cadence) -> None:
        """Until the execution may have changed, the next look is due, a status patch held back
        by `status_interval_seconds` may go, or (suspended) an AgentApproval wakes the run."""
        timeout = look.remaining() if ex.state in _LOOKED_AT else self.settings.timing.max_poll_seconds
        if self._withheld:
            timeout = min(timeout, max(0.0, self._sent_at + self.settings.timing.status_interval_seconds - time.monotonic()))
        if ex.state is ExecutionState.SUSPENDED and self.wake is not None:
            with contextlib.suppress(asyncio.TimeoutError):  # nothing runs: only a decision moves it
                await asyncio.wait_for(self.wake.wait(), timeout)
            return
        await self.executor.wait(self.exec_name, timeout)

    # ------------------------------------------------------------------------------ pieces

    def _runtime_env(self) -> dict[str, str]:
        """The cluster admin's agent allowlist, for the runtime to enforce too (the operator's
        check might be bypassed; unset, the runtime image's own declared agent modules), and the
        chart's OTEL_* settings (telemetry.otel) for the run's traces."""
        modules = self.settings.agent_modules
        return dict(self.settings.runner_otel) | ({} if modules is None else {AGENT_MODULES_ENV: ",".join(modules)})

    async def _hold(self, held: bool) -> None:
        """Hold the finalizer while the executor runs something, drop it when nothing runs."""
        if held != self._held:
            # shielded: kopf may cancel this daemon at any await once the run looks finished
            meta = dict(self.body.meta)  # kopf's view, as of the newest watch event: no GET when it is current
            await asyncio.shield(kube.set_finalizer("agentruns", self.namespace, self.name, FINALIZER, held, meta))
            self._held = held

    async def _progress(self) -> Progress | None:
        """The runtime's progress, or None. A document that cannot be read, or a store that does
        not answer (``self._unread``), never stops status from following the executor: it sets
        ProgressReadable=False and a Warning Event."""
        shown = (C.get_condition(self._conditions(), C.PROGRESS_READABLE) or {}).get("reason")
        try:
            data = await asyncio.to_thread(self.store.get, progress_key(self.uid))
        except Exception as exc:  # the store did not answer: look again next time, saying why meanwhile
            self.logger.warning("cannot read progress of %s: %s", self.uid, exc)
            message = f"the store does not answer ({type(exc).__name__}): the run's progress and result are read once it does"
            if shown != Reason.STORE_UNREACHABLE:
                self.event(Reason.STORE_UNREACHABLE, message, warning=True)
            self._set(C.PROGRESS_READABLE, False, Reason.STORE_UNREACHABLE, message)
            self._unread = True
            return None
        self._unread = False
        if data is None:
            if shown == Reason.STORE_UNREACHABLE:
                self._set(C.PROGRESS_READABLE, True, Reason.PROGRESS_READ, "the store answers again")
            return None
        try:
            progress = Progress.model_validate_json(data)
        except ValidationError as exc:  # a torn or newer-format record
            message = f"cannot read the runtime's progress at {progress_key(self.uid)}: {validation_problems(exc)[0]}"
            condition = C.get_condition(self._conditions(), C.PROGRESS_READABLE) or {}
            if condition.get("message") != self._scrub(message):
                self.event(Reason.PROGRESS_UNREADABLE, message, warning=True)
            self._set(C.PROGRESS_READABLE, False, Reason.PROGRESS_UNREADABLE, message)
            return None
        if C.get_condition(self._conditions(), C.PROGRESS_READABLE) is not None:
            self._set(C.PROGRESS_READABLE, True, Reason.PROGRESS_READ, "the runtime's progress is readable again")
        return progress

    async def _approvals(self) -> list[dict[str, Any]] | None:
        """The run's approval requests with decisions; None if the store cannot say (retry)."""
        try:
            return await asyncio.to_thread(tether_approvals.list_approvals, self.store, self.uid)
        except Exception as exc:
            self.logger.warning("cannot list approvals of %s: %s", self.uid, exc)
            return None

    async def _decide(self, request: dict[str, Any], approved: bool, by: str, reason: str | None) -> None:
        try:
            decision = await asyncio.to_thread(tether_approvals.decide, self.store, self.uid, request["id"], approved, by, reason)
            request["decision"] = {"approved": approved, "by": by, "reason": reason, "decided_at": decision.decided_at}
        except Exception as exc:  # decided meanwhile (e.g. `tether approve`): theirs stands
            self.logger.info("approval %s not recorded: %s", request["id"], exc)
            return
        verdict = "approved" if approved else "declined"
        self.event(Reason.APPROVAL_DECIDED, f"approval {request['id']} ({request.get('tool')}) {verdict} by {by}")

    def _warn_annotations(self) -> None:
        """Approval annotations decide nothing (anyone who may create or annotate the run could
        set them, naming any approver): say so, once per value, with what to do instead."""
        annotations = self.body.meta.get("annotations") or {}
        found = {k: str(annotations[k]) for k in LEGACY_APPROVAL_ANNOTATIONS if k in annotations}
        if found and found != self._ignored:
            self._ignored = found
            self.event(
                Reason.APPROVAL_ANNOTATION_IGNORED,
                f"annotations {', '.join(sorted(found))} are ignored: nothing was decided. An approver creates an "
                f"AgentApproval: tether approve {self.namespace}/{self.name} ID --yes (or kubectl create -f, see operator/README.md)",
                warning=True,
            )

    async def _settle(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Apply timeouts to pending requests (people decide with AgentApprovals, approvals.py)."""
        self._warn_annotations()
        for request in requests:
            if request.get("decision") is not None:
                continue
            policy = approval_policy(self.tools, request.get("tool") or "")
            requested = epoch(request.get("requestedAt"))
            if policy and policy.timeout and requested is not None and time.time() - requested >= parse_duration(policy.timeout):
                # A timeout approves only where the cluster allows it (accept() refuses such a tool otherwise).
                approve_it = policy.default_action == "approve" and self.settings.allow_auto_approve
                await self._decide(request, approve_it, "timeout", f"no decision within {policy.timeout}")
        return requests

    def _mirror(self, ex: ExecutionStatus, progress: Progress | None, requests: list[dict[str, Any]] | None) -> bool:
        """Fold the executor's state and the runtime's progress into status; True on a phase change."""
        s = self.status
        self.account.execution(ex.attempts, ex.failures, ex.retried, queued=ex.state is ExecutionState.QUEUED)
        if progress is not None:
            self.account.progress(progress)
        if requests:
            self.account.approvals(requests)
        s["attempts"] = max(ex.attempts, progress.attempt if progress else 0, int(s.get("attempts") or 0))
        if progress is not None:
            steps = progress.steps.wire()
            steps["turns"] = f"{progress.steps.model_live}/{progress.steps.model_replayed}"
            s["steps"] = steps
            s["usage"] = progress.usage.wire()
            if progress.mcp_tools:
                s["mcpTools"] = [t.wire() for t in progress.mcp_tools]
            if progress.result is not None:
                text = progress.result if isinstance(progress.result, str) else json.dumps(progress.result, default=str)
                s["result"] = {
                    "output": self._scrub(text)[:RESULT_LIMIT],
                    "truncated": progress.result_truncated or len(text) > RESULT_LIMIT,
                    "ref": progress_key(self.uid),
                }
        if requests:
            s["approvals"] = [self._approval_status(r) for r in requests]
        pending = [r for r in requests or [] if r.get("decision") is None]

        state = ex.state
        if state is ExecutionState.SUCCEEDED:
            changed = self._phase(Phase.SUCCEEDED)
            s.setdefault("completionTime", C.now())
            self._set(C.RUNNING, False, Reason.SUCCEEDED)
            self._set(C.AWAITING_APPROVAL, False, Reason.SUCCEEDED)
            self._set(C.SUCCEEDED, True, Reason.SUCCEEDED, "the agent finished")
            self._set(C.FAILED, False, Reason.SUCCEEDED)
            self._kstatus(ready=(Reason.SUCCEEDED, "the agent finished"))
            if changed:
                self.event(Reason.SUCCEEDED, f"the agent finished after {s['attempts']} attempt(s)")
            return changed
        if state in (ExecutionState.FAILED, ExecutionState.ABORTED):
            error = progress.error if progress else None
            if isinstance(error, dict):
                error = error.get("message") or json.dumps(error, default=str)
            if ex.reason:  # the executor knows why (an owned-object conflict, a pod that cannot start)
                return self._failed(ex.reason, ex.message)
            reason = Reason.RETRIES_EXHAUSTED if ex.failures > 0 and "exhausted" in ex.message else Reason.FAILED
            return self._failed(reason, str(error or ex.message or "the run failed"))
        if state is ExecutionState.SUSPENDED and pending:
            changed = self._phase(Phase.AWAITING_APPROVAL)
            ids = ", ".join(r["id"] for r in pending)
            message = f"waiting for approval of {ids}: an approver runs `tether approve {self.namespace}/{self.name} <id> --yes|--no` (an AgentApproval)"
            self._set(C.RUNNING, False, Reason.AWAITING_APPROVAL, "suspended; no process is held")
            self._set(C.AWAITING_APPROVAL, True, Reason.AWAITING_APPROVAL, message)
            self._kstatus(reconciling=(Reason.AWAITING_APPROVAL, message))
            for r in pending:
                if r["id"] not in self._announced:
                    self._announced.add(r["id"])
                    self.event(Reason.AWAITING_APPROVAL, f"approval {r['id']} for tool {r.get('tool')}: {r.get('prompt') or ''}")
            return changed
        if state is ExecutionState.RUNNING:
            changed = self._phase(Phase.RUNNING)
            self._set(C.RUNNING, True, Reason.RUNNING, ex.message)
            self._set(C.AWAITING_APPROVAL, False, Reason.RUNNING)
            self._kstatus(reconciling=(Reason.RUNNING, ex.message))
            if changed:
                self.event(Reason.RUNNING, ex.message or "running")
            return changed
        # queued (first start, a retry, or a resume after a decision)
        changed = self._phase(Phase.PENDING if ex.attempts == 0 else Phase.RUNNING)
        reason = Reason.QUEUED if ex.attempts == 0 else Reason.RETRYING if ex.failures else Reason.RUNNING
        self._set(C.RUNNING, ex.attempts > 0, reason, ex.message)
        self._set(C.AWAITING_APPROVAL, False, reason)
        self._kstatus(reconciling=(reason, ex.message))
        return changed

    def _approval_status(self, r: dict[str, Any]) -> dict[str, Any]:
        d = r.get("decision") or {}
        args = r.get("arguments")
        return ApprovalStatus(
            id=r["id"],
            tool=r.get("tool"),
            prompt=self._scrub(str(r.get("prompt") or "")) or None,
            arguments=None if args is None else self._scrub(json.dumps(args, sort_keys=True, default=str))[:1024],
            requested_at=_iso(r.get("requestedAt")),
            decision=None if not d else ("approved" if d.get("approved") else "declined"),
            by=d.get("by") or None,
            decided_at=_iso(d.get("decided_at") or d.get("decidedAt")),
            reason=d.get("reason"),
        ).wire()

    def _failed(self, reason: str, message: str) -> bool:
        changed = self._phase(Phase.FAILED)
        self.status.setdefault("completionTime", C.now())
        self._set(C.RUNNING, False, reason)
        self._set(C.AWAITING_APPROVAL, False, reason)
        self._set(C.FAILED, True, reason, message)
        self._set(C.SUCCEEDED, False, reason, message)
        self._kstatus(stalled=(reason, message))
        if changed:
            self.event(reason, message, warning=True)
        return changed

    async def _fail(self, reason: str, message: str, condition_reason: str | None = None) -> None:
        self._failed(condition_reason or reason, message)
        await self.publish(urgent=True)
