"""Who serves each wire protocol: upstream base URLs and credentials (kept apart from formats).

An upstream base is the provider's origin plus any path prefix *before* the API version, so
request paths (``/v1/chat/completions``) are the same whichever way a request reaches the seam.
Override per run (``Upstreams(openai="http://vllm.gpu-pool:8000")``) for OpenAI-compatible
servers such as vLLM, Ollama or Azure OpenAI, or with ``TETHER_UPSTREAM_<PROVIDER>``.
"""

from __future__ import annotations

import os

from ..contract import PROVIDER_KEY_ENV

PROVIDERS = ("openai", "anthropic", "gemini", "mistral")

DEFAULT_UPSTREAMS = {
    "openai": "https://api.openai.com",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
    "mistral": "https://api.mistral.ai",
}

#: Environment variable holding each provider's API key (what SDKs read by default).
API_KEY_ENV = PROVIDER_KEY_ENV

#: Request headers and query parameters that carry credentials: never stored, never fingerprinted.
SECRET_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key", "proxy-authorization", "cookie"})
SECRET_QUERY = frozenset({"key", "api_key", "api-key", "access_token"})


def upstreams(overrides: dict[str, str] | None = None) -> dict[str, str]:
    """Default upstreams, then ``TETHER_UPSTREAM_<PROVIDER>``, then ``overrides``."""
    out = dict(DEFAULT_UPSTREAMS)
    for provider in PROVIDERS:
        if env := os.environ.get(f"TETHER_UPSTREAM_{provider.upper()}"):
            out[provider] = env
    out.update({k: v for k, v in (overrides or {}).items() if v})
    return {k: v.rstrip("/") for k, v in out.items()}
