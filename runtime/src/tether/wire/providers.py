"""Who serves each wire protocol: upstream base URLs and credentials (kept apart from formats).

An upstream base is the provider's origin plus any path prefix *before* the API version, so
request paths (``/v1/chat/completions``) are the same whichever way a request reaches the seam.
Override per run (``upstreams={"openai": "http://vllm.gpu-pool:8000"}``) for OpenAI-compatible
servers such as vLLM, Ollama or Azure OpenAI, or with ``TETHER_UPSTREAM_<PROVIDER>``; the base
URL variables the providers' own SDKs read (:data:`SDK_BASE_URL_ENV`) count too, so an agent set
up for its SDK reaches the same server through Tether (docs/endpoints.md).
"""

from __future__ import annotations

import os
import re

from ..contract import PROVIDER_KEY_ENV
from ..errors import ConfigError

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


#: The base URL variables each provider's SDK reads, and the API version its values end with
#: (which an upstream never carries: the SDK's request paths start with it). openai reads
#: OPENAI_BASE_URL; langchain-openai and CrewAI also OPENAI_API_BASE (in opposite orders, so
#: two different values are refused). The Mistral SDK reads none (``server_url=`` only).
SDK_BASE_URL_ENV: dict[str, tuple[tuple[str, ...], str]] = {
    "openai": (("OPENAI_BASE_URL", "OPENAI_API_BASE"), "/v1"),
    "anthropic": (("ANTHROPIC_BASE_URL",), ""),
    "gemini": (("GOOGLE_GEMINI_BASE_URL",), ""),
}

#: A Tether loopback proxy's base URL (``wire.proxy``): what adapters point these variables at
#: while a run is in progress (``routed_env``), so never an upstream of another run.
_PROXY_URL = re.compile(r"^http://127\.0\.0\.1:\d+/r/[^/]+/[a-z]+(/v1)?/?$")


def sdk_upstream(provider: str) -> str | None:
    """The upstream the provider's SDK would call, from its base URL variable; None when unset.

    Raises ``ConfigError`` naming the variable and its URL when Tether cannot call the same
    server: a URL without the API version the SDK expects, or two variables that disagree."""
    names, version = SDK_BASE_URL_ENV.get(provider, ((), ""))
    found = {n: v.strip().rstrip("/") for n in names if (v := os.environ.get(n, "").strip()) and not _PROXY_URL.match(v.strip())}
    if len(set(found.values())) > 1:
        raise ConfigError(
            " and ".join(f"{n}={v}" for n, v in found.items())
            + f" differ (frameworks disagree on which wins): set one, or TETHER_UPSTREAM_{provider.upper()}"
        )
    if not found:
        return None
    name, url = next(iter(found.items()))
    if not re.match(r"^https?://[^/\s]+", url):
        raise ConfigError(f"{name}={url} is not an http:// or https:// URL")
    if version:
        if not url.endswith(version):
            raise ConfigError(
                f"{name}={url} does not end in {version}: Tether sends the {provider} SDK's requests to the URL before its "
                f"API version; set {name} to end in {version}, or TETHER_UPSTREAM_{provider.upper()} to the URL before it"
            )
        url = url[: -len(version)]
    return url


def upstreams(overrides: dict[str, str] | None = None) -> dict[str, str]:
    """Default upstreams, then the SDKs' base URL variables (:func:`sdk_upstream`), then
    ``TETHER_UPSTREAM_<PROVIDER>``, then ``overrides``."""
    out = dict(DEFAULT_UPSTREAMS)
    for provider in PROVIDERS:
        if env := os.environ.get(f"TETHER_UPSTREAM_{provider.upper()}"):
            out[provider] = env
        elif not (overrides or {}).get(provider) and (sdk := sdk_upstream(provider)):
            out[provider] = sdk
    out.update({k: v for k, v in (overrides or {}).items() if v})
    return {k: v.rstrip("/") for k, v in out.items()}
