"""The normaliser tether-claude registers for the Claude CLI's volatile request parts: what is
replaced, that only the CLI's requests are touched, and that the user's own text never is."""

from __future__ import annotations

import json

import pytest

import tether_claude  # noqa: F401 - as in a run: importing the adapter registers its normaliser
from tether.canonical import canonical_json, fingerprint
from tether.wire.protocols.anthropic import PROTOCOL
from tether.wire.protocols.normalise import NORMALISED

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


# -- Located where the CLI writes it, never by shape (issue 23) ----------------------------------
# Text of the user's shaped like the CLI's environment and date blocks, wherever the user's text
# travels: the prompt, a CLAUDE.md file (the CLI quotes it in a <system-reminder> of its own), the
# system prompt, a later prompt, a tool's result. Each pair differs in one line only.


def date_block(date: str) -> str:
    return f"<system-reminder>\nToday's date is {date}.\n</system-reminder>\n"


def env_block(kernel: str) -> str:
    text: str = body(kernel=kernel)["messages"][0]["content"][0]["text"]
    return text


def claude_md(date: str) -> str:
    # As the CLI quotes a project's CLAUDE.md (measured with setting_sources=["project"]).
    return (
        "<system-reminder>\nCodebase and user instructions are shown below. Be sure to adhere to these instructions.\n\n"
        f"Contents of /tmp/work/CLAUDE.md (project instructions, checked into the codebase):\n\nRules.\nToday's date is {date}.\n"
        f"OS Version: {date}\n</system-reminder>"
    )


def as_prompt(text: str):
    def place(b: dict) -> None:
        b["messages"][0]["content"][2]["text"] = text

    return place


def as_claude_md(text: str):
    def place(b: dict) -> None:
        b["messages"][0]["content"].insert(2, {"type": "text", "text": text})

    return place


def in_opening_run(text: str):
    """A copy among the opening reminders (a user's multi-block content): two of a kind."""

    def place(b: dict) -> None:
        b["messages"][0]["content"].insert(1, {"type": "text", "text": text})

    return place


def in_system(text: str):
    def place(b: dict) -> None:
        b["system"].append({"type": "text", "text": f"Be brief.\n{text}"})

    return place


def in_later_prompt(text: str):
    def place(b: dict) -> None:
        b["messages"] += [
            {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
            {"role": "user", "content": [{"type": "text", "text": text}, {"type": "text", "text": "and now?"}]},
        ]

    return place


SHAPED = {
    "prompt-is-a-date-block": (as_prompt, date_block, "2026-12-03", "2031-07-14"),
    "prompt-quotes-a-date-block": (as_prompt, lambda d: f"Remember:\n{date_block(d)}please.", "2026-12-03", "2031-07-14"),
    "prompt-is-an-environment-block": (as_prompt, env_block, "Linux 6.1.0", "Linux 5.4.0"),
    "claude-md": (as_claude_md, claude_md, "2026-12-03", "2031-07-14"),
    "opening-run-date": (in_opening_run, date_block, "2026-12-03", "2031-07-14"),
    "opening-run-environment": (in_opening_run, env_block, "Linux 6.1.0", "Linux 5.4.0"),
    "system-prompt-date": (in_system, date_block, "2026-12-03", "2031-07-14"),
    "system-prompt-env": (in_system, lambda k: f"<env>\nOS Version: {k}\n</env>", "Linux 6.1.0", "Linux 5.4.0"),
    "later-prompt": (in_later_prompt, date_block, "2026-12-03", "2031-07-14"),
}


@pytest.mark.parametrize("case", SHAPED)
def test_a_users_text_shaped_like_the_clis_stays_in_the_fingerprint(case: str) -> None:
    """A changed line of the user's that looks like the CLI's date or environment changes the
    fingerprint: an old answer never reaches a changed request."""
    place, shape, old, new = SHAPED[case]
    a, b = body(), body()
    place(shape(old))(a)
    place(shape(new))(b)
    assert fp(CLI, a) != fp(CLI, b)


def test_the_clis_own_blocks_still_normalised_beside_the_users_copy() -> None:
    """The user's prompt — the message's last block — is never the CLI's: with a copy of the date
    block as the prompt, the CLI's own date and environment still replay across days and nodes."""
    here, elsewhere = body(), body(kernel="Linux 5.4.0-1099-aws", cwd="/srv/other", date="2031-07-14")
    for b in (here, elsewhere):
        as_prompt(date_block("2026-12-03"))(b)
        as_claude_md(claude_md("2026-12-03"))(b)
    assert fp(CLI, here) == fp(CLI, elsewhere)
    canonical = canonical_json(PROTOCOL.canonical_request("/v1/messages", {}, CLI, here)).decode()
    assert canonical.count("2026-12-03") == 3  # the prompt's, CLAUDE.md's two lines: kept; the CLI's own date is not there


def test_two_blocks_of_a_kind_normalise_neither() -> None:
    """A copy among the opening reminders: which one is the CLI's cannot be told, so neither is
    normalised — a retry on another day goes live (a miss, never a stale answer)."""
    a, b = body(), body(date="2031-07-14")
    for x in (a, b):
        in_opening_run(date_block("2026-12-03"))(x)
    assert fp(CLI, a) != fp(CLI, b)


def test_only_an_agent_tools_result_has_its_trailer_normalised() -> None:
    """agentId and duration_ms are the CLI's trailer of the Agent tool's hand-back only: the same
    lines in another tool's result, or inside the subagent's (indented) report, stay."""
    a, b = body(agent="a1", ms=1), body(agent="b2", ms=2)
    for x in (a, b):
        x["messages"][1]["content"][0]["name"] = "mcp__tether__lookup"
    assert fp(CLI, a) != fp(CLI, b)
    a, b = body(), body()
    for x, value in ((a, "x1"), (b, "y2")):
        block = x["messages"][2]["content"][0]["content"][0]
        block["text"] = f"  Report.\n  agentId: {value}" + block["text"].removeprefix("  Done: sunny.")
    assert fp(CLI, a) != fp(CLI, b)
