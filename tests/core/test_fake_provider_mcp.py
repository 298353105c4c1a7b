"""The fake Anthropic provider and the Claude CLI's habits: a scripted tool is called by the
MCP name the request offers (``mcp__<server>__<name>``), and the ids it mints ignore ``metadata``
(the caller's per-process session id), so two processes asking the same get the same ids."""

from __future__ import annotations

import anthropic

from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script

SCRIPT = {"conversations": [{"match": "", "turns": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}]}]}
TOOL = {
    "name": "mcp__tether__get_weather",
    "description": "Weather.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def ask(provider: FakeProvider, session: str, tools: list) -> anthropic.types.ToolUseBlock:
    client = anthropic.Anthropic(base_url=provider.base_url("anthropic"), api_key="k", max_retries=0)
    message = client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=64,
        messages=[{"role": "user", "content": "weather?"}],
        tools=tools,
        metadata={"user_id": session},
    )
    [block] = [b for b in message.content if b.type == "tool_use"]
    return block


def test_scripted_tool_is_called_by_its_offered_mcp_name_and_ids_ignore_metadata() -> None:
    with FakeProvider(Script.from_dict(SCRIPT), seed=3) as provider:
        first = ask(provider, "session-1", [TOOL])
        second = ask(provider, "session-2", [TOOL])
        plain = ask(provider, "session-1", [{**TOOL, "name": "get_weather"}])
    assert first.name == "mcp__tether__get_weather" and plain.name == "get_weather"
    assert first.id == second.id
