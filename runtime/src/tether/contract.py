"""What the runtime process, the operator and ``tether approve`` agree on, in one place.

Both sides import these names; a change here changes both ends together:

- the run request (:class:`ExecRequest`, the REQUEST.json an executor hands ``tether exec``),
- the progress record the runtime rewrites in the store and the operator mirrors to status
  (:class:`Progress`, at :func:`progress_key`),
- how an attempt ended (:class:`Outcome`, ``tether exec``'s last line and the Flyte task's
  output) and its exit code,
- the environment variables one side sets and the other reads, store keys, labels and
  AgentApproval names.

The CRDs themselves are :mod:`tether.api`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import ConfigDict, Field, field_validator

from .api import AgentRunSpec, AgentToolSpec, ApprovalStatus, McpToolStatus, Steps, Usage
from .api.shared import _Wire

# -- exit codes of one attempt (`tether exec`, `python -m tether.entrypoint`) -------------------
EXIT_SUCCEEDED = 0
#: Transient failure (network, 429/5xx, store unavailable): the executor retries the attempt.
EXIT_RECOVERABLE = 1
#: Bad input, a limit, or a non-retryable error: retrying would fail the same way.
EXIT_TERMINAL = 2
#: Waiting for a human decision on an approval-required tool; no compute is held.
EXIT_SUSPENDED = 3
#: The store did not answer for longer than the attempt waits for it (``tether.stores.outage``,
#: ``$TETHER_STORE_OUTAGE_SECONDS``): what is durable stays so, the next attempt replays it.
#: Executors start the next attempt without counting it against ``retries`` (a bound of its own).
EXIT_STORE_UNREACHABLE = 4
#: Stopped cleanly by SIGINT/SIGTERM (``tether.stopping``): what finished is recorded; run the
#: same command again to resume. 128 + SIGINT, what a shell reports for Ctrl-C. Executors treat
#: it as recoverable.
EXIT_INTERRUPTED = 130


class AttemptEnd(str, Enum):
    """How one attempt ended, as its exit code says (:func:`attempt_end`)."""

    SUCCEEDED = "succeeded"
    SUSPENDED = "suspended"
    TERMINAL = "terminal"
    INTERRUPTED = "interrupted"
    RECOVERABLE = "recoverable"
    STORE_UNREACHABLE = "store-unreachable"


_ENDS = {
    EXIT_SUCCEEDED: AttemptEnd.SUCCEEDED,
    EXIT_TERMINAL: AttemptEnd.TERMINAL,
    EXIT_SUSPENDED: AttemptEnd.SUSPENDED,
    EXIT_INTERRUPTED: AttemptEnd.INTERRUPTED,
    EXIT_STORE_UNREACHABLE: AttemptEnd.STORE_UNREACHABLE,
}


def attempt_end(exit_code: int) -> AttemptEnd:
    """The one reading of an attempt's exit code, for every executor and ``tether run``: anything
    but the codes above (1, a signal as a negative code, any other) is recoverable: the next
    attempt replays the journal. Who stopped an interrupted attempt decides whether another runs."""
    return _ENDS.get(exit_code, AttemptEnd.RECOVERABLE)


# -- store layout: every key the runtime writes, the operator reads and the store proxy polices ------
def runs_prefix() -> str:
    """Where every run's progress record lives (``tether list`` lists it)."""
    return "runs/"


def run_prefix(run_id: str) -> str:
    """One run's own records: its progress, its manifest, its attempts' logs and its Flyte start counts."""
    return f"{runs_prefix()}{run_id}/"


def progress_key(run_id: str) -> str:
    """The progress record the runtime rewrites on each step and the operator mirrors to status."""
    return f"{run_prefix(run_id)}progress.json"


def manifest_key(run_id: str) -> str:
    """The manifest identity ``tether run`` recorded for a run id (a changed manifest is refused)."""
    return f"{run_prefix(run_id)}manifest.json"


def attempt_log_key(run_id: str, attempt: int) -> str:
    """How one attempt ended, with its steps in order (written once, when it ends; a killed
    attempt leaves none): what the run view shows per attempt (``tether.runview``)."""
    return f"{run_prefix(run_id)}attempts/{attempt:05d}.json"


