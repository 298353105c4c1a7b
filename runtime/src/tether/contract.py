"""What the runtime process, the operator and ``tether approve`` agree on, in one place.

Both sides import these names; a change here changes both ends together:

- the run request (:class:`ExecRequest`, the REQUEST.json an executor hands ``tether exec``),
- the progress record the runtime rewrites in the store and the operator mirrors to status
  (:class:`Progress`, at :func:`progress_key`),
- the exit codes of an attempt,
- the environment variables one side sets and the other reads, store keys, labels and
  AgentApproval names.

The CRDs themselves are :mod:`tether.api`.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import ConfigDict, Field, field_validator

from .api import AgentRunSpec, AgentToolSpec, ApprovalStatus, Steps, Usage
from .api.shared import _Wire

# -- exit codes of one attempt (`tether exec`, `python -m tether.entrypoint`) -------------------
EXIT_SUCCEEDED = 0
#: Transient failure (network, 429/5xx, store unavailable): the executor retries the attempt.
EXIT_RECOVERABLE = 1
#: Bad input, a limit, or a non-retryable error: retrying would fail the same way.
EXIT_TERMINAL = 2
#: Waiting for a human decision on an approval-required tool; no compute is held.
EXIT_SUSPENDED = 3
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


_ENDS = {
    EXIT_SUCCEEDED: AttemptEnd.SUCCEEDED,
    EXIT_TERMINAL: AttemptEnd.TERMINAL,
    EXIT_SUSPENDED: AttemptEnd.SUSPENDED,
    EXIT_INTERRUPTED: AttemptEnd.INTERRUPTED,
}


def attempt_end(exit_code: int) -> AttemptEnd:
    """The one reading of an attempt's exit code, for every executor and ``tether run``: anything
    but the codes above (1, a signal as a negative code, any other) is recoverable: the next
    attempt replays the journal. Who stopped an interrupted attempt decides whether another runs."""
    return _ENDS.get(exit_code, AttemptEnd.RECOVERABLE)


# -- store layout read by the operator ------------------------------------------------------------
def progress_key(run_id: str) -> str:
    """The progress record the runtime rewrites on each step and the operator mirrors to status."""
    return f"runs/{run_id}/progress.json"


def runs_prefix() -> str:
    """Where every run's progress record lives (``tether list`` lists it)."""
    return "runs/"


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


#: The exit codes of ``tether run`` and ``tether exec`` (the values above), for ``--help``.
EXIT_CODES_HELP = """exit codes:
  0  succeeded
  1  recoverable failure, or the agent process died and retries ran out: run the same command
     again (finished steps replay)
  2  terminal failure or bad input (the cause is printed), or the run id belongs to another manifest
  3  suspended: waiting for a human approval (approve, then run the same command again)
  130  interrupted (Ctrl-C, SIGTERM): tool calls already running finished and were recorded;
     run the same command again to resume"""


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
    result: Any = None
    result_truncated: bool = False
    error: Any = None
    updated_at: datetime | float | str | None = None

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
