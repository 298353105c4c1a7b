"""Memory for the OpenAI Agents SDK: its own ``Session`` protocol over Tether memory.

The Runner reads a conversation with ``get_items`` before the first turn and saves what each turn
adds with ``add_items``. :class:`TetherSession` answers reads from the items earlier runs
committed under the ``memory_key`` (``AgentSession.history``) followed by what this run added so
far, and collects writes in ``AgentSession.new_items``. ``run_agent`` commits those as one
segment only when the run succeeds, so a run that crashes after saving a turn and is retried
never leaves that turn in memory twice, and its retry sends byte-identical requests (replayed).

Committed segments are append-only: ``pop_item`` removes only items this run added, and
``clear_session`` refuses to erase committed history (use a new ``memory_key`` instead).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from tether.agent import AgentSession
from tether.errors import ConfigError


class TetherSession:
    """An ``agents.memory.Session`` (get_items / add_items / pop_item / clear_session) whose
    items live in Tether memory: committed history + this run's new items."""

    session_settings = None

    def __init__(self, session: AgentSession, session_id: str | None = None) -> None:
        self._session = session
        memory = session.memory
        self.session_id = session_id or (f"{memory.namespace}/{memory.key}" if memory is not None else "tether")

    @property
    def history(self) -> list[Any]:
        return self._session.history

    @property
    def new_items(self) -> list[Any]:
        return self._session.new_items

    async def get_items(self, limit: int | None = None) -> list[Any]:
        items = [*self._session.history, *self._session.new_items]
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return copy.deepcopy(items)  # the Runner mutates what it reads; our copy stays as saved

    async def add_items(self, items: list[Any]) -> None:
        # As JSON, the way the memory store will keep them: a later run reads exactly this.
        self._session.new_items.extend(json.loads(json.dumps(list(items), default=_jsonable)))

    async def pop_item(self) -> Any | None:
        return self._session.new_items.pop() if self._session.new_items else None

    async def clear_session(self) -> None:
        if self._session.history:
            raise ConfigError("Tether memory is append-only: committed history cannot be cleared; use a new memory_key")
        self._session.new_items.clear()


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_unset=True)
    raise TypeError(f"session item of type {type(value).__name__} is not JSON")