def runner_key(run_id: str) -> str:
    """Which ``tether run`` process runs the run now (host and pid): what ``tether cancel`` signals."""
    return f"{run_prefix(run_id)}runner.json"


def cancel_key(run_id: str) -> str:
    """Set by ``tether cancel``: who cancelled the run, and when. A cancelled run is never resumed."""
    return f"{run_prefix(run_id)}cancel.json"


def journal_prefix(scope: str) -> str:
    """One run scope's journal (a run id, or a run id and a Flyte segment)."""
    return f"journal/{scope}/"


def approvals_prefix(scope: str) -> str:
    """One run scope's approval requests (the run writes them) and decisions (never the run)."""
    return f"approvals/{scope}/"


def memory_prefix(namespace: str) -> str:
    """A namespace's memories, one folder per ``memoryKey`` below it."""
    return f"memory/{namespace}/"


def tool_cache_prefix() -> str:
    """Results of ``cache="auto"`` tools, shared by the runs of a store."""
    return "cache/tools/"


def flyte_starts_prefix(run_id: str, flyte_run: str, action: str) -> str:
    """Where the runtime counts the starts of one Flyte run's action, one key per start
    (``tether.entrypoint``: the open-source backend's own count misses some)."""
    return f"{runs_prefix()}{run_id}/flyte/{flyte_run}/{action}/starts/"


def step_lines_key(run_id: str, attempt: int) -> str:
    """One attempt's step lines as ``tether exec`` printed them, rewritten as they come (``tether
    logs`` reads and follows them; :func:`attempt_log_key` is the attempt's record, written once
    at its end, for the run view)."""
    return f"{step_lines_prefix(run_id)}{attempt:05d}.log"


def step_lines_prefix(run_id: str) -> str:
    return f"{run_prefix(run_id)}lines/"


def attempt_of_step_lines_key(key: str) -> int | None:
    """The attempt whose step lines are at ``key`` (a key :func:`step_lines_key` made), else None."""
    name = key.rpartition("/")[2]
    return int(name[:-4]) if name.endswith(".log") and name[:-4].isdigit() else None


#: The last of an attempt's step lines: ``tether logs --follow`` stops after it.
STEP_LINES_END = "-- attempt ended: "


def run_of_progress_key(key: str) -> str | None:
    """The run id whose progress record is at ``key`` (a key :func:`progress_key` made), else None."""
    run_id = key.removeprefix(runs_prefix()).rpartition("/")[0]
    return run_id if run_id and "/" not in run_id and progress_key(run_id) == key else None


# -- approvals on Kubernetes ----------------------------------------------------------------------
#: A decision is an AgentApproval (created by `tether approve NAMESPACE/NAME` or kubectl), whose
#: spec.decidedBy the chart's admission policy binds to its creator.
APPROVAL_PLURAL = "agentapprovals"
#: AgentRun annotations that once carried decisions. Anyone who could create or annotate a run
#: could set them (and name any approver), so they are never honoured: the operator warns instead.
LEGACY_APPROVAL_ANNOTATIONS = ("tether.dev/approve", "tether.dev/decline", "tether.dev/decided-by")

# -- labels the operator puts on what it creates for a run ----------------------------------------
RUN_LABEL = "tether.dev/run"
RUN_UID_LABEL = "tether.dev/run-uid"

# -- environment ----------------------------------------------------------------------------------
#: The environment variable each provider's SDKs read their API key from: the operator puts the
#: key from the AgentRun's Secret there, the runtime checks for it.
PROVIDER_KEY_ENV = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "mistral": "MISTRAL_API_KEY",
}

#: The sha256 (hex) of the exec request file, set by the executor that wrote the file where the
#: runtime cannot be given anything else (the Kubernetes executor: in the pod spec, which only the
#: operator writes and which cannot change once the pod exists). `tether exec` refuses a request
#: file whose hash differs (exit 2): a request swapped on the way never runs.
REQUEST_SHA256_ENV = "TETHER_REQUEST_SHA256"

