"""A Mistral transcript over a Tether memory store (README.md, "How it works": Memory).

One memory item per successful run, in the API the agent speaks::

    {"api": "conversations", "conversation_id": "conv_...", "entries": [message.input, function.call, ...]}
    {"api": "chat", "messages": [user, assistant (tool_calls), tool, ..., assistant]}

Conversations: the conversation id is kept (it names the run's conversation on Mistral's side),
but a later run does not append to it. It starts a new conversation whose inputs are the committed
transcript plus the new message. Why: the server's copy is not under the memory store's
compare-and-swap — an attempt that failed after appending, or two runs sharing the key at once,
would leave entries there that no committed run owns (a fork, or a turn twice). The local
transcript holds exactly what successful runs committed, once each.

Entries are stored in the SDK's JSON form without the server's bookkeeping (entry ids,
timestamps), which a new conversation does not take as inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.agent import AgentSession
from tether.errors import ConfigError

#: Set by the server on each entry; not inputs of a new conversation.
SERVER_FIELDS = frozenset({"id", "object", "created_at", "completed_at", "agent_id", "model"})


class Transcript:
    """The transcript of a ``memory_key`` for one API."""

    def __init__(self, session: AgentSession, api: str) -> None:
        self.session = session
        self.api = api
        for item in session.history:
            if not isinstance(item, dict) or item.get("api") != api:
                found = item.get("api") if isinstance(item, dict) else type(item).__name__
                raise ConfigError(f"memory key holds a Mistral {found} transcript; this agent speaks {api} (use another memoryKey)")

    def entries(self) -> list[dict[str, Any]]:
        """Conversation entries committed by earlier runs, oldest first."""
        return [e for item in self.session.history for e in item["entries"]]

    def messages(self) -> list[dict[str, Any]]:
        """Chat messages committed by earlier runs, oldest first."""
        return [m for item in self.session.history for m in item["messages"]]

    def add_conversation(self, conversation_id: str | None, entries: Sequence[Any]) -> None:
        dumped = [e.model_dump(mode="json", by_alias=True, exclude_none=True) if hasattr(e, "model_dump") else dict(e) for e in entries]
        clean = [{k: v for k, v in e.items() if k not in SERVER_FIELDS} for e in dumped]
        self.session.new_items.append({"api": "conversations", "conversation_id": conversation_id, "entries": clean})

    def add_messages(self, messages: Sequence[dict[str, Any]]) -> None:
        self.session.new_items.append({"api": "chat", "messages": list(messages)})
