"""AgentApproval: one decision on a pending approval request of an AgentRun."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    ConfigDict,
    Field,
)

from .shared import DNS_SUBDOMAIN, MAX_RUN_NAME, Condition, _conditions, _observed_generation, _Wire

__all__ = ["APPROVAL_ID", "AgentApprovalSpec", "AgentApprovalStatus"]

# ------------------------------------------------------------------------------ AgentApproval

#: An approval id as the runtime writes it (``tether.approvals``): a 12-hex slot and a nonce.
APPROVAL_ID = r"^[0-9a-f]{12,64}$"


class AgentApprovalSpec(_Wire):
    """A decision on one pending approval request of an AgentRun, made by whoever creates it."""

    run: str = Field(max_length=MAX_RUN_NAME, pattern=DNS_SUBDOMAIN, description="Name of the AgentRun, in this namespace.")
    approval_id: str = Field(
        max_length=64, pattern=APPROVAL_ID, description="Id of the pending request, from the run's status.approvals (or its Event)."
    )
    decision: Literal["approve", "decline"] = Field(description="approve runs the call; decline hands the model a refusal.")
    reason: str | None = Field(default=None, max_length=1024, description="Why; recorded with the decision.")
    decided_by: str = Field(
        max_length=512,
        description="Who decides: must be the Kubernetes user creating this object (`kubectl auth whoami`), checked at "
        "admission by the chart's ValidatingAdmissionPolicy. Recorded as the run's approver.",
    )


class AgentApprovalStatus(_Wire):
    """Whether the operator applied the decision (condition Applied, with the reason if not)."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int = _observed_generation()
    conditions: list[Condition] = _conditions()
