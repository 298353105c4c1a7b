"""Human approval of tool calls, without holding compute (README.md, "How it works": Approvals).

A tool that requires approval asks once per step: the request is written to the store under
``approvals/<scope>/<slot>.request.json`` (the slot is derived from the step key) and the run
raises :class:`~tether.errors.Suspended`; the process exits as suspended. A decision
(``tether approve``, the operator, or :func:`decide`) goes to ``<slot>.decision.json``. The next
attempt replays up to the same step, finds the request and its decision there, and runs the tool
(approved) or hands the model a refusal (declined).

The public approval id is the slot followed by a random nonce drawn when the request is first
recorded: it cannot be computed from the tool and its arguments before the request exists, so
nobody can decide a call in advance. :func:`decide` accepts only the id of a recorded request.
"""

from __future__ import annotations

import hmac
import json
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any

from .attempt import Attempt
from .canonical import sha256_hex
from .contract import approvals_prefix
from .errors import ConfigError, Suspended
from .stores import Store


@dataclass
class Decision:
    approved: bool
    by: str = ""
    reason: str | None = None
    decided_at: float = 0.0

    def refusal(self, tool: str) -> str:
        why = f": {self.reason}" if self.reason else ""
        return f"The call to {tool} was declined by a human reviewer{why}. Do not retry it."


SLOT_LENGTH = 12  # hex characters of the step's slot at the start of an approval id


def approval_slot(key: tuple[str, str, int]) -> str:
    """Where the step's request and decision are stored: the same for every attempt of the step."""
    return sha256_hex(f"{key[0]}/{key[1]}/{key[2]}".encode())[:SLOT_LENGTH]


def new_approval_id(slot: str) -> str:
    """The public id of a new request: its slot and 64 random bits."""
    return slot + secrets.token_hex(8)


def read_request(store: Store, scope: str, aid: str) -> dict[str, Any] | None:
    """The recorded request whose public id is ``aid`` exactly, or None."""
    slot = aid[:SLOT_LENGTH]
    if len(slot) < SLOT_LENGTH or "/" in aid:
        return None
    data = store.get(f"{approvals_prefix(scope)}{slot}.request.json")
    if data is None:
        return None
    request: dict[str, Any] = json.loads(data)
    return request if hmac.compare_digest(str(request.get("id", "")), aid) else None


def read_decision(store: Store, scope: str, aid: str) -> Decision | None:
    data = store.get(f"{approvals_prefix(scope)}{aid[:SLOT_LENGTH]}.decision.json")
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


def require_approval(run: Attempt, tool: str, approval: Any, key: tuple[str, str, int], arguments: dict[str, Any]) -> Decision:
    """The decision for this step of ``tool`` (its ``approval`` describes the request: see
    :func:`prompt_for`), or raise ``Suspended`` after recording the request (once: a later
    attempt of the step finds the same request, under the same id)."""
    slot = approval_slot(key)
    path = f"{approvals_prefix(run.scope)}{slot}.request.json"
    existing = run.store.get(path)
    if existing is None:
        aid = new_approval_id(slot)
        request = {
            "id": aid,
            "tool": tool,
            "prompt": prompt_for(approval, tool, arguments),
            "arguments": arguments,
            "requestedAt": time.time(),
        }
        if run.store.create(path, json.dumps(request, sort_keys=True).encode()):
            raise Suspended(aid, tool)
        existing = run.store.get(path)  # another attempt recorded it first: that one stands
    recorded = json.loads(existing or b"{}")
    aid = str(recorded.get("id") or slot)
    decision = read_decision(run.store, run.scope, aid)
    if decision is not None:
        run.account_approval(tool, aid, float(recorded.get("requestedAt") or decision.decided_at), decision)
        return decision
    raise Suspended(aid, tool)


def decide(store: Store, scope: str, aid: str, approved: bool, by: str = "", reason: str | None = None) -> Decision:
    """Record a decision on a recorded request. A decision is final: deciding twice, or deciding
    an id no request has (made up, computed, or from another run), raises ``ConfigError``."""
    if read_request(store, scope, aid) is None:
        raise ConfigError(f"run {scope} has no approval request {aid}")
    decision = Decision(approved, by, reason, time.time())
    if not store.create(f"{approvals_prefix(scope)}{aid[:SLOT_LENGTH]}.decision.json", json.dumps(asdict(decision)).encode()):
        raise ConfigError(f"approval {aid} of run {scope} was already decided")
    return decision


def list_approvals(store: Store, scope: str) -> list[dict[str, Any]]:
    """Every approval request of a run with its decision (``None`` while pending)."""
    out = []
    for key in store.list(approvals_prefix(scope)):
        if key.endswith(".request.json"):
            request = json.loads(store.get(key) or b"{}")
            decision = read_decision(store, scope, request["id"])
            request["decision"] = None if decision is None else asdict(decision)
            out.append(request)
    return sorted(out, key=lambda r: r["requestedAt"])
