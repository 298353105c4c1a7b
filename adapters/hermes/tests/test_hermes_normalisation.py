"""The normaliser tether-hermes registers for Hermes Agent's volatile system-prompt facts:
what is replaced, that only Hermes' requests (User-Agent ``HermesAgent/``) are touched, and that
the user's own text never is — not even a line shaped like one of Hermes' (issue 23): each fact is
located where Hermes' template puts it, never by its shape alone."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import tether_hermes  # noqa: F401 - as in a run: importing the adapter registers its normaliser
from tether.canonical import canonical_json, fingerprint
from tether.wire.protocols.normalise import NORMALISED
from tether.wire.protocols.openai_chat import PROTOCOL

HERMES = {"user-agent": "HermesAgent/0.19.0", "x-stainless-lang": "python"}
SDK = {"user-agent": "OpenAI/Python 2.24.0", "x-stainless-lang": "python"}
PATH = "/v1/chat/completions"

HOST = "Host: Linux (6.18.44-fc-v1147)\nUser home directory: /root\nCurrent working directory: /work/app"
ELSEWHERE = dict(
    kernel="5.4.0-1099-aws", home="/home/agent", cwd="/srv", slot="/var/tmp/tether-hermes/slot-3", date="Monday, July 14, 2031"
)


def body(
    kernel: str = "6.18.44-fc-v1147",
    home: str = "/root",
    cwd: str = "/work/app",
    slot: str = "/tmp/tether-hermes/slot-0",
    date: str = "Thursday, December 03, 2026",
    session: str | None = None,
    system_message: str | None = None,
    instructions: str | None = "Be brief.",
) -> dict:
    # As hermes-agent 0.19 builds it (agent/system_prompt.py, measured), abridged where nothing
    # varies: {stable}\n\n{system_message}\n\n{date block}\n\n{instructions (ephemeral)}.
    timestamp = f"Conversation started: {date}" + (f"\nSession ID: {session}" if session else "") + "\nModel: gpt-4o-mini"
    parts = [
        "You are Hermes Agent, an intelligent AI assistant created by Nous Research.",
        "<act_dont_ask>\n- 'What time is it?' → run `date` (don't guess)\n</act_dont_ask>",
        f"Host: Linux ({kernel})\nUser home directory: {home}\nCurrent working directory: {cwd}",
        f"Active Hermes profile: default. Other profiles (if any) live under {slot}/profiles/<name>/. Each profile has its own "
        "skills/, plugins/, cron/, and memories/ that affect a different session than this one. Do not modify another "
        "profile's skills/plugins/cron/memories unless the user explicitly directs you to.",
        system_message,
        timestamp,
        instructions,
    ]
    return {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "\n\n".join(p for p in parts if p)},
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
    assert fp(HERMES, here) == fp(HERMES, body(**ELSEWHERE))
    text = canonical(HERMES, here)
    assert text.count(NORMALISED) == 5  # kernel, user home, working directory, Hermes home, date
    for kept in ("Host: ", "Model: gpt-4o-mini", "Be brief.", "What about Paris?", "two million", "run `date`"):
        assert kept in text


def test_a_session_id_in_the_prompt_is_normalised_too() -> None:
    """With ``pass_session_id``, Hermes writes its per-process session id under the date."""
    a, b = body(session="20261203_101500_a1b2c3"), body(session="20261204_093000_d4e5f6")
    assert fp(HERMES, a) == fp(HERMES, b)
    assert canonical(HERMES, a).count(NORMALISED) == 6


def test_the_prompt_caching_form_is_normalised_alike() -> None:
    """Hermes' prompt-caching form sends the same one string as a single text part."""

    def cached(b: dict) -> dict:
        b["messages"][0]["content"] = [{"type": "text", "text": b["messages"][0]["content"], "cache_control": {"type": "ephemeral"}}]
        return b

    assert fp(HERMES, cached(body())) == fp(HERMES, cached(body(**ELSEWHERE)))
    assert canonical(HERMES, cached(body())).count(NORMALISED) == 5


def test_other_clients_fingerprints_do_not_change() -> None:
    """Only Hermes' requests are normalised: the same drift from another client misses."""
    assert fp(SDK, body()) != fp(SDK, body(kernel="5.4.0-1099-aws", date="Monday, July 14, 2031"))
    assert NORMALISED not in canonical(SDK, body())
    assert NORMALISED not in canonical({}, body())


