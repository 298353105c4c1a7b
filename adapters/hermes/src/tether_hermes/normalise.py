r"""Hermes' volatile system-prompt facts, left out of the fingerprints of its model turns.

Hermes writes facts about the host, its home and the day into the system prompt of every request.
A retry on another node, another day or in another Hermes home must still replay, so for requests
whose User-Agent says ``HermesAgent/`` (Hermes' own User-Agent, which the adapter has it send: the
OpenAI SDK's default names no client) — and only those — these values are replaced by NORMALISED
before fingerprinting: importing this module registers :func:`normalise` with the runtime's Chat
Completions protocol. The user's own instructions sit in the same string, and may hold lines of
the same shape (issue 23: a changed "Conversation started: ..." line of the user's replayed an
answer to the old instructions), so a fact is located by Hermes' template, never by its shape
alone. The rule (hermes-agent 0.19: agent/system_prompt.py build_system_prompt,
agent/conversation_loop.py): Hermes sends one system message, messages[0], whose text is
    {stable tier}\n\n{context tier}\n\n{volatile tier}[\n\n{ephemeral_system_prompt}]
  stable    Hermes' identity and guidance; its environment hints: the host block
                Host: Linux (<kernel release>)\nUser home directory: <~>\nCurrent working directory: <cwd>
            then the embedder's HERMES_ENVIRONMENT_HINT, if set; last, the profile paragraph
                Active Hermes profile: default. Other profiles (if any) live under <HERMES_HOME>/profiles/<name>/. ...
  context   a bring-your-own agent's system_message, context files: the user's text
  volatile  memory blocks, then the date block
                Conversation started: Thursday, December 03, 2026[\nSession ID: <id>][\nModel: ..][\nProvider: ..]
  ephemeral the agent's instructions (the declarative adapter's `instructions`): the user's text.
So, each a whole paragraph (Hermes joins its parts with a blank line):
  - the profile paragraph is the pivot, the end of the stable tier: it is normalised (the home)
    only when it is the one line in the message that starts "Active Hermes profile:";
  - the host block is normalised only before the pivot, and only when it is the one host block
    there (nothing of the user's stands before it; the embedder's hint comes after it);
  - the date block is normalised only after the pivot, and only when it is the one line there
    that starts "Conversation started:" — the user's text stands on both sides of Hermes' block,
    so when it holds another, which one is Hermes' cannot be told from the text.
Whatever cannot be located so is left alone: the request keeps the fact, and a retry on another
day or node goes live (a miss, never a stale answer). User messages, tool results and every
other message are never touched. The seam counts the replacements (``normalisedParts``).
"""

from __future__ import annotations

import re
from typing import Any

from tether.wire.protocols import openai_chat
from tether.wire.protocols.normalise import normalise_volatile

#: The User-Agent prefix of Hermes' requests (``HermesAgent/<version>``: see ``HOME_CONFIG``).
HERMES_AGENT = "HermesAgent/"
_PARAGRAPH_START = r"(?:\A|(?<=\n\n))"
_PARAGRAPH_END = r"(?=\n\n|\Z)"
_HERMES_PROFILE_KIND = re.compile(r"^Active Hermes profile:", re.MULTILINE)
_HERMES_PROFILE = re.compile(
    _PARAGRAPH_START + r"Active Hermes profile: default\. Other profiles \(if any\) live under ([^\n]+?)/profiles/<name>/\. "
    r"Each profile has its own skills/, plugins/, cron/, and memories/ that affect a different session than this one\. "
    r"Do not modify another profile's skills/plugins/cron/memories unless the user explicitly directs you to\." + _PARAGRAPH_END
)
_HERMES_HOST_KIND = re.compile(r"^Host: [^\n]*\nUser home directory: ", re.MULTILINE)
_HERMES_HOST = re.compile(
    _PARAGRAPH_START + r"Host: ([^\n]+)\nUser home directory: ([^\n]+)(?:\nCurrent working directory: ([^\n]+))?" + _PARAGRAPH_END
)
_HERMES_DATE_KIND = re.compile(r"^Conversation started:", re.MULTILINE)
_HERMES_DATE = re.compile(
    _PARAGRAPH_START + r"Conversation started: (\w+, \w+ \d{2}, \d{4})(?:\nSession ID: ([^\n]+))?"
    r"(?:\nModel: [^\n]+)?(?:\nProvider: [^\n]+)?" + _PARAGRAPH_END
)


def _only(kind: re.Pattern[str], exact: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The whole ``exact`` paragraph in ``text`` when ``text`` holds exactly one line of ``kind``."""
    return exact.search(text) if len(kind.findall(text)) == 1 else None


def _normalise_prompt(text: str) -> str:
    """Hermes' system prompt with its host, home and date facts replaced where its template puts them."""
    pivot = _only(_HERMES_PROFILE_KIND, _HERMES_PROFILE, text)
    if pivot is None:
        return text
    stable, after = text[: pivot.start()], text[pivot.end() :]
    if _only(_HERMES_HOST_KIND, _HERMES_HOST, stable):
        stable = normalise_volatile(stable, (_HERMES_HOST,))
    if _only(_HERMES_DATE_KIND, _HERMES_DATE, after):
        after = normalise_volatile(after, (_HERMES_DATE,))
    return stable + normalise_volatile(pivot.group(0), (_HERMES_PROFILE,)) + after


def _normalise_messages(messages: Any) -> Any:
    """Hermes' messages with its host, home and date facts replaced in its system prompt (messages[0])."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[0], dict) or messages[0].get("role") != "system":
        return messages
    system, content = messages[0], messages[0].get("content")
    if isinstance(content, str):
        system = {**system, "content": _normalise_prompt(content)}
    elif isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict) and isinstance(content[0].get("text"), str):
        # Hermes' prompt-caching form: the same one string as a single text part with cache_control.
        system = {**system, "content": [{**content[0], "text": _normalise_prompt(content[0]["text"])}]}
    return [system, *messages[1:]]


def normalise(body: dict[str, Any]) -> dict[str, Any]:
    """The canonical body of a Hermes Chat Completions request with Hermes' volatile facts replaced."""
    if "messages" in body:
        body = {**body, "messages": _normalise_messages(body["messages"])}
    return body


openai_chat.PROTOCOL.normalise_requests_from(HERMES_AGENT, normalise)
