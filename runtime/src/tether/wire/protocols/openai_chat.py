"""OpenAI Chat Completions: ``POST .../chat/completions`` (``/v1``, Azure ``/openai/deployments/{d}``)."""

from __future__ import annotations

import re

from .base import COMMON_DROPPED_KEYS, UsageFields, WireProtocol

# Body keys no OpenAI API's answer depends on (on top of COMMON_DROPPED_KEYS: user, metadata,
# safety_identifier, prompt_cache_key, store — who asks and what is kept, not what is asked).
OPENAI_DROPPED_KEYS = COMMON_DROPPED_KEYS | {
    "service_tier",  # processing tier: latency and price, same model, same answer
    "prompt_cache_retention",  # how long the provider keeps its prompt cache: billing only
}
# Query parameters that are credentials; the rest (Azure's `api-version`) selects behaviour: kept.
# No header changes the answer (auth, org, project, SDK telemetry and idempotency headers are all
# dropped).
OPENAI_DROPPED_QUERY = frozenset({"api-key", "api_key"})


class OpenAIChat(WireProtocol):
    name = "openai-chat"
    provider = "openai"
    turn = re.compile(r"(^|/)chat/completions$")
    dropped_keys = OPENAI_DROPPED_KEYS
    # Kept on purpose: `stream` and `stream_options` (include_usage adds a final chunk with empty
    # `choices`, so it changes the stream the client gets), `seed`, `n`, `logit_bias`, `logprobs`...
    dropped_query = OPENAI_DROPPED_QUERY
    # `functions` is the legacy form of `tools`.
    tool_keys = ("tools", "functions")
    # {"type": "function", "function": {"name": ...}} or {"type": "custom", "custom": {"name": ...}};
    # legacy `functions` entries are {"name": ...}.
    tool_name_at = ("function.name", "custom.name", "name")
    # prompt_tokens includes the cached ones; completion_tokens includes reasoning tokens. With
    # stream_options.include_usage the last chunk carries `usage`; the others carry null.
    usage_fields = UsageFields(input=("prompt_tokens",), output=("completion_tokens",), cached=("prompt_tokens_details.cached_tokens",))
    finish_reason_at = ("choices.*.finish_reason",)


PROTOCOL = OpenAIChat()
PROTOCOLS = (PROTOCOL,)