#: Where the attempt's secrets are (``tether.secrets``): a directory (the Kubernetes executor's
#: projected Secret volume), JSON naming the variables Flyte injected them into, or JSON of the
#: values themselves (the local executor). The last two are removed from the environment as read.
SECRETS_DIR_ENV = "TETHER_SECRETS_DIR"
SECRETS_FROM_ENV = "TETHER_SECRETS_FROM_ENV"
SECRETS_ENV = "TETHER_SECRETS"

#: The modules the admin allows as tools and as bring-your-own agents (``tools.allowedModules``,
#: ``agents.allowedModules``): the operator passes them, the runtime and the tool runner enforce them.
TOOL_MODULES_ENV = "TETHER_TOOL_MODULES"
AGENT_MODULES_ENV = "TETHER_AGENT_MODULES"
#: Set by ``tether run`` to the manifest's folder: a refusal of a module then says how a local run
#: allows modules (beside the manifest, ``$TETHER_TOOL_MODULES``), not the chart's value.
LOCAL_RUN_ENV = "TETHER_LOCAL_RUN"

#: JSON ``{AgentTool: address}`` of the tool runners (Kubernetes executor): a Unix socket beside
#: the agent, or ``tcp://IP:PORT`` of a tool pod; the tokens of the TCP ones are files in the
#: directory named by ``TOKENS_ENV``, one per AgentTool.
RUNNERS_ENV = "TETHER_TOOL_RUNNERS"
TOKENS_ENV = "TETHER_TOOL_TOKENS"

#: Set (to 1) by the Flyte executor on the runs it submits: the task is the process's entry point
#: (no ``tether exec`` before it), so it reads its secrets itself, and a recoverable failure raises,
#: so that Flyte's own retries start the next attempt.
FLYTE_REMOTE_ENV = "TETHER_FLYTE_REMOTE"
#: JSON ``{AgentTool: deployed tool task}``: AgentTools with their own image or resources run as
#: child tasks of the ``tether-tool`` environment (the Flyte executor deploys it per image).
FLYTE_TOOL_TASKS_ENV = "TETHER_FLYTE_TOOL_TASKS"

#: Set (to 1) by ``tether run`` on the attempts it starts: ``tether exec`` prints a line per step.
PROGRESS_ENV = "TETHER_PROGRESS"
#: ``tether run --kill-after N`` sets it on an attempt: it SIGKILLs itself after N steps (to watch
#: a crash and a resume happen).
KILL_AFTER_STEP_ENV = "TETHER_KILL_AFTER_STEP"

#: The exit codes of ``tether run`` and ``tether exec`` (the values above), for ``--help``.
EXIT_CODES_HELP = """exit codes:
  0  succeeded
  1  recoverable failure, or the agent process died and retries ran out: run the same command
     again (finished steps replay)
  2  terminal failure or bad input (the cause is printed), or the run id belongs to another manifest
  3  suspended: waiting for a human approval (approve, then run the same command again)
  4  the store did not answer for longer than TETHER_STORE_OUTAGE_SECONDS (default 300):
     run the same command again once it does (finished steps replay)
  130  interrupted (Ctrl-C, SIGTERM): tool calls already running finished and were recorded;
     run the same command again to resume
  other  the agent process crashed or was killed (any other exit code, a signal): an attempt
     that can be retried, as after 1 (tether run and the operator start it again while retries
     last); tether run then exits with that code, or 1 if a signal killed it"""


# -- the run request, the progress record, the outcome -------------------------------------------
class ExecRequest(_Wire):
    """REQUEST.json of `python -m tether exec REQUEST.json --store URL`."""

    model_config = ConfigDict(extra="ignore")

    run_id: str = Field(description="The AgentRun's uid: the journal's scope.")
    namespace: str
    name: str
    spec: AgentRunSpec
    tools: dict[str, AgentToolSpec] = Field(default_factory=dict)


