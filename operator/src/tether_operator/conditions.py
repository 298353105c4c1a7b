"""Condition types, reasons and the one helper that sets a condition.

Descriptive conditions say what happened (Accepted, Running, AwaitingApproval, Succeeded, Failed);
the kstatus trio says what a tool such as Flux, Argo CD or `kubectl wait` should conclude
(operator/README.md, "Conditions (kstatus)"): Reconciling=True while pending, running or awaiting approval; Ready=True when the run
succeeded; Stalled=True on a terminal failure only, never together with Reconciling.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

# Types
ACCEPTED = "Accepted"
RUNNING = "Running"
AWAITING_APPROVAL = "AwaitingApproval"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"
#: False while the runtime's progress document cannot be read (status then follows the executor only).
PROGRESS_READABLE = "ProgressReadable"
#: An AgentApproval's: True once its decision is recorded for the run, False with the reason why not.
APPLIED = "Applied"


class Reason:
    """Reasons (CamelCase, stable: users and alerts match on them)."""

    ACCEPTED = "Accepted"
    UNKNOWN_TOOL = "UnknownTool"
    TOOL_NOT_READY = "ToolNotReady"
    MISSING_SECRET = "MissingSecret"
    MISSING_SECRET_KEY = "MissingSecretKey"
    SECRET_NOT_USABLE = "SecretNotUsable"
    TOOL_NOT_ALLOWED = "ToolNotAllowed"
    TOOL_NOT_IMPORTABLE = "ToolNotImportable"
    INVALID_RESOURCES = "InvalidResources"
    INVALID_SPEC = "InvalidSpec"
    BASE_URL_NOT_ALLOWED = "BaseURLNotAllowed"
    BASE_URL_UNRESOLVED = "BaseURLUnresolved"
    AUTO_APPROVE_NOT_ALLOWED = "AutoApproveNotAllowed"
    UNSUPPORTED_BY_EXECUTOR = "UnsupportedByExecutor"
    NAMESPACE_NOT_SERVED = "NamespaceNotServed"
    IMAGE_NOT_ALLOWED = "ImageNotAllowed"
    AGENT_NOT_ALLOWED = "AgentNotAllowed"
    ADMISSION_POLICY_MISSING = "AdmissionPolicyMissing"
    QUEUED = "Queued"
    SUBMITTED = "Submitted"
    RUNNING = "Running"
    RETRYING = "Retrying"
    AWAITING_APPROVAL = "AwaitingApproval"
    APPROVAL_DECIDED = "ApprovalDecided"
    APPROVAL_ANNOTATION_IGNORED = "ApprovalAnnotationIgnored"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    RETRIES_EXHAUSTED = "RetriesExhausted"
    ABORTED = "Aborted"
    #: A finished run deleted past its spec.ttlSecondsAfterFinished (an Event, not a condition).
    EXPIRED = "Expired"
    #: An object the operator creates for a run (request ConfigMap, runner pod, runner
    #: ServiceAccount) exists under its name and is not what the operator would create.
    OWNED_OBJECT_CONFLICT = "OwnedObjectConflict"
    # A runner pod that cannot start, past the executor's start grace (the kubelet's or the
    # scheduler's message in the condition).
    UNSCHEDULABLE = "Unschedulable"
    IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
    CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
    PROGRESS_UNREADABLE = "ProgressUnreadable"
    #: The store did not answer the operator (condition ProgressReadable=False while it lasts).
    STORE_UNREACHABLE = "StoreUnreachable"
    PROGRESS_READ = "ProgressRead"
    # AgentTool
    VALID = "Valid"
    # AgentApproval (condition Applied)
    APPLIED = "Applied"
    NO_SUCH_RUN = "NoSuchRun"
    NO_SUCH_REQUEST = "NoSuchRequest"
    DECIDED_BEFORE_REQUEST = "DecidedBeforeRequest"
    ALREADY_DECIDED = "AlreadyDecided"
    APPROVAL_POLICY_MISSING = "ApprovalPolicyMissing"


def now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: bool | str,
    reason: str,
    message: str = "",
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """A copy of `conditions` with `type_` set; lastTransitionTime moves only when status changes."""
    value = status if isinstance(status, str) else ("True" if status else "False")
    out = [dict(c) for c in conditions]
    current = next((c for c in out if c.get("type") == type_), None)
    if current is None:
        current = {"type": type_}
        out.append(current)
    if current.get("status") != value or not current.get("lastTransitionTime"):
        current["lastTransitionTime"] = now()
    current.update(status=value, reason=reason, message=message[:32768])
    if generation is not None:
        current["observedGeneration"] = generation
    return out


def get_condition(conditions: list[dict[str, Any]], type_: str) -> dict[str, Any] | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def is_true(conditions: list[dict[str, Any]], type_: str) -> bool:
    c = get_condition(conditions, type_)
    return bool(c and c.get("status") == "True")


def kstatus(
    conditions: list[dict[str, Any]],
    *,
    reconciling: tuple[str, str] | None = None,
    ready: tuple[str, str] | None = None,
    stalled: tuple[str, str] | None = None,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """Set Reconciling/Ready/Stalled together; exactly one of the three kwargs is given.

    Each is (reason, message). Ready without the others means done; Stalled means a terminal
    failure; Reconciling means still working (or waiting for something that may still appear).
    """
    assert sum(x is not None for x in (reconciling, ready, stalled)) == 1
    out = conditions
    if reconciling:
        out = set_condition(out, RECONCILING, True, *reconciling, generation=generation)
        out = set_condition(out, STALLED, False, reconciling[0], "", generation=generation)
        out = set_condition(out, READY, False, *reconciling, generation=generation)
    elif ready:
        out = set_condition(out, READY, True, *ready, generation=generation)
        out = set_condition(out, RECONCILING, False, ready[0], "", generation=generation)
        out = set_condition(out, STALLED, False, ready[0], "", generation=generation)
    elif stalled:
        out = set_condition(out, STALLED, True, *stalled, generation=generation)
        out = set_condition(out, RECONCILING, False, stalled[0], "", generation=generation)
        out = set_condition(out, READY, False, *stalled, generation=generation)
    return out
