"""LangChain memory over a Tether memory key: the conversation as a message history.

A LangChain agent (``create_agent``) keeps its short-term memory in the ``messages`` of its state.
Tether keeps that list in the memory store instead of a checkpointer: the messages committed by
earlier runs are prepended to the input, and the messages this run adds (the user's prompt, the
model's turns, the tool results) are appended as one segment — only when the run succeeds.

    memory/<namespace>/<key>/segments/<run>   [messages_to_dict(...) of one successful run]

Items are ``langchain_core.messages.messages_to_dict`` dicts (``{"type": "human", "data": {...}}``),
so a run that crashed and was retried leaves exactly one copy of its turn: its segment id comes
from the run scope and it is written once, after the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage, messages_from_dict, messages_to_dict

from tether.agent import AgentSession


class MessageHistory:
    """The conversation under ``memory_key``: earlier runs' messages, plus this run's (pending).

    ``messages`` is what the agent is given before the new prompt; ``add_messages`` buffers this
    run's messages into ``session.new_items``, which ``run_agent`` commits on success only.
    """

    def __init__(self, session: AgentSession) -> None:
        self.session = session
        self._committed: list[BaseMessage] = messages_from_dict(list(session.history))
        self._pending: list[BaseMessage] = []

    @property
    def committed(self) -> list[BaseMessage]:
        """Messages of earlier successful runs, oldest first."""
        return list(self._committed)

    @property
    def messages(self) -> list[BaseMessage]:
        """Committed messages followed by this run's pending ones."""
        return [*self._committed, *self._pending]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        self._pending.extend(messages)
        self.session.new_items.extend(messages_to_dict(list(messages)))

    def clear(self) -> None:
        raise NotImplementedError("Tether memory is append-only: use a new memory_key to start over")

    def __len__(self) -> int:
        return len(self._committed) + len(self._pending)

    def __repr__(self) -> str:
        return f"MessageHistory({len(self._committed)} committed, {len(self._pending)} pending)"


def dump(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Messages as memory items (JSON)."""
    return messages_to_dict(list(messages))


def load(items: Sequence[dict[str, Any]]) -> list[BaseMessage]:
    """Memory items back to messages."""
    return messages_from_dict(list(items))
