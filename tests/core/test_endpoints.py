"""The endpoint rules (docs/endpoints.md): the base URL variables a provider's own SDK reads send
a run's upstream calls to the same server; Tether's proxy (what CLIs and agents built before their
run call) honours them; an unreachable upstream's error names its URL, never a key; a variable
Tether cannot honour is refused at start, naming it and its URL.

Each case is a real SDK talking through a run's loopback proxy to a fake provider on its own port,
the variable set as a user sets it for the SDK."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.core import sdk_exchange
from tests.core.sdk_exchange import EXCHANGES, KEY, connect
from tether.errors import ConfigError, describe
from tether.run import Run
from tether.testing import FakeProvider

SCRIPT = {
    "conversations": [
        {"match": "", "turns": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}, {"text": "Sunny."}]}
    ]
}

#: variable, the protocol whose SDK the run serves, the value a user gives the SDK (minus the origin)
RULES = [
    ("OPENAI_BASE_URL", "openai-chat", "/openai/v1"),
    ("OPENAI_API_BASE", "openai-responses", "/openai/v1"),
    ("ANTHROPIC_BASE_URL", "anthropic", "/anthropic"),
    ("GOOGLE_GEMINI_BASE_URL", "gemini", "/gemini"),
    ("TETHER_UPSTREAM_MISTRAL", "mistral-chat", "/mistral"),
]
VARIABLES = {rule[0] for rule in RULES} | {"TETHER_UPSTREAM_OPENAI", "TETHER_UPSTREAM_ANTHROPIC", "TETHER_UPSTREAM_GEMINI"}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def dead_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def exchange(tmp_path: Path, protocol: str, via: str = "proxy") -> str:
    run = Run("endpoints", str(tmp_path / "store"))  # no upstreams=: the environment decides
    http, base = connect(run, protocol, via)
    try:
        with run.activate():
            return str(await EXCHANGES[protocol](http, base, False))
    finally:
        await http.aclose()
        await run.aclose()


@pytest.mark.parametrize(("variable", "protocol", "path"), RULES, ids=[r[0] for r in RULES])
async def test_the_sdk_variable_names_the_upstream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, protocol: str, path: str
) -> None:
    with FakeProvider(SCRIPT) as other:
        monkeypatch.setenv(variable, other.url + path)
        assert await exchange(tmp_path, protocol) == "Sunny."
        assert other.live_calls() == 2, f"the server {variable} names heard {other.live_calls()} calls"


@pytest.mark.parametrize(("variable", "protocol", "path"), RULES, ids=[r[0] for r in RULES])
async def test_an_unreachable_upstream_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, protocol: str, path: str
) -> None:
    url = f"http://user:pw@127.0.0.1:{dead_port()}{path}"
    monkeypatch.setenv(variable, url)
    monkeypatch.setitem(sdk_exchange.SDK, "retries", 0)
    with pytest.raises(Exception) as caught:
        await exchange(tmp_path, protocol)
    message = str(caught.value)
    shown = url.replace("user:pw@", "")
    assert "upstream unreachable at " + shown.removesuffix("/v1") + ("/v1/" if protocol.startswith("openai") else "/") in message, message
    assert "pw" not in message.replace(shown, "") and KEY not in message


async def test_an_sdk_error_that_hides_the_cause_is_described_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # In-process the SDK wraps the seam's error in its own ("APIConnectionError: Connection
    # error."); the run's failure (status, tether run's summary) adds Tether's cause.
    port = dead_port()
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/openai/v1")
    monkeypatch.setitem(sdk_exchange.SDK, "retries", 0)
    with pytest.raises(Exception) as caught:
        await exchange(tmp_path, "openai-chat", via="transport")
    assert f"upstream unreachable at http://127.0.0.1:{port}" not in str(caught.value)  # what the SDK says
    assert describe(caught.value) == (
        f"APIConnectionError: Connection error. (openai upstream unreachable at http://127.0.0.1:{port}/openai/v1/chat/completions: ConnectError)"
    )


def test_a_base_url_without_the_api_version_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8080/openai")
    with pytest.raises(ConfigError, match=r"OPENAI_BASE_URL=http://127\.0\.0\.1:8080/openai does not end in /v1"):
        Run("endpoints", str(tmp_path / "store"))


def test_two_openai_variables_that_disagree_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8080/openai/v1")
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:9090/v1")
    with pytest.raises(ConfigError) as caught:
        Run("endpoints", str(tmp_path / "store"))
    assert "OPENAI_BASE_URL=http://127.0.0.1:8080/openai/v1 and OPENAI_API_BASE=http://127.0.0.1:9090/v1 differ" in str(caught.value)


def test_precedence_run_then_tether_variable_then_sdk_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://sdk.example/v1")
    assert Run("a", str(tmp_path / "store")).upstreams["openai"] == "http://sdk.example"
    monkeypatch.setenv("TETHER_UPSTREAM_OPENAI", "http://tether.example")
    assert Run("b", str(tmp_path / "store")).upstreams["openai"] == "http://tether.example"
    assert Run("c", str(tmp_path / "store"), upstreams={"openai": "http://run.example"}).upstreams["openai"] == "http://run.example"


def test_a_variable_pointing_at_a_runs_proxy_is_not_an_upstream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What an adapter's routed_env sets while its run is in progress: another run started then
    # would otherwise send its requests to the first run's proxy, and from there to itself.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:41234/r/active/openai/v1")
    assert Run("a", str(tmp_path / "store")).upstreams["openai"] == "https://api.openai.com"
