"""The Mistral adapter: the ``mistralai`` SDK with every request in the wire seam.

The SDK takes its HTTP client as ``Mistral(async_client=...)`` and its address only as
``server_url`` (no environment variable): Tether hands it an ``httpx2`` client whose transport is
the seam, and the run's Mistral upstream.

    conversations (default)  the SDK's own agent loop, ``client.beta.conversations.run_async``
                             (``run_stream_async`` when streaming) over a ``RunContext`` with the
                             tools registered: start, then one append per tool turn; the history
                             lives on Mistral's server.
    chat                     ``client.chat.complete_async`` / ``stream_async``: the SDK has no loop
                             for chat completions, so the adapter runs the usual one — call, run
                             the tool calls in order, send their results, until an answer.

A declarative model ``mistral-chat:<model>`` picks chat completions, ``mistral-agent:<agent id>``
a server-side Mistral agent; any other Mistral model name runs on conversations. Bring your own
agent as a :class:`MistralAgent` (its ``agents`` are other MistralAgents the model can delegate
to, each offered as a tool that runs that agent's own loop), or ``MistralAgent(agent_id=...)`` for
an agent created on Mistral's server (``client.beta.agents.create``): the conversation starts with
that agent and its server-side handoffs happen inside the start/append responses, so they are
recorded and replayed with the turn that holds them.

Server-side state: a retry of an append that reached the server in an attempt that died before
recording it is resolved by the seam (``tether.wire.protocols.mistral.MistralConversations``): it
reads the conversation back and records the answer the server already gave, never appending twice.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from mistralai.client import Mistral
from mistralai.extra.run.context import RunContext
from mistralai.extra.run.result import RunResult
from mistralai.extra.run.tools import create_tool_call

from tether.agent import Adapter, AgentSession, AgentSpec, Tool
from tether.errors import ConfigError

from .memory import Transcript

APIS = ("conversations", "chat")


@dataclass
class MistralAgent:
    """A Mistral agent: model, instructions, tools (Tether tools) and agents it can delegate to.

    ``api`` is ``"conversations"`` (the SDK's run loop on the Conversations API) or ``"chat"``
    (chat completions). ``completion_args`` go to the API as they are (temperature, ...).

    ``agent_id`` instead of ``model``: an agent that lives on Mistral's server (created with
    ``client.beta.agents.create``, its model, instructions and ``handoffs`` set there). The run's
    conversation starts with it; ``tools`` are the Tether tools behind the function calls of that
    agent and of every agent it can hand off to (the SDK adds them to the entry agent's tools, as
    its ``RunContext`` does).
    """

    model: str = ""
    agent_id: str | None = None
    instructions: str | None = None
    tools: list[Tool] = field(default_factory=list)
    name: str = "agent"
    description: str = ""
    api: str = "conversations"
    agents: list[MistralAgent] = field(default_factory=list)
    completion_args: dict[str, Any] | None = None
    #: The SDK's own MCP clients (``mistralai.extra.mcp``: ``MCPClientStreamableHTTP`` with
    #: ``tether.mcp_url``, ``MCPClientSTDIO`` with ``tether.mcp_stdio``), registered on the run's
    #: ``RunContext``: their tools/call are journaled at the wire (README.md, "MCP servers").
    mcp_clients: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise ConfigError(f"MistralAgent api must be one of {APIS}, not {self.api!r}")
        if not all(isinstance(t, Tool) for t in self.tools):
            raise ConfigError("MistralAgent tools must be Tether tools (tether.tool): others would not be journaled")
        if self.mcp_clients and self.api != "conversations":
            raise ConfigError(
                "MistralAgent mcp_clients run on the Conversations API (the SDK registers them on its RunContext); "
                "chat completions have no MCP client: use api='conversations'"
            )
        if bool(self.model) == bool(self.agent_id):
            raise ConfigError("MistralAgent needs a model or an agent_id (a server-side Mistral agent), not both")
        if self.agent_id:
            # These live on the server-side agent (set them with client.beta.agents.create/update).
            given = [
                n for n, v in (("instructions", self.instructions), ("completion_args", self.completion_args), ("agents", self.agents)) if v
            ]
            if given or self.api != "conversations":
                what = ", ".join(given) or f"api={self.api!r}"
                raise ConfigError(
                    f"MistralAgent(agent_id=...) runs a server-side agent on the Conversations API: {what} cannot be given "
                    "here (set instructions and completion_args on the agent itself, and hand off with its handoffs)"
                )


def tool_schema(fn: Any) -> dict[str, Any]:
    """A function tool's schema, built by the SDK's own builder (signature + docstring)."""
    schema: dict[str, Any] = create_tool_call(fn).model_dump(mode="json", exclude_none=True)
    return schema


def _delegate(agent: MistralAgent, run: Any) -> Any:
    """``agent`` as a function the calling model can use: it runs ``agent``'s own loop on a request."""

    async def delegate(request: str) -> str:
        return str(await run(agent, request, None))

    delegate.__name__ = delegate.__qualname__ = agent.name
    delegate.__doc__ = f"{agent.description or 'Ask the ' + agent.name + ' agent.'}\n\nArgs:\n    request: what to ask the agent."
    return delegate


