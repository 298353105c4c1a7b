"""The fake Mistral provider's agents: ``beta.agents`` and conversations started with ``agent_id``,
handoffs included, driven by the real ``mistralai`` SDK over HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mistralai.client import Mistral
from mistralai.client import errors as mistral_errors
from mistralai.client import models as mistral_models

from tether.testing import FakeProvider, Script

KEY = "test-key"
SCRIPT = [
    # The triage agent hands off at once; the refund agent calls a tool, then answers.
    {"match": "refund", "system": "You triage", "turns": [{"handoff": "refund-agent"}]},
    {
        "match": "refund",
        "system": "You issue refunds",
        "turns": [{"tool_calls": [{"name": "refund_order", "arguments": {"order": "A1"}}]}, {"text_from_tool_results": True}],
    },
    # Hands off to an agent that is not among its handoffs.
    {"match": "astray", "system": "You triage", "turns": [{"handoff": "nobody"}]},
]


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with FakeProvider(Script.from_dict(SCRIPT), seed=3) as p:
        yield p


@pytest.fixture
def client(provider: FakeProvider) -> Mistral:
    return Mistral(api_key=KEY, server_url=provider.base_url("mistral"))


def make_agents(client: Mistral) -> tuple[mistral_models.Agent, mistral_models.Agent]:
    refund = client.beta.agents.create(model="mistral-large-latest", name="refund-agent", instructions="You issue refunds.")
    triage = client.beta.agents.create(
        model="mistral-small-latest", name="triage-agent", instructions="You triage requests.", handoffs=[refund.id]
    )
    return triage, refund


def test_agents_are_created_read_and_updated(client):
    triage, refund = make_agents(client)
    assert triage.id.startswith("ag_") and triage.id != refund.id and triage.version == 0
    got = client.beta.agents.get(agent_id=triage.id)
    assert (got.name, got.model, got.instructions, got.handoffs) == (
        "triage-agent",
        "mistral-small-latest",
        "You triage requests.",
        [refund.id],
    )
    tool = {"type": "function", "function": {"name": "find_order", "parameters": {"type": "object", "properties": {}}}}
    updated = client.beta.agents.update(agent_id=triage.id, tools=[tool])
    assert (updated.version, updated.versions, updated.instructions) == (1, [0, 1], "You triage requests.")
    assert [t.function.name for t in client.beta.agents.get(agent_id=triage.id).tools] == ["find_order"]
    with pytest.raises(mistral_errors.SDKError) as missing:
        client.beta.agents.get(agent_id="ag_missing")
    assert missing.value.status_code == 404
    with pytest.raises(mistral_errors.SDKError) as bad_handoff:
        client.beta.agents.create(model="m", name="x", handoffs=["ag_missing"])
    assert bad_handoff.value.status_code == 404


def test_a_handoff_answers_in_the_same_response_and_the_conversation_stays_with_the_next_agent(client, provider):
    triage, refund = make_agents(client)
    started = client.beta.conversations.start(agent_id=triage.id, inputs="I want a refund")
    handoff, call = started.outputs
    assert isinstance(handoff, mistral_models.AgentHandoffEntry)
    assert (handoff.previous_agent_id, handoff.previous_agent_name) == (triage.id, "triage-agent")
    assert (handoff.next_agent_id, handoff.next_agent_name) == (refund.id, "refund-agent")
    assert isinstance(call, mistral_models.FunctionCallEntry) and call.name == "refund_order"
    assert (call.agent_id, call.model) == (refund.id, "mistral-large-latest")  # the refund agent's model answers

    # The append goes to the agent handed to: its next turn answers, quoting the result.
    result = mistral_models.FunctionResultEntry(tool_call_id=call.tool_call_id, result="refunded")
    answer = client.beta.conversations.append(conversation_id=started.conversation_id, inputs=[result])
    [message] = answer.outputs
    assert (message.content, message.agent_id) == ("Tool results: refunded", refund.id)
    history = provider.mistral_history(started.conversation_id)["entries"]
    types = ["message.input", "agent.handoff", "function.call", "function.result", "message.output"]
    assert [e["type"] for e in history] == types


def test_a_streamed_handoff_sends_its_started_and_done_events(client):
    triage, refund = make_agents(client)
    events = [e.data for e in client.beta.conversations.start_stream(agent_id=triage.id, inputs="I want a refund")]
    started = [e for e in events if isinstance(e, mistral_models.AgentHandoffStartedEvent)]
    done = [e for e in events if isinstance(e, mistral_models.AgentHandoffDoneEvent)]
    assert [(e.previous_agent_id, e.output_index) for e in started] == [(triage.id, 0)]
    assert [(e.next_agent_id, e.next_agent_name, e.output_index) for e in done] == [(refund.id, "refund-agent", 0)]
    calls = [e for e in events if isinstance(e, mistral_models.FunctionCallEvent)]
    assert calls and all(e.output_index == 1 and e.agent_id == refund.id for e in calls)


def test_a_handoff_to_an_agent_not_among_its_handoffs_is_refused(client, provider):
    triage, _ = make_agents(client)
    with pytest.raises(mistral_errors.SDKError) as refused:
        client.beta.conversations.start(agent_id=triage.id, inputs="astray")
    assert refused.value.status_code == 400 and "cannot hand off to 'nobody'" in str(refused.value.body)
    with pytest.raises(mistral_errors.SDKError) as unknown:
        client.beta.conversations.start(agent_id="ag_missing", inputs="I want a refund")
    assert unknown.value.status_code == 404


def test_a_handoff_needs_an_agent_and_no_tool_calls():
    with pytest.raises(ValueError, match="hands off or calls tools, not both"):
        Script.from_dict([{"match": "", "turns": [{"handoff": "x", "tool_calls": [{"name": "t"}]}]}])
    with (
        FakeProvider(Script.from_dict([{"match": "", "turns": [{"handoff": "refund-agent"}]}])) as p,
        pytest.raises(mistral_errors.SDKError) as refused,
    ):
        Mistral(api_key=KEY, server_url=p.base_url("mistral")).beta.conversations.start(model="m", inputs="hi")
    assert refused.value.status_code == 400 and "needs a conversation started with agent_id" in str(refused.value.body)
