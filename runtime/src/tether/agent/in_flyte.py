"""Whether Flyte is here: a Flyte task object, a Flyte task context. Neither question imports Flyte."""

from __future__ import annotations

import sys
from typing import Any


def is_flyte_task(fn: Any) -> bool:
    # A Flyte task was made by an imported flyte: importing it here (~1 s) only to learn that a
    # plain function is not one would put Flyte on every agent's start-up path.
    flyte = sys.modules.get("flyte")
    return flyte is not None and isinstance(fn, flyte.TaskTemplate)


def flyte_ctx() -> Any:
    """The Flyte task context, or ``None`` outside a task. Only a process that imported ``flyte``
    (its entrypoint, a ``@env.task``) can be inside one, so Flyte is never imported to ask."""
    flyte = sys.modules.get("flyte")
    return (flyte.ctx() or None) if flyte is not None else None
