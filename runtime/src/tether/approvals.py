"""Human approval of tool calls, without holding compute (DESIGN §3 "Human approval").

A tool that requires approval asks once per step: the request is written to the store under
``approvals/<scope>/<id>.request.json`` and the run raises :class:`~tether.errors.Suspended`; the
process exits as suspended. A decision (``tether approve``, the operator, or :func:`decide`) goes
to ``<id>.decision.json``. The next attempt replays up to the same step, finds the decision and
runs the tool (approved) or hands the model a refusal (declined). The approval id is derived from
the step key, so every attempt asks about the same call under the same id.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .canonical import sha256_hex
from .errors import ConfigError, Suspended
from .stores import Store

if TYPE_CHECKING:
    from .run import Run
    from .tools import ToolSpec


@dataclass
class Decision:
    approved: bool
    by: str = ""
    reason: str | None = None
    decided_at: float = 0.0

    def refusal(self, tool: str) -> str:
        why = f": {self.reason}" if self.reason else ""
        return f"The call to {tool} was declined by a human reviewer{why}. Do not retry it."


def approval_id(key: tuple[str, str, int]) -> str:
    return sha256_hex(f"{key[0]}/{key[1]}/{key[2]}".encode())[:12]


def _prefix(scope: str) -> str:
    return f"approvals/{scope}/"


def read_decision(store: Store, scope: str, aid: str) -> Decision | None:
    data = store.get(f"{_prefix(scope)}{aid}.decision.json")
    return None if data is None else Decision(**json.loads(data))


def prompt_for(approval: Any, tool: str, arguments: dict[str, Any]) -> str:
    if isinstance(approval, str):
        try:
            return approval.format(**arguments)
        except (KeyError, IndexError, ValueError):
            return approval
    if callable(approval):
        return str(approval(**arguments))
    return f"Allow {tool}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})?"


def require_approval(run: Run, spec: ToolSpec, key: tuple[str, str, int], arguments: dict[str, Any]) -> Decision:
    """The decision for this step, or raise ``Suspended`` after recording the request."""
    aid = approval_id(key)
    decision = read_decision(run.store, run.scope, aid)
    if decision is not None:
        return decision
    request = {
        "id": aid,
        "tool": spec.name,
        "prompt": prompt_for(spec.approval, spec.name, arguments),
        "arguments": arguments,
        "requestedAt": time.time(),
    }
    run.store.create(f"{_prefix(run.scope)}{aid}.request.json", json.dumps(request, sort_keys=True).encode())
    raise Suspended(aid, spec.name)


def decide(store: Store, scope: str, aid: str, approved: bool, by: str = "", reason: str | None = None) -> Decision:
    """Record a decision. A decision is final: deciding twice raises ``ConfigError``."""
    if store.get(f"{_prefix(scope)}{aid}.request.json") is None:
        raise ConfigError(f"run {scope} has no approval request {aid}")
    decision = Decision(approved, by, reason, time.time())
    if not store.create(f"{_prefix(scope)}{aid}.decision.json", json.dumps(asdict(decision)).encode()):
        raise ConfigError(f"approval {aid} of run {scope} was already decided")
    return decision


def list_approvals(store: Store, scope: str) -> list[dict[str, Any]]:
    """Every approval request of a run with its decision (``None`` while pending)."""
    out = []
    for key in store.list(_prefix(scope)):
        if key.endswith(".request.json"):
            request = json.loads(store.get(key) or b"{}")
            decision = read_decision(store, scope, request["id"])
            request["decision"] = None if decision is None else asdict(decision)
            out.append(request)
    return sorted(out, key=lambda r: r["requestedAt"])
