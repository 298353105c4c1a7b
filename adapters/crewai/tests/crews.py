"""Crews the adapter tests run: several agents and tasks, sequential and hierarchical, with the
conformance suite's logging tools (tests/conformance/agents.py), and the fake provider's script."""

from __future__ import annotations

import os

# First: importing tether_crewai switches CrewAI's telemetry off before CrewAI starts.
from tether_crewai import crewai_tool

# isort: split
from crewai import Agent, Crew, Process, Task

MODEL = "gpt-4o-mini"

#: Model turns and tool executions of each crew when run uninterrupted.
TURNS = {"sequential": 4, "hierarchical": 5}
TOOL_CALLS = {"sequential": 2, "hierarchical": 2}
PROMPTS = {"sequential": "crew: the weather in Paris and what is known about it", "hierarchical": "manage: a report on Paris"}

SCRIPT = {
    "conversations": [
        # A one-task crew with a memory key (test_crewai.py).
        {"match": "my name", "turns": [{"text": "Noted, Ada."}]},
        # The writer's task (both crews' second step): no tools, one answer.
        {"match": "summarise:", "turns": [{"text": "Summary: Paris is sunny and has two million people."}]},
        # The manager delegates to the researcher (CrewAI's own delegation tool), then answers.
        {
            "match": "manage:",
            "turns": [
                {
                    "tool_calls": [
                        {
                            "name": "delegate_work_to_coworker",
                            "arguments": {
                                "task": "research: Paris",
                                "context": "The user wants a report on Paris.",
                                "coworker": "researcher",
                            },
                        }
                    ]
                },
                {"text_from_tool_results": True, "text": "Manager's report:"},
            ],
        },
        # The researcher: two tools one after the other, then a report quoting them.
        {
            "match": "",
            "turns": [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                {"tool_calls": [{"name": "lookup", "arguments": {"topic": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Research:"},
            ],
        },
    ]
}


def crew(process: str, tools: list) -> Crew:
    """A researcher with the tools and a writer; sequential: each has a task, handed on as
    context; hierarchical: a manager (built by CrewAI from ``manager_llm``) delegates."""
    by_name = {t.name: t for t in tools}
    researcher = Agent(
        role="researcher",
        goal="Find facts.",
        backstory="You research with your tools.",
        llm=MODEL,
        tools=[crewai_tool(by_name["get_weather"]), crewai_tool(by_name["lookup"])],
    )
    writer = Agent(role="writer", goal="Summarise research.", backstory="You write short summaries.", llm=MODEL)
    if process == "sequential":
        research = Task(description="{input}", expected_output="Research notes.", agent=researcher)
        summary = Task(description="summarise: the research for the user.", expected_output="A short summary.", agent=writer)
        return Crew(agents=[researcher, writer], tasks=[research, summary], process=Process.sequential)
    report = Task(description="{input}", expected_output="A report.")
    return Crew(agents=[researcher, writer], tasks=[report], process=Process.hierarchical, manager_llm=MODEL)


# -- one attempt in its own process (forked from a zygote, as the conformance suite does) --------


def preload() -> None:
    """Imports every attempt needs (CrewAI: seconds), once, before the zygote forks."""
    import tether_crewai  # noqa: F401


def child(args: dict) -> int:
    """Run ``args["process"]``'s crew once; SIGKILL right after model turn ``kill_after_turn`` was
    recorded, like a node dying mid-run. Prints the result as one JSON line."""
    import asyncio
    import json
    import signal

    from tests.conformance.agents import TOOLS  # defining a tool imports Flyte: not in the zygote
    from tether_crewai import run_agent

    turns = 0

    def on_step(event) -> None:
        nonlocal turns
        turns += event.kind == "model"
        if args["kill_after_turn"] and turns >= args["kill_after_turn"]:
            os.kill(os.getpid(), signal.SIGKILL)

    process = args["process"]
    result = asyncio.run(
        run_agent(
            PROMPTS[process],
            agent=crew(process, TOOLS),
            run_id=args["run_id"],
            store=args["store"],
            upstreams={"openai": f"{args['origin']}/openai"},
            on_step=on_step,
        )
    )
    keys = ("status", "output", "attempt", "model_live", "model_replayed", "tool_live", "tool_replayed")
    print(json.dumps({k: getattr(result, k) for k in keys}), flush=True)
    return 0
