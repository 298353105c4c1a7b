"""The provider wire formats the seam understands, and ``find`` to pick one for a request.

To add a protocol, subclass :class:`~.base.WireProtocol` in a module of its own and declare what
differs from the base (see its attributes): which paths are model turns, which body keys, headers
and query parameters cannot change the answer (a comment for each saying why), how tools are
named, where usage lives in a JSON body and in a stream. Override a method only where the format
has a shape of its own (Gemini's nested function declarations, Anthropic's stream usage spread over
two events). Export ``PROTOCOL`` and ``PROTOCOLS``, add the instances to ``ALL`` below, and add
realistic rows to ``tests/core/test_protocols.py``. ``find`` returns the first match, so list the
more specific protocol of a provider first when two could claim the same path.

What a framework's own client writes into its requests is that framework's knowledge: its adapter
registers a normaliser with the protocol (:mod:`.normalise`); nothing here names a framework.
"""

from __future__ import annotations

from . import anthropic, gemini, mistral, openai_chat, openai_responses
from .base import Usage, WireProtocol

ALL: tuple[WireProtocol, ...] = (
    *openai_chat.PROTOCOLS,
    *openai_responses.PROTOCOLS,
    *anthropic.PROTOCOLS,
    *gemini.PROTOCOLS,
    *mistral.PROTOCOLS,
)


def find(provider: str, method: str, path: str) -> WireProtocol | None:
    """The protocol of ``provider`` for which ``method path`` is a model turn, else ``None``."""
    return next((p for p in ALL if p.provider == provider and p.is_model_turn(method, path)), None)


__all__ = ["ALL", "Usage", "WireProtocol", "find"]
