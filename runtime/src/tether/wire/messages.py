"""What goes through the wire seam: a request in, a response out, and how a status is classed.

The transports and the proxy build a :class:`WireRequest`; the seam answers with a
:class:`WireResponse` (replayed, live, refused or passed through).
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any


def classify(status: int) -> str:
    """``success``, ``terminal`` (recorded, replayed as the same error), ``recoverable`` or
    ``refused``.

    ``refused`` (401, 403, 404, 405) says nothing about the request's content, only about what the
    fingerprint leaves out: the key it carried (401/403) or where it was sent (404, 405: a wrong
    base URL or path). Such answers are passed through unrecorded (like a recoverable failure,
    though the SDK will not retry them), so a run retried after its key or URL was fixed calls
    the model instead of replaying the refusal. (An unknown model is a 404 too; not recording it
    costs nothing: refusals are not billed.)
    """
    if 200 <= status < 300:
        return "success"
    if status in (408, 409, 429) or status >= 500:
        return "recoverable"
    if status in (401, 403, 404, 405):
        return "refused"
    return "terminal"


@dataclass
class WireRequest:
    method: str
    provider: str
    #: Path relative to the provider's upstream base, e.g. ``/v1/chat/completions``.
    path: str
    #: The absolute URL to send upstream.
    url: str
    query: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    #: The caller's own timeouts (httpx's ``timeout`` extension: connect/read/write/pool seconds),
    #: applied upstream so an SDK's timeout-and-retry works through the in-process transport too.
    timeout: dict[str, float | None] | None = None

    @functools.cached_property
    def json(self) -> Any:
        """The body parsed, once per request (canonical form, model name, landed check all read
        it). Raises ``ValueError`` for a body that is not JSON."""
        return json.loads(self.body) if self.body else None


@dataclass
class WireResponse:
    status: int
    headers: list[tuple[str, str]]
    stream: AsyncIterator[bytes]
    replayed: bool = False
    #: The whole body when it is known up front (a replay, a plain answer): the proxy then sends
    #: it in one write with its length instead of a chunked stream.
    body: bytes | None = None

    @classmethod
    def whole(cls, status: int, headers: list[tuple[str, str]], body: bytes, *, replayed: bool = False) -> WireResponse:
        return cls(status, headers, _once(body), replayed=replayed, body=body)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data
