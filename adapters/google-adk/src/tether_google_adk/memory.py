"""ADK session events over a Tether memory store (README.md, "How it works": Memory).

ADK keeps a conversation as a session: an ordered list of ``Event`` objects (the user's message,
each model response with its function calls, each function response). Tether stores each event
as one item, in the JSON form ADK's own database session services persist it
(``Event.model_dump(mode="json", exclude_none=True)``)::

    memory segment (one per successful run) = [user Event, model Event, tool Event, ..., model Event]

A run appends every committed event to a fresh in-memory ADK session before it starts, so the
agent sees the whole conversation, and hands the events it added to ``session.new_items``; the
runtime commits them as one segment only when the run succeeds, so a crash never stores a turn
twice. Session *state* (``state_delta``) travels inside the events, as in ADK's own services.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.adk.events import Event

from tether.agent import MemoryItems


class SessionEvents(MemoryItems[Event]):
    """The ADK session events of a ``memory_key``."""

    def encode(self, events: Sequence[Event]) -> list[Any]:
        return [e.model_dump(mode="json", exclude_none=True) for e in events]

    def decode(self, items: Sequence[Any]) -> list[Event]:
        return [Event.model_validate(item) for item in items]