class ProgressApproval(_Wire):
    model_config = ConfigDict(extra="ignore")

    id: str
    tool: str | None = None
    prompt: str | None = None
    arguments: Any = None
    requested_at: datetime | str | None = None
    decision: str | None = None
    by: str | None = None
    decided_at: datetime | str | None = None
    reason: str | None = None

    def status(self) -> ApprovalStatus:
        args = self.arguments
        if args is not None and not isinstance(args, str):
            args = json.dumps(args, sort_keys=True, default=str)
        return ApprovalStatus(
            id=self.id,
            tool=self.tool,
            prompt=self.prompt,
            arguments=args[:1024] if args is not None else None,
            requested_at=self.requested_at or None,
            decision=self.decision or None,
            by=self.by,
            decided_at=self.decided_at or None,
            reason=self.reason,
        )


class Progress(_Wire):
    """The runtime's progress record at `runs/<runId>/progress.json` (rewritten on each step)."""

    model_config = ConfigDict(extra="ignore")

    phase: str | None = None
    attempt: int = 0
    steps: Steps = Field(default_factory=Steps)
    usage: Usage = Field(default_factory=Usage)
    approvals: list[ProgressApproval] = Field(default_factory=list)
    mcp_tools: list[McpToolStatus] = Field(default_factory=list)
    result: Any = None
    result_truncated: bool = False
    error: Any = None
    updated_at: datetime | float | str | None = None
    first_replay_at: float | None = None
    """When this attempt replayed its first step (epoch seconds; None: none yet)."""

    @field_validator("steps", "usage", mode="before")
    @classmethod
    def _none_is_empty(cls, v: Any) -> Any:
        return {} if v is None else v

    @field_validator("approvals", mode="before")
    @classmethod
    def _none_is_no_approvals(cls, v: Any) -> Any:
        return [] if v is None else v

    def pending_approvals(self) -> list[ProgressApproval]:
        return [a for a in self.approvals if not a.decision]


@dataclass(frozen=True)
class Figures:
    """What the agent's run reported: absent from an outcome when it failed before or while running."""

    output: str | None
    attempt: int
    pending_approval: str | None
    model_live: int
    model_replayed: int
    tool_live: int
    tool_replayed: int
    cost_usd: float
    saved_usd: float
    replay_ms: float


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended: ``tether exec`` prints it as its last stdout line, the Flyte task
    returns it, executors read it (:meth:`from_json`). ``status`` is ``succeeded``, ``suspended``,
    ``failed`` or ``interrupted``; ``exit_code`` one of the ``EXIT_`` codes above."""

    run_id: str
    status: str
    exit_code: int
    error: str | None = None
    figures: Figures | None = None
    #: The runtime's count of the starts of a Flyte run (the backend's own count misses some).
    attempts: int | None = None
    #: A start past the run's retries: nothing ran, the run fails.
    retries_exhausted: bool = False
    #: A warm worker's timings (``tether exec --warm``): what ``tether run`` and tests read.
    warm_worker: dict[str, float] | None = None

    def to_json(self) -> str:
        """The one JSON form: ``error`` only when there is one, the figures flat beside it."""
        doc: dict[str, Any] = {"run_id": self.run_id, "status": self.status}
        if self.error is not None:
            doc["error"] = self.error
        if self.figures is not None:
            doc.update(asdict(self.figures))
        doc["exit_code"] = self.exit_code
        if self.attempts is not None:
            doc["attempts"] = self.attempts
        if self.retries_exhausted:
            doc["retries_exhausted"] = True
        if self.warm_worker is not None:
            doc["warm_worker"] = self.warm_worker
        return json.dumps(doc)

    @classmethod
    def from_json(cls, text: str | bytes) -> Outcome:
        """The outcome :meth:`to_json` wrote; ValueError (or KeyError) on anything else."""
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("an outcome is a JSON object")
        figures = None
        if "attempt" in doc:
            figures = Figures(**{name: doc[name] for name in Figures.__dataclass_fields__})
        return cls(
            str(doc["run_id"]),
            str(doc["status"]),
            int(doc["exit_code"]),
            doc.get("error"),
            figures,
            doc.get("attempts"),
            bool(doc.get("retries_exhausted")),
            doc.get("warm_worker"),
        )
