"""Reading back a turn that may already have reached the provider's server (a Mistral
conversation append).

Such a turn adds to state kept on the server; an attempt that died after the server answered but
before the journal recorded it leaves the server holding a turn the journal does not. Sending it
again would duplicate it there (or fork the conversation), so the seam first reads the server's
state back (an unrecorded GET, the protocol module says where) and, when the turn is there, takes
the answer rebuilt from it instead of sending the turn again.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import RecoverableStepError
from .messages import WireRequest, classify
from .protocols.base import WireProtocol
from .upstream import Upstream, read_whole


@dataclass
class Landed:
    """The answer of a turn the server already took, rebuilt from its state."""

    answer: bytes
    streamed: bool
    #: The path its state was read back from.
    check: str

    @property
    def content_type(self) -> str:
        return "text/event-stream" if self.streamed else "application/json"


async def read_back(upstream: Upstream, protocol: WireProtocol, request: WireRequest) -> Landed | None:
    """The answer of ``request`` if the server already holds the turn, else ``None`` (send it).
    Raises ``RecoverableStepError`` when the read-back cannot tell (sending could duplicate it)."""
    body = request.json
    check = protocol.landed_check(request.path, body)
    if check is None or not request.url.endswith(request.path):
        return None
    headers = [(k, v) for k, v in request.headers if k.lower() not in ("content-type", "accept")]
    read = WireRequest("GET", request.provider, check, request.url[: -len(request.path)] + check, headers=headers, timeout=request.timeout)
    response = await upstream.send(read)
    state = await read_whole(response, f"reading back {check}")
    if classify(response.status_code) == "recoverable":
        # Unknown whether the turn landed: sending it could duplicate it, so not now.
        raise RecoverableStepError(f"could not read back {check} (HTTP {response.status_code}) to tell whether the turn landed")
    if response.status_code != 200:
        return None  # the turn itself will meet the same error, recorded as usual
    streamed = protocol.is_streaming(request.path, {}, body)
    answer = protocol.answer_from_state(request.path, body, state, streamed)
    return None if answer is None else Landed(answer, streamed, check)