def _dumped(tools: list[Any]) -> list[Any]:
    return [t.model_dump(mode="json", exclude_none=True, exclude_defaults=True) if hasattr(t, "model_dump") else t for t in tools]


class _AgentsUpdatedOnChange:
    """``beta.agents`` as ``RunContext.prepare_agent_request`` uses it: it reads the server-side
    agent (``get_async``), then writes the agent's tools plus the registered functions back
    (``update``), and every update makes a new version of the agent on the server. Sent only
    when it changes the agent: a retry, or the next run with the same tools, makes none."""

    def __init__(self, agents: Any) -> None:
        self._agents = agents
        self._seen: Any = None

    async def get_async(self, **kwargs: Any) -> Any:
        self._seen = await self._agents.get_async(**kwargs)
        return self._seen

    def update(self, *, agent_id: str, tools: list[Any], completion_args: Any = None, **rest: Any) -> Any:
        seen = self._seen
        unchanged = seen is not None and seen.id == agent_id and completion_args is None and not rest
        if unchanged and _dumped(list(seen.tools or [])) == _dumped(tools):
            return seen
        return self._agents.update(agent_id=agent_id, tools=tools, completion_args=completion_args, **rest)


class LimitedRunContext(RunContext):
    """The SDK's ``RunContext`` with a turn limit: its loop makes one request per tool turn and
    asks the context to run the calls in between, so that is where a run over ``max_turns`` stops.
    With ``agent_id`` the agent is updated only when its tools change (``_AgentsUpdatedOnChange``)."""

    def __init__(self, *args: Any, max_turns: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_turns = max_turns

    async def prepare_agent_request(self, beta_client: Any) -> Any:
        return await super().prepare_agent_request(SimpleNamespace(agents=_AgentsUpdatedOnChange(beta_client.agents)))

    async def execute_function_calls(self, function_calls: Any) -> Any:
        if self.max_turns is not None and self.request_count >= self.max_turns:
            raise RuntimeError(f"no answer after {self.max_turns} turns (max_turns)")
        return await super().execute_function_calls(function_calls)


class Runner:
    """Runs agents for one ``run_agent`` call: one SDK client on the seam, memory, streaming."""

    def __init__(self, session: AgentSession) -> None:
        self.session = session
        self.http = session.http_client("mistral", module="httpx2")
        self.client = Mistral(api_key=session.api_key("mistral") or "", server_url=session.upstream("mistral"), async_client=self.http)

    def functions(self, agent: MistralAgent) -> list[Any]:
        return [t.as_function(errors="return") for t in agent.tools] + [_delegate(a, self.run) for a in agent.agents]

    async def run(self, agent: MistralAgent, prompt: str, memory: Transcript | None) -> str:
        if agent.api == "chat":
            return await self.chat(agent, prompt, memory)
        return await self.conversation(agent, prompt, memory)

    # -- conversations: the SDK's own loop ---------------------------------------------------------
    async def conversation(self, agent: MistralAgent, prompt: str, memory: Transcript | None) -> str:
        # With memory, the conversation starts anew from the committed transcript (see memory.py).
        earlier = memory.entries() if memory else []
        inputs: Any = [*earlier, {"type": "message.input", "role": "user", "content": prompt}] if earlier else prompt
        options: dict[str, Any] = {"inputs": inputs}
        if agent.instructions:
            options["instructions"] = agent.instructions
        if agent.completion_args:
            options["completion_args"] = agent.completion_args
        # With agent_id the SDK reads the agent and updates its tools with the registered functions
        # (unrecorded calls; the update only when the tools change, see LimitedRunContext); the
        # conversation then runs on the server's agents.
        target = {"agent_id": agent.agent_id} if agent.agent_id else {"model": agent.model}
        # continue_on_fn_error: a Tether tool returns its failure as text already; anything else
        # raising in a function (a delegated agent's loop) reaches the model as an error too.
        async with LimitedRunContext(**target, continue_on_fn_error=True, max_turns=self.session.max_turns) as ctx:
            for fn in self.functions(agent):
                ctx.register_func(fn)
            await ctx.register_mcp_clients(agent.mcp_clients)
            result: RunResult | None = None
            if self.session.stream:
                async for event in await self.client.beta.conversations.run_stream_async(run_ctx=ctx, **options):
                    if isinstance(event, RunResult):
                        result = event
            else:
                result = await self.client.beta.conversations.run_async(run_ctx=ctx, **options)
        if result is None:
            raise RuntimeError("the Mistral run ended without a result")
        if memory is not None:
            # This run's own entries: its message and what followed (not the transcript it started from).
            memory.add_conversation(result.conversation_id, [*result.input_entries[len(earlier) :], *result.output_entries])
        return result.output_as_text

    # -- chat completions: the adapter's loop ------------------------------------------------------
    async def chat(self, agent: MistralAgent, prompt: str, memory: Transcript | None) -> str:
        functions = {fn.__name__: fn for fn in self.functions(agent)}
        tools = [tool_schema(fn) for fn in functions.values()] or None
        system = [{"role": "system", "content": agent.instructions}] if agent.instructions else []
        earlier = memory.messages() if memory else []
        new: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        for _ in range(self.session.max_turns or 100):
            message = await self.chat_turn(agent, [*system, *earlier, *new], tools)
            new.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                if memory is not None:
                    memory.add_messages(new)
                return str(message.get("content") or "")
            # The calls of one turn run concurrently (our own loop: nothing orders them); their
            # results go back in the order the model asked.
            results = await asyncio.gather(*(self.call_tool(functions, call) for call in calls))
            new += [
                {"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": content}
                for call, content in zip(calls, results, strict=True)
            ]
        raise RuntimeError(f"no answer after {self.session.max_turns or 100} turns")

    @staticmethod
    async def call_tool(functions: dict[str, Any], call: dict[str, Any]) -> str:
        """One tool call of a chat turn, as the tool message's content (errors as text, for the model)."""
        fn = functions.get(call["function"]["name"])
        arguments = call["function"]["arguments"]
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments or {})
            result = await fn(**args) if fn else f"Error: no tool named {call['function']['name']!r}"
        except (ValueError, TypeError) as e:
            result = f"Error: bad arguments for {call['function']['name']}: {e}"
        return result if isinstance(result, str) else json.dumps(result)

    async def chat_turn(self, agent: MistralAgent, messages: list[dict[str, Any]], tools: Any) -> dict[str, Any]:
        """One chat completion as the assistant message to append (tool calls with string arguments)."""
        options: dict[str, Any] = {"model": agent.model, "messages": messages, **(agent.completion_args or {})}
        if tools:
            options["tools"] = tools
        if not self.session.stream:
            response = await self.client.chat.complete_async(**options)
            message = response.choices[0].message
            if message is None:  # the SDK's type allows it; the API always sends one
                raise RuntimeError("Mistral answered a chat completion without a message")
            content, calls = message.content, message.tool_calls or []
        else:
            content, by_index = "", {}
            async for event in await self.client.chat.stream_async(**options):
                delta = event.data.choices[0].delta
                if isinstance(delta.content, str):
                    content += delta.content
                for c in delta.tool_calls or []:  # Mistral streams each tool call whole
                    by_index[c.index or 0] = c
            calls = [by_index[i] for i in sorted(by_index)]
        out: dict[str, Any] = {"role": "assistant", "content": content if isinstance(content, str) else ""}
        if calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {
                        "name": c.function.name,
                        "arguments": c.function.arguments if isinstance(c.function.arguments, str) else json.dumps(c.function.arguments),
                    },
                }
                for c in calls
            ]
        return out

    async def aclose(self) -> None:
        await self.http.aclose()


