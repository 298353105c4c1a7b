r"""The Claude CLI's volatile request parts, left out of the fingerprints of its model turns.

The CLI puts facts about the machine and the day into its requests. A retry on another node or
another day must still replay, so for requests whose User-Agent says ``claude-cli/`` — and only
those: no other SDK's fingerprint changes — these values are replaced by NORMALISED before
fingerprinting: importing this module registers :func:`normalise` with the runtime's Anthropic
protocol. The user's own text travels in the same messages (the prompt, CLAUDE.md files in a
<system-reminder> of their own, the system prompt) and may hold lines of the same shape, so a
fact is located where the CLI writes it, never by its shape alone (issue 23). The rule (CLI
2.1.332, measured; its attachments rendered as meta user blocks):
  - the environment and the date are attachments of the session's first user message,
    messages[0] (a resumed session's comes from the committed transcript): whole text blocks of
    the run of <system-reminder> blocks that opens the message, before its last block (the
    prompt, which the SDK sends as one block after them). The environment block is exactly
        <system-reminder>\n# Environment\nYou have been invoked in the following environment: \n
         - Primary working directory: ..\n - Is a git repository: ..\n - Platform: ..\n - Shell: ..
         - OS Version: <kernel string>\n ...</system-reminder>
    and in it the values of those lines (and Additional working directories / Working directory)
    are replaced; the date block is exactly <system-reminder>\nToday's date is <YYYY-MM-DD>.\n</system-reminder>.
    Each only when it is the one block of its kind before the prompt: when the user's content
    holds a copy there, which one is the CLI's cannot be told, and none is normalised (a miss,
    never a stale answer);
  - the hand-back of a subagent: in the result of the CLI's Agent (Task) tool — only a
    tool_result answering a tool_use of that name — the trailer the CLI writes at column zero
    after the report (whose every line it indents): the random ``agentId: <id>`` and the wall
    time ``duration_ms`` of its <usage> block, at the very end of the text block.
Nothing else is: the system prompt (the CLI writes no machine facts there), the model id, the
tokens-left reminder (a function of the recorded usage), the user's text and all other tool
results stay part of the fingerprint. The seam counts the replacements (``normalisedParts``:
"normalised N volatile parts" in the summary).
"""

from __future__ import annotations

import re
from typing import Any

from tether.wire.protocols import anthropic
from tether.wire.protocols.normalise import normalise_volatile

#: The User-Agent prefix of the CLI's requests.
CLAUDE_CLI_AGENT = "claude-cli/"
_ENVIRONMENT_BLOCK = re.compile(
    r"<system-reminder>\n# Environment\nYou have been invoked in the following environment: \n(.*)\n</system-reminder>\n?\Z", re.DOTALL
)
_ENVIRONMENT_FACTS = (
    re.compile(
        r"^ - (?:Primary working directory|Additional working directories|Working directory|Is a git repository|"
        r"Is directory a git repo|Platform|Shell|OS Version): (\S.*)$",
        re.MULTILINE,
    ),
)
_DATE_BLOCK = re.compile(r"<system-reminder>\nToday's date is (\S+?)\.\n</system-reminder>\n?\Z")
_REMINDER_BLOCK = re.compile(r"<system-reminder>\n.*\n</system-reminder>\n?\Z", re.DOTALL)
_AGENT_TOOLS = frozenset({"Agent", "Task"})
_HANDBACK_TRAILER = re.compile(
    r"\nagentId: ([0-9a-zA-Z_-]+)[^\n]*\n<usage>subagent_tokens: \d+\ntool_uses: \d+\nduration_ms: (\d+)</usage>\n?\Z"
)


def _text(block: Any) -> str | None:
    return block["text"] if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str) else None


def _normalise_attachments(content: Any) -> Any:
    """The first user message with the CLI's environment and date blocks normalised (see above)."""
    if not isinstance(content, list) or len(content) < 2:
        return content
    texts = [_text(b) for b in content]
    opening = 0  # the run of whole <system-reminder> blocks that opens the message, before its last block
    while opening < len(content) - 1 and (t := texts[opening]) is not None and _REMINDER_BLOCK.match(t):
        opening += 1
    out = list(content)
    for block, facts in ((_ENVIRONMENT_BLOCK, _ENVIRONMENT_FACTS), (_DATE_BLOCK, (_DATE_BLOCK,))):
        found = [i for i, t in enumerate(texts[:-1]) if t is not None and block.match(t)]
        if len(found) == 1 and found[0] < opening:
            i = found[0]
            out[i] = {**content[i], "text": normalise_volatile(texts[i] or "", facts)}
    return out


def _normalise_handback(content: Any) -> Any:
    """An Agent tool's result with the CLI's trailer (agentId, duration_ms) normalised."""
    if isinstance(content, str):
        return normalise_volatile(content, (_HANDBACK_TRAILER,))
    if not isinstance(content, list):
        return content
    return [{**b, "text": normalise_volatile(t, (_HANDBACK_TRAILER,))} if (t := _text(b)) is not None else b for b in content]


def normalise(body: dict[str, Any]) -> dict[str, Any]:
    """The body with the CLI's environment facts and subagent trailers replaced (see above)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return body
    agent_calls = {
        b.get("id")
        for m in messages
        if isinstance(m, dict) and m.get("role") == "assistant" and isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") in _AGENT_TOOLS
    }
    out = []
    for n, m in enumerate(messages):
        if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), list):
            content = _normalise_attachments(m["content"]) if n == 0 else m["content"]
            content = [
                {**b, "content": _normalise_handback(b.get("content"))}
                if isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") in agent_calls
                else b
                for b in content
            ]
            m = {**m, "content": content}
        out.append(m)
    return {**body, "messages": out}


anthropic.PROTOCOL.normalise_requests_from(CLAUDE_CLI_AGENT, normalise)
