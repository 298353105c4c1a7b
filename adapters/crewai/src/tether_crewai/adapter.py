"""The CrewAI adapter: CrewAI's own ``Crew.kickoff`` with every model request in the wire seam.

CrewAI's ``LLM("gpt-4o-mini")`` is an ``OpenAICompletion`` (Chat Completions through the
``openai`` SDK). Tether runs a *copy* of the crew (``Crew.copy()``, CrewAI's own deep copy of
agents and tasks) in which every model — each agent's ``llm`` and ``function_calling_llm``, the
hierarchical process's ``manager_llm`` / ``manager_agent`` — is a copy of the user's LLM whose
OpenAI clients (sync and async) use the seam's in-process transports and whose base URL is the
run's upstream. The user's crew is never changed.

    declarative     Crew(agents=[Agent(llm=LLM(model), tools=[crewai_tool(t)...])],
                         tasks=[Task(description="{history}{input}")])
    bring-your-own  a ``Crew`` (or ``"pkg.mod:name"``, a factory is called); its tasks take the
                    prompt as ``{input}`` (and, with a memory key, the transcript as ``{history}``)

Tools: a Tether tool becomes a CrewAI tool (:func:`crewai_tool`) whose every call goes through
the tool seam; a terminal failure reaches the model as text, an approval suspends the run. Tools
of a user-built crew that are not Tether tools — CrewAI's own delegation tools included — run
unjournaled (the model turns of a delegated-to agent are journaled at the wire all the same).

Errors: CrewAI re-runs a whole task when an agent raises (``Agent.max_retry_limit``, default 2),
which sends the failed provider request again from its error handler, and retries a 429 three
times around the ``openai`` client's own retries. The routed copy sets ``max_retry_limit`` to 0 and
the kickoff turns the rate-limit loop off: a provider error reaches the crew once, and the next
attempt is Tether's (a recoverable error is not recorded and runs again; a terminal one replays).

Memory: see ``memory.py``. CrewAI's own ``memory=True`` (embeddings and a local LanceDB store),
``knowledge_sources`` and ``planning`` are refused: they keep state or call models outside the seam.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from typing import Any, cast

from crewai import LLM, Agent, Crew, Process, Task
from crewai.llms.providers.openai.completion import OpenAICompletion
from crewai.tools import BaseTool
from crewai.tools import tool as crewai_decorator
from openai import AsyncOpenAI, OpenAI

from tether.agent import Adapter, AgentSession, AgentSpec, Tool, tool_error_text
from tether.errors import ConfigError, ToolError
from tether.tools import call_tool_sync

from .memory import Transcript

#: The task text of a declarative crew: the transcript of earlier runs (empty without a memory
#: key), then the prompt.
DECLARATIVE_TASK = "{history}{input}"


def telemetry_off() -> None:
    """Undo what CrewAI's telemetry set up if CrewAI was imported before ``tether_crewai`` (it
    reads ``CREWAI_DISABLE_TELEMETRY`` once, when it starts): its exporter is shut down and its
    signal handlers — which turn a SIGTERM into ``SystemExit(0)``, an exit that looks like
    success — give way to the ones it replaced."""
    import signal
    import threading

    from crewai.telemetry import Telemetry

    telemetry = Telemetry()
    telemetry._shutdown()
    telemetry.ready = False
    if threading.current_thread() is threading.main_thread():
        for sig, handler in getattr(telemetry, "_original_handlers", {}).items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        telemetry._original_handlers = {}


def crewai_tool(t: Tool) -> BaseTool:
    """A Tether tool as a CrewAI tool: CrewAI builds the schema from the tool's own signature and
    docstring; every call goes through the tool seam (journaled, never run twice in a run)."""
    signature = inspect.signature(t.fn, eval_str=True)

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return call_tool_sync(t.spec, dict(signature.bind(*args, **kwargs).arguments))
        except ToolError as e:  # the model sees the failure; the crew goes on
            return tool_error_text(e)

    call.__signature__ = signature.replace(return_annotation=inspect.Signature.empty)  # type: ignore[attr-defined]
    call.__annotations__ = {name: p.annotation for name, p in signature.parameters.items()}
    call.__name__ = call.__qualname__ = t.name
    call.__doc__ = t.description
    return crewai_decorator(t.name)(call)


class SeamLLMs:
    """CrewAI LLMs served through one run's seam; owns the HTTP clients it hands out."""

    def __init__(self, session: AgentSession) -> None:
        self.session = session
        self._clients: list[Any] = []

    def llm(self, llm: Any) -> OpenAICompletion:
        """A copy of ``llm`` (a model name or the user's ``LLM``) whose OpenAI clients are the seam's."""
        if llm is None or isinstance(llm, str):
            llm = LLM(model=llm or "gpt-4o-mini")  # the key from OPENAI_API_KEY, as CrewAI reads it
        if not isinstance(llm, OpenAICompletion):
            raise ConfigError(
                f"tether-crewai routes OpenAI Chat Completions models; {type(llm).__name__} "
                f"({getattr(llm, 'model', '?')}) would bypass the seam (use an OpenAI-compatible LLM)"
            )
        if llm.api != "completions":
            raise ConfigError(f"tether-crewai routes Chat Completions; LLM(api={llm.api!r}) is not supported")
        # The LLM's own base URL (given, or CrewAI's from OPENAI_BASE_URL/OPENAI_API_BASE) is kept,
        # as CrewAI would call it; without one, the run's upstream (docs/endpoints.md).
        own = llm.base_url or llm.api_base
        routed = llm.model_copy(update={"base_url": own or self.session.upstream("openai") + "/v1", "api_base": None})
        if self.session.stream:
            routed.stream = True
        params = routed._get_client_params()
        sync_http = self.session.http_client("openai", sync=True)
        async_http = self.session.http_client("openai")
        self._clients += [sync_http, async_http]
        # CrewAI builds its clients once, from its own fields; the copy gets clients whose
        # transport is the seam (the user's client settings — headers, timeout, retries — kept).
        routed._client = OpenAI(**{**params, "http_client": sync_http})
        routed._async_client = AsyncOpenAI(**{**params, "http_client": async_http})
        return routed

    def route(self, crew: Crew) -> Crew:
        """A copy of the user's crew whose every model call goes through the seam."""
        refuse_unsupported(crew)
        copy = crew.copy()
        # Crew types its agents as BaseAgent; what it runs are Agents (their LLM fields are routed).
        for agent in copy.agents:
            self._route_agent(cast(Agent, agent))
        if copy.manager_agent is not None:
            self._route_agent(cast(Agent, copy.manager_agent))
        if copy.process == Process.hierarchical and copy.manager_agent is None:
            # CrewAI builds its manager from manager_llm (a model name, an LLM) at kickoff.
            copy.manager_llm = self.llm(copy.manager_llm)
        return copy

    def _route_agent(self, agent: Agent) -> None:
        agent.llm = self.llm(agent.llm)
        if agent.function_calling_llm is not None:
            agent.function_calling_llm = self.llm(agent.function_calling_llm)
        agent.max_retry_limit = 0  # no second provider call from CrewAI's error handler
        agent.agent_executor = None  # built again at kickoff, over the routed LLM

    def close(self) -> None:
        for client in self._clients:
            if hasattr(client, "aclose"):
                continue  # async clients are closed by aclose()
            client.close()

    async def aclose(self) -> None:
        self.close()
        for client in self._clients:
            if hasattr(client, "aclose"):
                await client.aclose()
        self._clients.clear()