class MistralAdapter(Adapter):
    framework = "mistral"
    providers = ("mistral",)
    agent_kind = (MistralAgent, "a tether_mistral.MistralAgent")

    def build(self, spec: AgentSpec, session: AgentSession) -> MistralAgent:
        model, api = spec.model, "conversations"
        if model.startswith("mistral-agent:"):  # a server-side agent, by id: the rest is set on it
            if spec.instructions:
                raise ConfigError(
                    "a mistral-agent:<id> model is a server-side Mistral agent whose instructions live on the agent; "
                    "remove instructions from the spec (or update the agent)"
                )
            return MistralAgent(agent_id=model[len("mistral-agent:") :], tools=list(spec.tools), name=spec.name)
        for prefix in ("mistral-chat:", "mistral-conversations:"):
            if model.startswith(prefix):
                api, model = prefix[len("mistral-") : -1], model[len(prefix) :]
        return MistralAgent(model=model, instructions=spec.instructions, tools=list(spec.tools), name=spec.name, api=api)

    async def run(self, agent: Any, prompt: str, session: AgentSession) -> str:
        if not isinstance(agent, MistralAgent):
            raise ConfigError(f"tether-mistral runs a tether_mistral.MistralAgent, not {type(agent).__name__}")
        runner = Runner(session)
        try:
            memory = Transcript(session, agent.api) if session.memory is not None else None
            return await runner.run(agent, prompt, memory)
        finally:
            await runner.aclose()
