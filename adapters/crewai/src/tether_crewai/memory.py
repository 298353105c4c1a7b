"""A crew's conversation over a Tether memory store (README.md, "How it works": Memory).

CrewAI keeps no conversation between kickoffs (a crew run is a fresh set of task executions);
its own ``memory=True`` is a vector store of extracted facts on local disk, which Tether refuses
(not durable, embeddings outside the seam). What a ``memoryKey`` keeps is the conversation with
the crew — one item per successful run, with the tool calls its agents made::

    memory segment (one per successful run) =
        [{"input": <prompt>, "steps": [{"tool": name, "arguments": {...}, "result": text}, ...],
          "output": <the crew's answer>}]

Before a run every committed exchange is rendered as a transcript (prompt, tool calls and their
results, answer) and handed to the crew as the ``{history}`` input (the declarative crew's task
starts with it). The agents' own prompts and intermediate texts, and delegation between agents,
are not kept: they are journaled for replay, not memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tether.agent import AgentSession


class Transcript:
    """The exchanges of a ``memory_key`` with the crew."""

    def __init__(self, session: AgentSession) -> None:
        self.session = session

    def exchanges(self) -> list[dict[str, Any]]:
        """Every exchange committed by earlier runs, oldest first."""
        return [item for item in self.session.history if isinstance(item, dict) and "input" in item]

    def render(self) -> str:
        """The transcript as task text (empty without history)."""
        if not (exchanges := self.exchanges()):
            return ""
        lines = ["Conversation so far:"]
        for e in exchanges:
            lines.append(f"User: {e['input']}")
            for step in e.get("steps", []):
                lines.append(
                    f"Tool call: {step['tool']}({json.dumps(step.get('arguments', {}), sort_keys=True)}) returned: {step.get('result', '')}"
                )
            lines.append(f"Assistant: {e.get('output', '')}")
        return "\n".join(lines) + "\n\nNow the user says:\n"

    def add(self, prompt: str, answer: str, task_messages: Iterable[Iterable[Any]] = ()) -> None:
        """This run's exchange (committed with the run, if it succeeds)."""
        if self.session.memory is not None:
            steps = [step for messages in task_messages for step in tool_steps(messages)]
            self.session.new_items.append({"input": prompt, "steps": steps, "output": answer})


def tool_steps(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """The tool calls and results in one task's messages (CrewAI's ``TaskOutput.messages``, in
    the Chat Completions shape: assistant ``tool_calls``, then ``tool`` messages)."""
    calls: dict[str, dict[str, Any]] = {}
    steps = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        for call in m.get("tool_calls") or []:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except (TypeError, ValueError):
                arguments = function.get("arguments")
            calls[call.get("id", "")] = {"tool": function.get("name", "?"), "arguments": arguments}
        if m.get("role") == "tool":
            step = calls.get(m.get("tool_call_id", ""), {"tool": m.get("name", "?"), "arguments": {}})
            steps.append({**step, "result": m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))})
    return steps
