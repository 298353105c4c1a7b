"""Pydantic AI message history over a Tether memory store (README.md, "How it works": Memory).

Pydantic AI's own notion of memory is the message history: ``agent.run(..., message_history=)``
takes the ``ModelMessage`` list of earlier runs and ``result.new_messages()`` gives what a run
added. Tether stores each message as one item, in the JSON form Pydantic AI documents for
persisting history (``ModelMessagesTypeAdapter``)::

    memory segment (one per successful run) = [ModelRequest, ModelResponse, ModelRequest, ...]

Items go through ``ModelMessagesTypeAdapter``'s JSON mode both ways (``dump_json`` /
``validate_json``), so binary parts (images, files) round-trip as base64 exactly as Pydantic AI
writes them; the plain ``to_jsonable_python`` / ``validate_python`` pair would not decode them.

A run loads every committed message (``session.history``), hands them to the agent, and appends
``result.new_messages()`` to ``session.new_items``; the runtime commits them as one segment only
when the run succeeds, so a crash and a retry never store the same turn twice.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from tether.agent import MemoryItems


class MessageHistory(MemoryItems[ModelMessage]):
    """The message history of a ``memory_key``, as Pydantic AI sees it."""

    def encode(self, messages: Sequence[ModelMessage]) -> list[Any]:
        return dump(messages)

    def decode(self, items: Sequence[Any]) -> list[ModelMessage]:
        return load(items)


def dump(messages: Sequence[ModelMessage]) -> list[Any]:
    """Messages as JSON items (Pydantic AI's own serialisation)."""
    items: list[Any] = json.loads(ModelMessagesTypeAdapter.dump_json(list(messages)))
    return items


def load(items: Sequence[Any]) -> list[ModelMessage]:
    """Messages back from JSON items."""
    return ModelMessagesTypeAdapter.validate_json(json.dumps(list(items))) if items else []
