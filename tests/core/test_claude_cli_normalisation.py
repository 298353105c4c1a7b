"""The Anthropic fingerprint's normalisation of the Claude CLI's volatile request parts: what is
replaced, that only the CLI's requests are touched, and that the user's own text never is."""

from __future__ import annotations

import json

from tether.canonical import canonical_json, fingerprint
from tether.wire.protocols.anthropic import PROTOCOL
from tether.wire.protocols.base import NORMALISED

CLI = {"user-agent": "claude-cli/2.1.332 (external, sdk-py, agent-sdk/0.2.189)", "anthropic-version": "2023-06-01"}
SDK = {"user-agent": "Anthropic/Python 0.70.0", "anthropic-version": "2023-06-01"}


def body(
    kernel: str = "Linux 6.18.44-fc", cwd: str = "/tmp/work", date: str = "2026-12-03", agent: str = "a830cd741c0d34bda", ms: int = 620
) -> dict:
    env = (
        "<system-reminder>\n# Environment\nYou have been invoked in the following environment: \n"
        f" - Primary working directory: {cwd}\n - Is a git repository: false\n - Platform: linux\n - Shell: bash\n"
        f" - OS Version: {kernel}\n</system-reminder>"
    )
    handback = f"  Done: sunny.\nagentId: {agent}\n<usage>subagent_tokens: 1130\ntool_uses: 1\nduration_ms: {ms}</usage>\n"
    return {
        "model": "claude-sonnet-4-5",
        "system": [{"type": "text", "text": "You are a helpful assistant."}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": env},
                    {"type": "text", "text": f"<system-reminder>\nToday's date is {date}.\n</system-reminder>\n"},
                    {"type": "text", "text": "delegate: what is the weather?"},
                ],
            },
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Agent", "input": {"prompt": "weather?"}}]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": handback}]}],
            },
        ],
        "metadata": {"user_id": json.dumps({"device_id": "d1", "session_id": "s1"})},
        "stream": True,
    }


def fp(headers: dict, b: dict) -> str:
    return fingerprint("model", PROTOCOL.canonical_request("/v1/messages", {"beta": "true"}, headers, b))


def test_cli_requests_on_another_node_and_day_share_a_fingerprint() -> None:
    here = body()
    elsewhere = body(kernel="Linux 5.4.0-1099-aws", cwd="/srv/other", date="2031-07-14", agent="a71237fb820541b30", ms=1024)
    elsewhere["metadata"] = {"user_id": json.dumps({"device_id": "d2", "session_id": "s2"})}
    assert fp(CLI, here) == fp(CLI, elsewhere)
    canonical = canonical_json(PROTOCOL.canonical_request("/v1/messages", {}, CLI, here)).decode()
    # cwd, git, platform, shell, kernel, date, agentId, duration_ms
    assert canonical.count(NORMALISED) == 8
    assert "delegate: what is the weather?" in canonical and "subagent_tokens: 1130" in canonical


def test_other_clients_fingerprints_do_not_change() -> None:
    """Only requests from the CLI are normalised: the same drift from another client misses."""
    assert fp(SDK, body()) != fp(SDK, body(kernel="Linux 5.4.0", date="2031-07-14"))
    assert NORMALISED not in canonical_json(PROTOCOL.canonical_request("/v1/messages", {}, SDK, body())).decode()


def test_the_users_own_text_is_never_normalised() -> None:
    a, b = body(), body()
    a["messages"][0]["content"][2]["text"] = "Today's date is 2026-12-03.\nOS Version: mine"
    b["messages"][0]["content"][2]["text"] = "Today's date is 2031-07-14.\nOS Version: mine"
    assert fp(CLI, a) != fp(CLI, b)
