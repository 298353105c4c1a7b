"""What only CrewAI has: crews of several agents and tasks (sequential and hierarchical), its
task-retry error handler, its own memory, telemetry, and which tools of a user-built crew are
journaled. The shared conformance suite covers the rest.

Every test runs CrewAI's real ``Crew.kickoff`` and the real ``openai`` client against the fake
OpenAI provider over HTTP. The kill tests SIGKILL a real process (forked from a warm zygote, as
the conformance suite does) right after a model turn was recorded, then run the same run id again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

# First: importing tether_crewai switches CrewAI's telemetry off before CrewAI starts.
from tether_crewai import crewai_tool, run_agent, tool

# isort: split
import crews
import openai
import pytest
from crewai import LLM, Agent, BaseLLM, Crew, Task
from crewai.tools import tool as crewai_decorator

from tests.support.zygote import Zygote
from tether.errors import ConfigError
from tether.journal import read_records
from tether.testing.fake_provider import FakeProvider, Fault
from tether.testing.script import Script

HERE = Path(__file__).resolve().parent
executions: list[str] = []


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    executions.append(f"get_weather:{city}")
    return f"The weather in {city} is sunny, 21 C."


@tool
def lookup(topic: str) -> str:
    """Look a topic up in the knowledge base."""
    executions.append(f"lookup:{topic}")
    return f"{topic} is a city of two million people."


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    executions.clear()
    os.environ.setdefault("OPENAI_API_KEY", "sk-crewai-tests")
    with FakeProvider(Script.from_dict(crews.SCRIPT), seed=5) as provider:
        yield provider


def options(fake: FakeProvider, tmp_path: Path, run_id: str, **extra: object) -> dict:
    return {"run_id": run_id, "store": str(tmp_path / "store"), "upstreams": {"openai": f"{fake.url}/openai"}, **extra}


# -- a crew killed at every turn --------------------------------------------------------------


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    env = {"OPENAI_API_KEY": "sk-crewai-tests", "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = env["PYTHONPATH"]  # the zygote puts the repo root before it
    try:
        with Zygote("crews:child", prepare="crews:preload", env=env) as z:
            yield z
    finally:
        os.environ.pop("PYTHONPATH") if saved is None else os.environ.update(PYTHONPATH=saved)


EXPECTED = {
    "sequential": "Summary: Paris is sunny and has two million people.",
    "hierarchical": "Manager's report: Research: Paris is a city of two million people.",
}
CASES = [(process, k) for process in ("sequential", "hierarchical") for k in range(1, crews.TURNS[process] + 1)]


@pytest.mark.parametrize(("process", "k"), CASES, ids=[f"{p}-{k}" for p, k in CASES])
def test_crew_killed_after_turn_k_resumes_without_repeating(zygote, fake, tmp_path, process, k):
    """Killed after turn k: the retry replays turns ≤ k with 0 live calls, runs the rest live
    once, never runs a finished tool again, and answers what an uninterrupted crew answers."""
    log = tmp_path / "tools.jsonl"
    log.touch()
    args = {"process": process, "run_id": f"{process}-{k}", "store": str(tmp_path / "store"), "origin": fake.url}

    def attempt(name: str, kill_after_turn: int) -> dict:
        job = {**args, "kill_after_turn": kill_after_turn}
        outcome: dict = zygote.run(job, tmp_path, name, env={"TETHER_TOOL_LOG": str(log)}, timeout_s=180)
        return outcome

    # Turn k+1's request may leave before turn k's record is durable (the record is written
    # beside it), so its answer is held back: the kill after turn k's step comes before it.
    fake.inject(Fault("slow_first_byte:120", after=k))
    killed = attempt("killed", k)
    fake.clear_faults()  # not taken if turn k+1 had not been asked yet
    assert killed["signal"] == 9, killed["stderr"][-3000:]
    assert fake.live_calls() == k
    tools_before = [json.loads(line) for line in log.read_text().splitlines()]
    retry = attempt("retry", 0)
    assert retry["exit"] == 0, retry["stderr"][-5000:]
    result = json.loads(retry["stdout"].strip().splitlines()[-1])
    assert (result["status"], result["attempt"], result["output"]) == ("succeeded", 2, EXPECTED[process])
    assert (result["model_replayed"], result["model_live"]) == (k, crews.TURNS[process] - k)
    assert fake.live_calls() == crews.TURNS[process]  # each turn paid exactly once
    tools = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(tools) == crews.TOOL_CALLS[process]  # each tool ran once over both attempts
    assert result["tool_replayed"] == len(tools_before)


# -- errors ----------------------------------------------------------------------------------


def declarative(fake: FakeProvider, tmp_path: Path, run_id: str) -> dict:
    return {"model": "gpt-4o-mini", "tools": [get_weather, lookup], **options(fake, tmp_path, run_id)}


async def test_a_provider_error_reaches_the_crew_once(fake, tmp_path):
    """CrewAI re-runs a task whose agent raised (``max_retry_limit``, default 2), sending the same
    request again from its error handler. Under Tether the provider is called once; the terminal
    400 is recorded, so the next attempt gets the same error without calling it."""
    fake.inject(Fault("status:400"))
    with pytest.raises(openai.BadRequestError):
        await run_agent("crew: Paris", **declarative(fake, tmp_path, "bad"))
    assert len(fake.ledger) == 1 and fake.ledger[0].status == 400  # every request that reached it
    with pytest.raises(openai.BadRequestError):
        await run_agent("crew: Paris", **declarative(fake, tmp_path, "bad"))
    assert len(fake.ledger) == 1 and executions == []


async def test_a_rate_limit_is_retried_by_the_client_only(fake, tmp_path):
    """CrewAI wraps every LLM call in its own rate-limit retry (3 tries) around the ``openai``
    client's (``max_retries=2``): 9 requests for one 429ing turn. Under Tether the client's 3 only;
    the 429 is not recorded, so the next attempt calls the provider again."""
    fake.inject(Fault("status:429", times=20))
    with pytest.raises(openai.RateLimitError):
        await run_agent("crew: Paris", **declarative(fake, tmp_path, "limited"))
    assert len(fake.ledger) == 3 and {e.status for e in fake.ledger} == {429}


async def test_your_crew_is_never_changed(fake, tmp_path):
    """The adapter runs a routed copy: the user's agents keep their LLMs and retry settings."""
    crew = crews.crew("sequential", [get_weather, lookup])
    agent = crew.agents[0]
    assert isinstance(agent, Agent) and isinstance(agent.llm, BaseLLM)
    llm = agent.llm
    result = await run_agent(crews.PROMPTS["sequential"], agent=crew, **options(fake, tmp_path, "untouched"))
    assert result.status == "succeeded" and result.model_live == 4
    assert agent.llm is llm and llm.base_url is None and agent.max_retry_limit == 2