def refuse_unsupported(crew: Crew) -> None:
    """CrewAI features that would keep state or call models outside the seam are refused, not ignored."""
    if crew.memory:
        raise ConfigError(
            "CrewAI's own memory (memory=True: embeddings and a local store) is not durable under Tether; "
            "use memoryKey (the crew's transcript, passed to tasks as {history})"
        )
    if crew.planning:
        raise ConfigError("Crew(planning=True) calls a planning model outside the seam; it is not supported yet")
    agents = [*crew.agents, *([crew.manager_agent] if crew.manager_agent else [])]
    if crew.knowledge_sources or any(getattr(a, "knowledge_sources", None) for a in agents):
        raise ConfigError("knowledge_sources call an embedder outside the seam; they are not supported yet")
    if any(getattr(a, "memory", None) for a in agents):
        raise ConfigError("an agent's own memory is not durable under Tether; use memoryKey")
    if any(_through_tether(server) for a in agents for server in getattr(a, "mcps", None) or []):
        raise ConfigError(
            "an agent's mcps through Tether (tether.mcp_url / tether.mcp_stdio) are not supported: CrewAI names each MCP tool "
            "after its server's URL or command line (<host>_<port>_<path>_<tool>, cut at 64 characters), which through Tether "
            "holds the loopback proxy's port and token, new every attempt, so no model turn offering the tool could replay; "
            "make the tool a Tether tool (tether_crewai.crewai_tool) instead"
        )


