"""The Google ADK adapter: ADK's own ``Runner`` with every Gemini request in the wire seam.

ADK resolves each ``LlmAgent``'s model to a ``Gemini`` model whose ``google.genai.Client`` makes
the HTTP calls. ``Gemini.client_kwargs`` is ADK's documented way to configure that client; Tether
gives it an ``http_options`` whose ``httpx_async_client`` is the seam's in-process transport and
whose base URL is the run's Gemini upstream. Nothing else about the model changes.

    declarative     LlmAgent(model=<seam Gemini>, instruction=..., tools=[FunctionTool(...)])
    bring-your-own  agent.clone() (ADK's own deep copy: sub-agents, sequential/parallel/loop
                    agents), then every LlmAgent in the copy — and every agent wrapped in an
                    ``AgentTool`` — gets its model re-served through the seam; the user's agent
                    object is never changed.

Tools: each Tether tool becomes an ADK ``FunctionTool`` over ``tool.as_function()``, so ADK builds
the declaration from the user's signature and docstring. ADK has no tool-error path that shows the
model a failure (an exception ends the invocation), so a terminal failure is returned as text.
Tools of a bring-your-own agent that are not Tether tools run unjournaled (ADK calls them itself).

Memory: ADK's own notion is the session (its events). A ``memoryKey`` session lives in the Tether
memory store: earlier runs' events are appended to a fresh in-memory ADK session before the run,
and the events this run added are committed (once, if it succeeds) — see ``memory.py``.
"""

from __future__ import annotations

from typing import Any

from google.adk.agents import BaseAgent, LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode  # type: ignore[attr-defined]  # ADK's documented path, not re-exported
from google.adk.models import Gemini
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.agent_tool import AgentTool
from google.adk.tools.function_tool import FunctionTool
from google.genai import types

from tether.agent import Adapter, AgentSession, AgentSpec, Tool
from tether.errors import ConfigError

from .memory import SessionEvents

APP = "tether"
USER = "tether"


def adk_tool(t: Tool) -> FunctionTool:
    """A Tether tool as an ADK ``FunctionTool`` (schema from the user's own signature)."""
    return FunctionTool(t.as_function(errors="return"))


class SeamModels:
    """Gemini models served through one run's seam; owns the HTTP clients it hands out."""

    def __init__(self, session: AgentSession) -> None:
        self.session = session
        self._clients: list[Any] = []

    def gemini(self, model: str | Gemini) -> Gemini:
        """``model`` (a name or the user's ``Gemini``) with its client pointed at the seam; the
        user's client settings (``client_kwargs``, retry options, API version) are kept."""
        if not isinstance(model, (str, Gemini)):
            raise ConfigError(
                f"tether-google-adk routes Gemini models; {type(model).__name__} would bypass the seam (bring a Gemini model)"
            )
        http = self.session.http_client("gemini")
        self._clients.append(http)
        options = types.HttpOptions(base_url=self.session.upstream("gemini"), httpx_async_client=http)
        kwargs: dict[str, Any] = {"http_options": options}
        if key := self.session.api_key("gemini"):
            kwargs["api_key"] = key
        if isinstance(model, str):
            return Gemini(model=model, client_kwargs=kwargs)
        theirs = dict(model.client_kwargs or {})
        theirs.update(kwargs if "api_key" not in theirs else {"http_options": options})
        # A new instance, not model_copy: a copy would share the user's per-loop client cache.
        fields = {name: getattr(model, name) for name in type(model).model_fields if name not in ("client", "client_kwargs", "base_url")}
        return type(model)(**fields, client_kwargs=theirs)

    def route(self, agent: BaseAgent) -> BaseAgent:
        """A copy of the user's agent tree whose every model call goes through the seam."""
        copy = agent.clone()
        self._route_tree(copy)
        return copy

    def _route_tree(self, agent: BaseAgent) -> None:
        if isinstance(agent, LlmAgent):
            agent.model = self.gemini(agent.canonical_model)  # type: ignore[arg-type]
            agent.tools = [self._route_tool(t) for t in agent.tools]
        for sub in agent.sub_agents:
            self._route_tree(sub)

    def _route_tool(self, t: Any) -> Any:
        if isinstance(t, AgentTool):
            return AgentTool(agent=self.route(t.agent), skip_summarization=t.skip_summarization)
        return t

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()
        self._clients.clear()


class GoogleADKAdapter(Adapter):
    framework = "google-adk"
    providers = ("gemini",)
    agent_kind = (BaseAgent, "a Google ADK agent")

    def build(self, spec: AgentSpec, session: AgentSession) -> LlmAgent:
        return LlmAgent(
            name=spec.name,
            model=spec.model,
            instruction=spec.instructions or "",
            tools=[adk_tool(t) for t in spec.tools],
        )

    async def run(self, agent: Any, prompt: str, session: AgentSession) -> str:
        models = SeamModels(session)
        try:
            routed = models.route(agent) if session.durable else agent
            sessions = InMemorySessionService()
            memory = SessionEvents(session)
            adk_session = await sessions.create_session(app_name=APP, user_id=USER)
            for event in memory.load():
                await sessions.append_event(adk_session, event)
            before = len(adk_session.events)
            config = RunConfig(
                streaming_mode=StreamingMode.SSE if session.stream else StreamingMode.NONE,
                max_llm_calls=session.max_turns or 500,
            )
            runner = Runner(app_name=APP, agent=routed, session_service=sessions)
            answer = ""
            message = types.Content(role="user", parts=[types.Part(text=prompt)])
            async for event in runner.run_async(user_id=USER, session_id=adk_session.id, new_message=message, run_config=config):
                if event.is_final_response() and event.content and event.content.parts and not event.partial:
                    answer = "".join(p.text or "" for p in event.content.parts if not p.thought) or answer
            done = await sessions.get_session(app_name=APP, user_id=USER, session_id=adk_session.id)
            memory.add((done.events if done else [])[before:])
            return answer
        finally:
            await models.aclose()