async def test_an_llm_with_its_own_base_url_keeps_it(fake, tmp_path):
    """An LLM given its own ``base_url`` is called there, as CrewAI would (the run's upstream is for
    LLMs that name none): journaled and replayed all the same."""
    own = LLM(model="gpt-4o-mini", base_url=fake.base_url("openai"))
    researcher = Agent(role="researcher", goal="Find facts.", backstory="You research.", llm=own, tools=[crewai_tool(get_weather)])
    crew = Crew(agents=[researcher], tasks=[Task(description="{input}", expected_output="Notes.", agent=researcher)])
    where = {"run_id": "own-url", "store": str(tmp_path / "store"), "upstreams": {"openai": "http://127.0.0.1:9"}}  # nothing listens
    first = await run_agent("crew: Paris", agent=crew, **where)
    assert first.status == "succeeded" and first.model_live == fake.live_calls() > 0
    again = await run_agent("crew: Paris", agent=crew, **where)
    assert again.output == first.output and again.model_live == 0 and again.model_replayed == first.model_live


# -- bring your own: which tools are journaled ------------------------------------------------


async def test_plain_crewai_tools_of_your_own_crew_are_not_journaled(fake, tmp_path):
    """Said plainly in the README: a CrewAI tool over a plain function (not a Tether tool) is
    called by CrewAI itself, so it runs again on a retry; the Tether tool beside it does not."""
    plain_runs: list[str] = []

    @crewai_decorator("get_weather")
    def plain_weather(city: str) -> str:
        """Get the current weather in a city."""
        plain_runs.append(city)
        return f"The weather in {city} is sunny, 21 C."

    def crew() -> Crew:
        agent = Agent(
            role="mixed", goal="Answer.", backstory="You use tools.", llm="gpt-4o-mini", tools=[plain_weather, crewai_tool(lookup)]
        )
        return Crew(agents=[agent], tasks=[Task(description="{input}", expected_output="An answer.", agent=agent)])

    first = await run_agent("mixed: Paris", agent=crew(), **options(fake, tmp_path, "mixed"))
    second = await run_agent("mixed: Paris", agent=crew(), **options(fake, tmp_path, "mixed"))
    assert second.output == first.output and second.model_live == 0 and second.tool_replayed == 1
    assert plain_runs == ["Paris", "Paris"] and executions == ["lookup:Paris"]


