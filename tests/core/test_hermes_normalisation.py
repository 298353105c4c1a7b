"""The Chat Completions fingerprint's normalisation of Hermes Agent's volatile system-prompt facts:
what is replaced, that only Hermes' requests (User-Agent ``HermesAgent/``) are touched, and that
the user's own text never is."""

from __future__ import annotations

from tether.canonical import canonical_json, fingerprint
from tether.wire.protocols.base import NORMALISED
from tether.wire.protocols.openai_chat import PROTOCOL

HERMES = {"user-agent": "HermesAgent/0.19.0", "x-stainless-lang": "python"}
SDK = {"user-agent": "OpenAI/Python 2.24.0", "x-stainless-lang": "python"}
PATH = "/v1/chat/completions"


def body(
    kernel: str = "6.18.44-fc-v1147",
    home: str = "/root",
    cwd: str = "/work/app",
    slot: str = "/tmp/tether-hermes/slot-0",
    date: str = "Thursday, December 03, 2026",
    session: str | None = None,
    instructions: str = "Be brief.",
) -> dict:
    # As hermes-agent 0.19 builds it (agent/system_prompt.py), abridged where nothing varies.
    timestamp = f"Conversation started: {date}" + (f"\nSession ID: {session}" if session else "") + "\nModel: gpt-4o-mini"
    system = (
        "You are Hermes Agent, an intelligent AI assistant created by Nous Research.\n\n"
        "<act_dont_ask>\n- 'What time is it?' → run `date` (don't guess)\n</act_dont_ask>\n\n"
        f"Host: Linux ({kernel})\nUser home directory: {home}\nCurrent working directory: {cwd}\n\n"
        f"Active Hermes profile: default. Other profiles (if any) live under {slot}/profiles/<name>/. Each profile has its own "
        "skills/, plugins/, cron/, and memories/ that affect a different session than this one.\n\n"
        f"{timestamp}\n\n{instructions}"
    )
    return {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "What about Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "lookup"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "Paris is a city of two million people."},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def canonical(headers: dict, b: dict) -> str:
    return canonical_json(PROTOCOL.canonical_request(PATH, {}, headers, b)).decode()


def fp(headers: dict, b: dict) -> str:
    return fingerprint("model", PROTOCOL.canonical_request(PATH, {}, headers, b))


def test_hermes_requests_on_another_node_day_and_home_share_a_fingerprint() -> None:
    here = body()
    elsewhere = body(
        kernel="5.4.0-1099-aws", home="/home/agent", cwd="/srv", slot="/var/tmp/tether-hermes/slot-3", date="Monday, July 14, 2031"
    )
    assert fp(HERMES, here) == fp(HERMES, elsewhere)
    text = canonical(HERMES, here)
    assert text.count(NORMALISED) == 5  # kernel, user home, working directory, Hermes home, date
    for kept in ("Host: ", "Model: gpt-4o-mini", "Be brief.", "What about Paris?", "two million", "run `date`"):
        assert kept in text


def test_a_session_id_in_the_prompt_is_normalised_too() -> None:
    """With ``pass_session_id``, Hermes writes its per-process session id under the date."""
    a, b = body(session="20261203_101500_a1b2c3"), body(session="20261204_093000_d4e5f6")
    assert fp(HERMES, a) == fp(HERMES, b)
    assert canonical(HERMES, a).count(NORMALISED) == 6


def test_other_clients_fingerprints_do_not_change() -> None:
    """Only Hermes' requests are normalised: the same drift from another client misses."""
    assert fp(SDK, body()) != fp(SDK, body(kernel="5.4.0-1099-aws", date="Monday, July 14, 2031"))
    assert NORMALISED not in canonical(SDK, body())
    assert NORMALISED not in canonical({}, body())


def test_the_users_own_text_is_never_normalised() -> None:
    """The user's messages, tool results and own instructions stay in the fingerprint, even when
    they look like Hermes' facts; only Hermes' own lines, in the system prompt, are replaced."""
    a, b = body(), body()
    a["messages"][1]["content"] = "Conversation started: Thursday, December 03, 2026\nHost: Linux (6.1)\nUser home directory: /a"
    b["messages"][1]["content"] = "Conversation started: Monday, July 14, 2031\nHost: Linux (5.4)\nUser home directory: /b"
    assert fp(HERMES, a) != fp(HERMES, b)
    a, b = body(), body()
    a["messages"][3]["content"] = "Host: Linux (6.1)\nUser home directory: /a"
    b["messages"][3]["content"] = "Host: Linux (5.4)\nUser home directory: /b"
    assert fp(HERMES, a) != fp(HERMES, b)
    assert fp(HERMES, body(instructions="Today is 2026-12-03.")) != fp(HERMES, body(instructions="Today is 2031-07-14."))
