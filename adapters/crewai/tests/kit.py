"""Conformance kit for the CrewAI adapter (see tests/conformance/conftest.py).

TETHER_KIT=adapters/crewai/tests/kit.py python -m pytest tests/conformance
"""

from __future__ import annotations

FRAMEWORK = "crewai"
MODEL = "gpt-4o-mini"
PROTOCOL = "openai-chat"

MULTI_PROMPT = "delegate: ask the weather agent about Paris"

#: A sequential crew of two agents and two tasks. The weather agent's task is the prompt: it calls
#: get_weather, then reports; the writer's task ("summarise:", with the report as CrewAI's task
#: context) answers without tools. Hierarchical crews are tested in test_crewai.py.
MULTI_SCRIPT = [
    {"match": "summarise:", "turns": [{"text": "Summary: the weather agent reports sunny weather in Paris."}]},
    {
        "match": "delegate:",
        "turns": [
            {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
            {"text_from_tool_results": True, "text": "Weather report:"},
        ],
    },
]


def multi_agent(tools: list) -> object:
    """A crew as CrewAI documents one: agents with roles, tasks handed from one to the next (model
    names only: the adapter routes every agent's LLM through the seam)."""
    from crewai import Agent, Crew, Process, Task

    from tether_crewai import crewai_tool

    by_name = {t.name: t for t in tools}
    weather = Agent(
        role="weather agent",
        goal="Find out the weather.",
        backstory="You answer questions about the weather.",
        llm=MODEL,
        tools=[crewai_tool(by_name["get_weather"])],
    )
    writer = Agent(role="writer", goal="Summarise reports for the user.", backstory="You write short summaries.", llm=MODEL)
    report = Task(description="{input}", expected_output="A weather report.", agent=weather)
    summary = Task(description="summarise: the weather report for the user.", expected_output="A short summary.", agent=writer)
    return Crew(agents=[weather, writer], tasks=[report, summary], process=Process.sequential)
