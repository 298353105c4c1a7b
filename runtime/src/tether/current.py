"""The run attempt active in this context (set by ``Run.activate()``).

Transports and tools created without being handed their run find it here. It lives below both
``run`` and ``wire`` so the wire layer can read it without importing ``run`` (which builds the
wire seam): the layers stay one-way (runtime/.importlinter).
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .run import Run

active: contextvars.ContextVar[Run | None] = contextvars.ContextVar("tether_run", default=None)


def current_run() -> Run | None:
    return active.get()