# -- what is refused rather than ignored ------------------------------------------------------


def one_task_crew(description: str = "{input}", **crew_options: object) -> Crew:
    agent = Agent(role="solo", goal="Answer.", backstory="You answer.", llm="gpt-4o-mini")
    return Crew(agents=[agent], tasks=[Task(description=description, expected_output="An answer.", agent=agent)], **crew_options)


@pytest.mark.parametrize(
    ("crew", "memory_key", "reason"),
    [
        (lambda: one_task_crew(memory=True), None, "CrewAI's own memory"),
        (lambda: one_task_crew(planning=True), None, "planning=True"),
        (lambda: one_task_crew("Answer the user."), None, "takes the prompt as {input}"),
        (lambda: one_task_crew(), "alice", "takes the transcript as {history}"),
    ],
    ids=["crew-memory", "planning", "no-input", "memory-key-without-history"],
)
async def test_what_would_be_lost_is_refused(fake, tmp_path, crew, memory_key, reason):
    with pytest.raises(ConfigError, match=reason):
        await run_agent("crew: Paris", agent=crew(), memory_key=memory_key, **options(fake, tmp_path, "refused"))
    assert fake.live_calls() == 0


async def test_models_that_would_bypass_the_seam_are_refused(fake, tmp_path):
    agent = Agent(role="solo", goal="Answer.", backstory="You answer.", llm=LLM(model="gpt-4o-mini", api="responses", api_key="sk-x"))
    crew = Crew(agents=[agent], tasks=[Task(description="{input}", expected_output="An answer.", agent=agent)])
    with pytest.raises(ConfigError, match="routes Chat Completions"):
        await run_agent("crew: Paris", agent=crew, **options(fake, tmp_path, "responses"))
    assert fake.live_calls() == 0


async def test_a_crew_with_a_memory_key_sees_the_earlier_exchanges(fake, tmp_path):
    """memoryKey keeps the conversation with the crew: the second run's first request carries the
    first run's prompt and answer (through ``{history}``), stored once each."""
    from tether.memory import Memory
    from tether.stores import open_store

    def crew() -> Crew:
        return one_task_crew("{history}{input}")

    first = await run_agent("remember: my name is Ada", agent=crew(), memory_key="ada", **options(fake, tmp_path, "m1"))
    await run_agent("what is my name?", agent=crew(), memory_key="ada", **options(fake, tmp_path, "m2"))
    record = next(r for r in read_records(open_store(str(tmp_path / "store")), "m2") if r.kind == "model")
    assert first.output is not None
    request = json.dumps(record.request)
    assert "remember: my name is Ada" in request and first.output in request and "what is my name?" in request
    items = Memory(open_store(str(tmp_path / "store")), "default", "ada").load()
    assert [(i["input"], i["steps"]) for i in items] == [("remember: my name is Ada", []), ("what is my name?", [])]
    assert items[0]["output"] == first.output


def test_crewai_telemetry_and_tracing_are_off():
    from crewai.events.listeners.tracing.utils import should_enable_tracing
    from crewai.telemetry import Telemetry

    assert Telemetry._is_telemetry_disabled() and not should_enable_tracing()
    assert not Telemetry().ready and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None)


def test_telemetry_is_off_even_when_crewai_was_imported_first(tmp_path):
    """CrewAI reads CREWAI_DISABLE_TELEMETRY once, when it starts: imported before tether_crewai,
    its telemetry is live and a SIGTERM becomes SystemExit(0). Importing tether_crewai undoes both."""
    code = (
        "import signal, crewai\n"
        "from crewai.telemetry import Telemetry\n"
        "before = Telemetry().ready, signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL\n"
        "import tether_crewai\n"
        "print(before, (Telemetry().ready, signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CREWAI_", "OTEL_"))}
    proc = subprocess.run([sys.executable, "-c", code], env={**env, "HOME": str(tmp_path)}, capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip().splitlines()[-1] == "(True, True) (False, False)", proc.stderr[-3000:]
