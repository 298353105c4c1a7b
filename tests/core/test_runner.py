"""run_agent (the public keywords) and the entrypoint (an AgentRun's spec) run the same typed
AgentJob: run_agent hands its parameters over as they are, so they must be the job's fields."""

from __future__ import annotations

import dataclasses
import inspect

from tether.agent.runner import AgentJob, run_agent
from tether.api import AgentRunSpec


def test_run_agents_parameters_are_the_jobs_fields() -> None:
    parameters = inspect.signature(run_agent).parameters
    assert [name for name in parameters if name != "adapter"] == [f.name for f in dataclasses.fields(AgentJob)]
    for f in dataclasses.fields(AgentJob):  # the same defaults: a job built either way runs alike
        default = parameters[f.name].default
        assert f.default == (dataclasses.MISSING if default is inspect.Parameter.empty else default), f.name


def test_an_agent_runs_spec_becomes_the_job_run_agent_would_make() -> None:
    spec = AgentRunSpec.model_validate(
        {
            "framework": "openai",
            "model": {"provider": "openai", "name": "gpt-4o-mini", "baseURL": "http://fake:1/v1"},
            "instructions": "be brief",
            "input": "hi",
            "memoryKey": "m",
            "durable": False,
            "limits": {"maxTurns": 3, "maxCostUSD": 0.5, "unknownCost": "ignore"},
        }
    )
    job = AgentJob.of_agent_run(spec, ["t"], run_id="u-1", store="file:///s", namespace="ns", on_step=None)
    assert job == AgentJob(
        "hi",
        tools=["t"],
        model="gpt-4o-mini",
        instructions="be brief",
        memory_key="m",
        durable=False,
        provider="openai",
        run_id="u-1",
        store="file:///s",
        namespace="ns",
        upstreams={"openai": "http://fake:1"},
        max_turns=3,
        max_cost_usd=0.5,
        unknown_cost="ignore",
    )
    bare = AgentJob.of_agent_run(spec.model_copy(update={"limits": None}), [], run_id="u", store="s", namespace="n", on_step=None)
    assert (bare.max_turns, bare.max_cost_usd, bare.unknown_cost) == (None, None, "stop")
