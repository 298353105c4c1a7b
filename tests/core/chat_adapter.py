"""A minimal adapter for the runtime's own tests: the raw ``openai`` SDK's Chat Completions in a
small tool loop, its HTTP client on the wire seam, memory as the message list.

It exercises ``run_agent`` end to end (store, journal, seams, memory, approvals, progress) without
a framework in the core environment. Real adapters never loop themselves: the framework does.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

from openai import AsyncOpenAI

from tether.agent import Adapter, AgentSession, AgentSpec, Tool


def _schema(t: Tool) -> dict[str, Any]:
    params = {
        name: {"type": "integer" if p.annotation in (int, "int") else "string"} for name, p in inspect.signature(t.fn).parameters.items()
    }
    return {
        "type": "function",
        "function": {
            "name": t.name,
            "description": t.description,
            "parameters": {"type": "object", "properties": params, "required": sorted(params)},
        },
    }


class ChatAdapter(Adapter):
    framework = "test-chat"

    def build(self, spec: AgentSpec, session: AgentSession) -> Any:
        client = AsyncOpenAI(base_url=session.upstream() + "/v1", api_key="sk-test", http_client=session.http_client(), max_retries=0)
        return client, spec

    async def run(self, agent: Any, prompt: str, session: AgentSession) -> str:
        client, spec = agent
        tools = {t.name: t for t in spec.tools}
        messages: list[dict[str, Any]] = [*session.history, {"role": "user", "content": prompt}]
        new = len(session.history)
        try:
            for _ in range(8):
                completion = await client.chat.completions.create(
                    model=spec.model, messages=messages, tools=[_schema(t) for t in tools.values()]
                )
                message = completion.choices[0].message
                if not message.tool_calls:
                    messages.append({"role": "assistant", "content": message.content})
                    session.new_items.extend(messages[new:])
                    return message.content or ""
                calls = [
                    {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
                    for c in message.tool_calls
                ]
                messages.append({"role": "assistant", "content": message.content, "tool_calls": calls})
                for call in message.tool_calls:
                    result = await tools[call.function.name](**json.loads(call.function.arguments or "{}"))
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
        finally:
            await client.close()
        raise RuntimeError("no answer after 8 turns")


ADAPTER = ChatAdapter()