def _through_tether(server: Any) -> bool:
    """Whether an agent's MCP server entry was pointed at Tether's proxy or relay."""
    url = getattr(server, "url", None) or (server if isinstance(server, str) else "")
    args = getattr(server, "args", None) or []
    return bool(re.match(r"^http://127\.0\.0\.1:\d+/r/[^/]+/mcp/", str(url))) or "mcp-relay" in args


def _kickoff(crew: Crew, inputs: dict[str, str]) -> Any:
    """``crew.kickoff`` with CrewAI's own rate-limit retry loop off (it marks a call already inside
    one with this context variable and then calls once): a 429 is retried by the ``openai`` client
    (``max_retries``) and then by Tether's next attempt, not a third time by CrewAI."""
    from crewai.llms import retry

    retry._active_llm_rate_limit_retry.set(True)  # this thread's context only
    return crew.kickoff(inputs=inputs)


def _templates(crew: Crew) -> str:
    return " ".join(f"{t.description} {t.expected_output}" for t in crew.tasks) + " ".join(
        f"{a.role} {a.goal} {a.backstory}" for a in crew.agents
    )


class CrewAIAdapter(Adapter):
    framework = "crewai"
    providers = ("openai",)
    agent_kind = (Crew, "a CrewAI Crew")

    def build(self, spec: AgentSpec, session: AgentSession) -> Crew:
        agent = Agent(
            role=spec.name,
            goal="Answer the user's request, using your tools where they help.",
            backstory=spec.instructions or "You are a helpful assistant.",
            llm=LLM(model=spec.model),
            tools=[crewai_tool(t) for t in spec.tools],
            allow_delegation=False,
            verbose=False,
            **({"max_iter": spec.max_turns} if spec.max_turns else {}),
        )
        task = Task(description=DECLARATIVE_TASK, expected_output="The answer to the user's request.", agent=agent)
        return Crew(agents=[agent], tasks=[task], process=Process.sequential, verbose=False)

    async def run(self, agent: Any, prompt: str, session: AgentSession) -> str:
        if not isinstance(agent, Crew):
            raise ConfigError(f"tether-crewai runs a CrewAI Crew, not {type(agent).__name__}")
        text = _templates(agent)
        if "{input}" not in text:
            raise ConfigError("a crew run by Tether takes the prompt as {input}: no task or agent of this crew mentions it")
        memory = Transcript(session)
        if session.memory is not None and "{history}" not in text:
            raise ConfigError("a crew run with a memory key takes the transcript as {history}: no task or agent mentions it")
        llms = SeamLLMs(session)
        try:
            crew = llms.route(agent) if session.durable else agent
            inputs = {"input": prompt, "history": memory.render()}
            # kickoff is CrewAI's synchronous runner: in a worker thread (it copies the context,
            # so the run stays current), never on the event loop.
            output = await asyncio.to_thread(_kickoff, crew, inputs)
            answer = str(output.raw)
            memory.add(prompt, answer, [t.messages for t in output.tasks_output])
            return answer
        finally:
            await llms.aclose()
