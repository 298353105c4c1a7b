"""Pins the one private attribute of Pydantic AI that Tether uses: ``Model._provider``.

``route_model`` copies a user's model object and sets ``_provider`` on the copy so its requests
go through the seam while class, name, settings and profile stay the user's. If an upgrade renames
it, the copy would silently keep talking to the original provider (turns not journaled): this
test fails first, naming the attribute and the version Tether was tested with.
"""

from __future__ import annotations

import copy
from importlib.metadata import version

import pytest
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.google import GoogleModel
from pydantic_ai.models.mistral import MistralModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.google import GoogleProvider
from pydantic_ai.providers.mistral import MistralProvider
from pydantic_ai.providers.openai import OpenAIProvider

TESTED_WITH = "2.68.0"  # pydantic-ai-slim, envs/pydantic-ai.in


def _why(cls: type) -> str:
    return (
        f"tether_pydantic_ai.adapter.route_model sets {cls.__name__}._provider on a copy of the user's model; "
        f"pydantic-ai-slim {version('pydantic-ai-slim')} no longer reads it (Tether was tested with {TESTED_WITH}). "
        "Update route_model before upgrading."
    )


CASES = [
    (OpenAIChatModel, lambda url: OpenAIProvider(base_url=url + "/v1", api_key="sk-test"), lambda m: str(m.client.base_url)),
    (OpenAIResponsesModel, lambda url: OpenAIProvider(base_url=url + "/v1", api_key="sk-test"), lambda m: str(m.client.base_url)),
    (AnthropicModel, lambda url: AnthropicProvider(base_url=url, api_key="sk-test"), lambda m: str(m.client.base_url)),
    (MistralModel, lambda url: MistralProvider(base_url=url, api_key="test"), lambda m: str(m.provider.base_url)),
    (GoogleModel, lambda url: GoogleProvider(base_url=url, api_key="test"), lambda m: str(m.provider.base_url)),
]


@pytest.mark.parametrize(("cls", "make_provider", "served_by"), CASES, ids=[c[0].__name__ for c in CASES])
def test_model_provider_attribute_routes_the_copy(cls, make_provider, served_by) -> None:
    original = cls("some-model", provider=make_provider("http://127.0.0.1:1"))
    assert "_provider" in vars(original), _why(cls)
    routed = copy.copy(original)
    seam = make_provider("http://127.0.0.1:2")
    routed._provider = seam
    assert routed.provider is seam, _why(cls)
    assert "127.0.0.1:2" in served_by(routed), _why(cls)
    assert "127.0.0.1:1" in served_by(original), _why(cls)  # the user's model object is untouched
