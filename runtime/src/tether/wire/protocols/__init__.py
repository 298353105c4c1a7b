"""The provider wire formats the seam understands, and ``find`` to pick one for a request.

To add a protocol, copy the closest module (each has the same shape: ``DROPPED_KEYS``,
``KEPT_HEADERS``, ``DROPPED_QUERY``, a ``_TURN`` path pattern, then ``_get``, ``_int``, ``_route``,
``_headers``, ``_query``, ``_tool_name``, ``_body``, ``_usage``, ``_stream_usage`` and a
``WireProtocol`` subclass), change what differs — which paths are model turns, which body keys,
headers and query parameters cannot change the answer (a comment for each saying why), how tool
names nest, where usage lives in a JSON body and in a stream — export ``PROTOCOL`` and
``PROTOCOLS``, add the instances to ``ALL`` below, and add realistic rows to
``tests/core/test_protocols.py``. ``find`` returns the first match, so list the more specific
protocol of a provider first when two could claim the same path.
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
