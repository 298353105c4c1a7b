"""The Hermes transcript over a Tether memory store (README.md, "How it works": Memory).

Hermes keeps a conversation as a list of OpenAI-style message dicts: the user's messages, each
assistant message with its ``tool_calls``, each ``tool`` result, the answers.
``run_conversation(conversation_history=...)`` continues such a list and returns it, extended, as
``messages``. Tether stores every message as one item, exactly as Hermes returned it::

    memory segment (one per successful run) = [user, assistant+tool_calls, tool, ..., assistant]

A run passes every committed message as ``conversation_history`` (so the model sees the earlier
runs' tool calls and results, not only their questions and answers) and hands the messages it
added to ``session.new_items``; the runtime commits them as one segment only when the run
succeeds, so a crash never stores a turn twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.agent import MemoryItems


class Transcript(MemoryItems[dict[str, Any]]):
    """The Hermes messages of a ``memory_key``."""

    def encode(self, messages: Sequence[dict[str, Any]]) -> list[Any]:
        return [dict(m) for m in messages]

    def decode(self, items: Sequence[Any]) -> list[dict[str, Any]]:
        return [dict(m) for m in items]
