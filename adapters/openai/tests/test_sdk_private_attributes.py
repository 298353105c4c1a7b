"""Pins the one private attribute of the OpenAI Agents SDK that Tether uses: the models' ``_client``.

``tether_openai.adapter._routed_models`` swaps ``_client`` on an agent's own
``OpenAIResponsesModel`` / ``OpenAIChatCompletionsModel`` for one whose transport is the seam, and
puts it back afterwards. If an upgrade renames it, the agent's turns would silently bypass the
journal: this test fails first, naming the attribute and the version Tether was tested with.
"""

from __future__ import annotations

from importlib.metadata import version

import pytest
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.models.openai_responses import OpenAIResponsesModel
from openai import AsyncOpenAI

TESTED_WITH = "0.24.0"  # openai-agents, envs/openai.in


def _why(cls: type) -> str:
    return (
        f"tether_openai.adapter._routed_models swaps {cls.__name__}._client to route an agent's own client through the seam; "
        f"openai-agents {version('openai-agents')} no longer uses it (Tether was tested with {TESTED_WITH}). "
        "Update _routed_models before upgrading."
    )


@pytest.mark.parametrize("cls", [OpenAIResponsesModel, OpenAIChatCompletionsModel], ids=lambda c: c.__name__)
async def test_model_client_attribute_is_what_requests_use(cls: type) -> None:
    own = AsyncOpenAI(base_url="http://127.0.0.1:1/v1", api_key="sk-test")
    seam = AsyncOpenAI(base_url="http://127.0.0.1:2/v1", api_key="sk-test")
    model = cls("gpt-4o-mini", openai_client=own)
    assert vars(model).get("_client") is own, _why(cls)
    model._client = seam
    assert "127.0.0.1:2" in str(model._get_client().base_url), _why(cls)
    await own.close()
    await seam.close()
