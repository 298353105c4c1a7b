"""Tether's error vocabulary. Each class tells the caller what to do next.

    TetherError
    ├── ConfigError            bad input or settings; fix it, retrying will not help
    ├── LimitExceeded          a run limit (max cost) was reached; terminal, not retried
    ├── StoreError             a store operation failed for good (e.g. access denied)
    │   ├── StoreAccessDenied  the store's credentials may not touch that key (S3 403), e.g.
    │   │                      another namespace's prefix: terminal, never read as "absent"
    │   └── StoreUnavailable   transient store failure after bounded retries: the step is
    │                          recoverable, the next attempt runs it again
    ├── RecoverableStepError   a step failed in a way that is not recorded (408/409/429/5xx,
    │                          timeouts, broken connections); the next attempt runs it again
    │   └── ToolRunnerUnavailable  the tool runner of an isolated tool did not answer (down,
    │                          restarting, gone mid-call): the call is not recorded
    └── ToolError              a tool failed terminally; recorded and replayed as the same error
    Suspended (BaseException)  the run waits for a human decision and must end now, holding
                               nothing; a BaseException so framework tool wrappers that catch
                               ``Exception`` let it through

Vendor errors (botocore, httpx) are translated where they occur and raised ``from`` the original.
"""

from __future__ import annotations


class TetherError(Exception):
    """Base of every error Tether raises on purpose."""


class ConfigError(TetherError):
    """Invalid input or settings."""


class LimitExceeded(TetherError):
    """A run limit was reached (``limits.maxCostUSD``); the run fails terminally."""


class StoreError(TetherError):
    """A store operation failed and retrying will not help."""


class StoreAccessDenied(StoreError):
    """The store refused the credentials for this key (S3 ``AccessDenied``); retrying will not help."""


class StoreUnavailable(StoreError):
    """The store did not answer (network, 5xx, throttling) after bounded retries."""


class Superseded(StoreError):
    """A newer attempt of the run has claimed its journal: this attempt's writes are refused and it
    starts no new step (``tether.journal``: two attempts never write one journal)."""


class RecoverableStepError(TetherError):
    """A step failed without being recorded; the next attempt runs it again."""


class ToolRunnerUnavailable(RecoverableStepError):
    """A tool runner (``tether tool-runner``, the container holding a tool's Secrets) could not
    be reached or died during the call: not the tool's answer, so nothing is recorded."""


class ToolError(TetherError):
    """A tool failed terminally. ``error_type`` is the original exception's class name."""

    def __init__(self, tool: str, error_type: str, message: str) -> None:
        super().__init__(f"tool {tool!r} failed: {error_type}: {message}")
        self.tool = tool
        self.error_type = error_type
        self.message = message


class Interrupted(BaseException):
    """The attempt was asked to stop (SIGINT, SIGTERM: ``tether.stopping``): it starts no new step
    and exits as interrupted once what runs is recorded. A BaseException, like ``Suspended``: a
    framework that turns a tool's exceptions into messages for the model must not swallow it."""


class Suspended(BaseException):
    """The run is waiting for a human approval; the process should exit as suspended."""

    def __init__(self, approval_id: str, tool: str) -> None:
        super().__init__(f"waiting for approval {approval_id} of tool {tool!r}")
        self.approval_id = approval_id
        self.tool = tool


def describe(error: BaseException) -> str:
    """``Type: message`` of an exception that ended a run, with the cause Tether gave where an
    SDK's own error hides it (``APIConnectionError: Connection error.`` around "openai upstream
    unreachable at URL"): the first of Tether's own errors in the chain."""
    text = f"{type(error).__name__}: {error}"
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, TetherError) and str(link) and str(link) not in text:
            return f"{text} ({link})"
        link = link.__cause__ or link.__context__
    return text
