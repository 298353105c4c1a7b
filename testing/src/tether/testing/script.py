"""Scripts: what a fake provider answers, as a pure function of the request.

A script is a list of conversations. The first conversation whose ``match`` is a substring of the
request's first user message (and whose ``system``, when given, is a substring of the request's
system instructions: which agent of a multi-agent run is asking) answers it; an empty ``match``
answers everything. Which of its
turns answers is the number of assistant turns that already requested tools in the request's
history, so a retried request always gets the same kind of answer; past the last turn, the last
turn repeats.

.. code-block:: yaml

    conversations:
      - match: "weather"
        turns:
          - tool_calls:                       # one turn may request several tools in parallel
              - {name: get_weather, arguments: {city: Paris}}
          - text: "It is sunny in Paris."
      - match: "echo"
        turns:
          - tool_calls: [{name: lookup, arguments: {}}]
          - text_from_tool_results: true     # answer quotes the tool results it was sent
      - match: "refund"
        system: "billing agent"               # only the agent whose instructions say so
        turns:
          - text: "Refunded."
      - match: "order"
        system: "You triage"                  # a Mistral server-side agent (its instructions)...
        turns:
          - handoff: refund-agent             # ...hands the conversation to one of its handoffs;
                                              # that agent's own conversation answers in the same response
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class ScriptedCall:
    """A tool call the model asks for."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Turn:
    """One model answer: tool calls, text, or both (text first, as providers order them)."""

    text: str | None = None
    tool_calls: tuple[ScriptedCall, ...] = ()
    text_from_tool_results: bool = False
    #: Name (or id) of the server-side agent this agent hands the conversation to (Mistral agents).
    handoff: str | None = None

    def answer_text(self, tool_results: Sequence[str]) -> str | None:
        """The text to send, quoting ``tool_results`` when the turn asks for it."""
        if not self.text_from_tool_results:
            return self.text
        quoted = "; ".join(tool_results) if tool_results else "(none)"
        return f"{self.text or 'Tool results:'} {quoted}"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Turn:
        unknown = set(data) - {"text", "tool_calls", "text_from_tool_results", "handoff"}
        if unknown:
            raise ValueError(f"unknown turn keys {sorted(unknown)} in {dict(data)!r}")
        calls = tuple(ScriptedCall(name=c["name"], arguments=dict(c.get("arguments") or {})) for c in data.get("tool_calls") or ())
        handoff = str(data["handoff"]) if data.get("handoff") else None
        turn = cls(
            text=data.get("text"), tool_calls=calls, text_from_tool_results=bool(data.get("text_from_tool_results")), handoff=handoff
        )
        if turn.text is None and not turn.tool_calls and not turn.text_from_tool_results and not turn.handoff:
            raise ValueError(f"a turn needs text, tool_calls, text_from_tool_results or handoff: {dict(data)!r}")
        if turn.handoff and turn.tool_calls:
            raise ValueError(f"a turn hands off or calls tools, not both: {dict(data)!r}")
        return turn


@dataclass(frozen=True)
class Conversation:
    match: str
    turns: tuple[Turn, ...]
    system: str = ""

    def turn(self, index: int) -> Turn:
        return self.turns[min(index, len(self.turns) - 1)]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Conversation:
        turns = tuple(Turn.from_dict(t) for t in data.get("turns") or ())
        if not turns:
            raise ValueError(f"conversation {data.get('match', '')!r} has no turns")
        unknown = set(data) - {"match", "system", "turns"}
        if unknown:
            raise ValueError(f"unknown conversation keys {sorted(unknown)} in {dict(data)!r}")
        return cls(match=str(data.get("match") or ""), turns=turns, system=str(data.get("system") or ""))


@dataclass(frozen=True)
class Script:
    conversations: tuple[Conversation, ...]

    def conversation_for(self, first_user_text: str, system_text: str = "") -> Conversation | None:
        return next((c for c in self.conversations if c.match in first_user_text and c.system in system_text), None)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> Script:
        """``{"conversations": [...]}`` or the bare list of conversations."""
        items = (data.get("conversations") or ()) if isinstance(data, Mapping) else data
        return cls(conversations=tuple(Conversation.from_dict(c) for c in items))

    @classmethod
    def from_yaml(cls, path: str | Path) -> Script:
        return cls.from_dict(yaml.safe_load(Path(path).read_text()) or {})

    @classmethod
    def from_json(cls, path: str | Path) -> Script:
        return cls.from_dict(json.loads(Path(path).read_text()))

    @classmethod
    def load(cls, path: str | Path) -> Script:
        """A YAML or JSON file (YAML parses both)."""
        return cls.from_yaml(path)

    @classmethod
    def text(cls, text: str) -> Script:
        """A script that answers every request with ``text``."""
        return cls(conversations=(Conversation(match="", turns=(Turn(text=text),)),))
