"""What :func:`~tether.agent.run_agent` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..journal import StepCounts
from ..run import StepEvent


@dataclass
class AgentResult(StepCounts):
    """What one ``run_agent`` call did: the answer, how it ended, and what was live or replayed.

    ``model_live``/``model_replayed`` and ``tool_live``/``tool_replayed`` count this attempt's
    steps; ``cost_usd`` is its live spend and ``saved_usd`` what replay saved; ``events`` are its
    steps in order; ``first_divergence`` is where a replay first left the journal (None: it did
    not); ``pending_approval`` the approval a suspended run waits for; ``error`` a failure's cause.
    """

    output: str | None
    #: ``succeeded``, ``suspended`` (waiting for an approval) or ``failed``.
    status: str
    run_id: str
    attempt: int = 0
    usage_live: dict[str, Any] = field(default_factory=dict)
    usage_replayed: dict[str, Any] = field(default_factory=dict)
    cost_usd: float = 0.0
    saved_usd: float = 0.0
    events: list[StepEvent] = field(default_factory=list)
    pending_approval: str | None = None
    error: str | None = None
    #: Time from the attempt's start to its first live step (or its end): what replay took.
    replay_ms: float = 0.0

    @property
    def suspended(self) -> bool:
        return self.status == "suspended"