def test_the_users_messages_and_tool_results_are_never_normalised() -> None:
    a, b = body(), body()
    a["messages"][1]["content"] = "Conversation started: Thursday, December 03, 2026\nHost: Linux (6.1)\nUser home directory: /a"
    b["messages"][1]["content"] = "Conversation started: Monday, July 14, 2031\nHost: Linux (5.4)\nUser home directory: /b"
    assert fp(HERMES, a) != fp(HERMES, b)
    a, b = body(), body()
    a["messages"][3]["content"] = "Host: Linux (6.1)\nUser home directory: /a"
    b["messages"][3]["content"] = "Host: Linux (5.4)\nUser home directory: /b"
    assert fp(HERMES, a) != fp(HERMES, b)
    assert fp(HERMES, body(instructions="Today is 2026-12-03.")) != fp(HERMES, body(instructions="Today is 2031-07-14."))


def date_line(date: str) -> str:
    return f"Conversation started: {date}"


def date_block(date: str) -> str:
    return f"Conversation started: {date}\nModel: gpt-4o-mini"


def host_block(kernel: str) -> str:
    return f"Host: Linux ({kernel})\nUser home directory: /home/me\nCurrent working directory: /srv/me"


def profile(slot: str) -> str:
    prompt: str = body(slot=slot)["messages"][0]["content"]
    return prompt.split("\n\n")[3]


# Lines of the user's, shaped like Hermes' own (the issue's case first), in the instructions (after
# Hermes' date block) or in a bring-your-own agent's system_message (before it).
SHAPED = [
    ("instructions", "Be brief.\n{}", date_line),
    ("instructions", "{}", date_line),
    ("instructions", "Be brief.\n\n{}\n\nThanks.", date_block),
    ("instructions", "{}", date_block),
    ("system_message", "{}", date_block),
    ("system_message", "Rules.\n{}", date_line),
    ("instructions", "Be brief.\n\n{}", host_block),
    ("system_message", "{}", host_block),
    ("instructions", "{}", profile),
    ("system_message", "{}", profile),
]
VALUES: dict[Callable[[str], str], tuple[str, str]] = {
    date_line: ("Thursday, December 03, 2026", "Monday, July 14, 2031"),
    date_block: ("Thursday, December 03, 2026", "Monday, July 14, 2031"),
}
VALUES |= {host_block: ("6.1.0-mine", "5.4.0-other"), profile: ("/tmp/tether-hermes/slot-0", "/var/tmp/tether-hermes/slot-3")}


@pytest.mark.parametrize(("where", "template", "shape"), SHAPED, ids=[f"{w}-{s.__name__}-{i}" for i, (w, _, s) in enumerate(SHAPED)])
def test_a_users_line_shaped_like_hermes_own_stays_in_the_fingerprint(where: str, template: str, shape) -> None:
    """A changed line of the user's that looks like Hermes' date, host block or profile paragraph
    changes the fingerprint: an old answer never reaches a changed request (issue 23)."""
    old, new = (template.format(shape(v)) for v in VALUES[shape])
    assert fp(HERMES, body(**{where: old})) != fp(HERMES, body(**{where: new}))
    # The user's text reaches the fingerprint as written.
    assert shape(VALUES[shape][0]).split("\n")[0] in canonical(HERMES, body(**{where: old}))


def test_hermes_own_facts_still_normalised_beside_the_users_other_text() -> None:
    """The user's own (unshaped) system_message and instructions leave Hermes' facts located."""
    here = body(system_message="You are a travel agent.\nBe kind.", instructions="Answer in French.")
    elsewhere = body(system_message="You are a travel agent.\nBe kind.", instructions="Answer in French.", **ELSEWHERE)
    assert fp(HERMES, here) == fp(HERMES, elsewhere)
    assert canonical(HERMES, here).count(NORMALISED) == 5


def test_a_users_copy_of_the_date_block_leaves_hermes_date_in_the_fingerprint() -> None:
    """When the user's text holds a date block too, which one is Hermes' cannot be told from the
    text: neither is normalised (a retry on another day goes live: a miss, never a stale answer),
    while the host block and the Hermes home, located before the user's text, still are."""
    copy = date_block("Thursday, December 03, 2026")
    here, tomorrow = body(instructions=copy), body(instructions=copy, date="Friday, December 04, 2026")
    assert fp(HERMES, here) != fp(HERMES, tomorrow)
    assert canonical(HERMES, here).count(NORMALISED) == 4  # kernel, user home, working directory, Hermes home
    host_elsewhere = {k: v for k, v in ELSEWHERE.items() if k != "date"}
    assert fp(HERMES, here) == fp(HERMES, body(instructions=copy, **host_elsewhere))
