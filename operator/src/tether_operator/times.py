"""Kubernetes timestamps (``2026-12-05T06:14:37Z``) as epoch seconds, for every module that
compares them: status times, creation times, progress records (which may hold numbers)."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def epoch(value: Any) -> float | None:
    """``value`` (an RFC 3339 timestamp or a number of seconds) in epoch seconds; None when it is
    neither."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None
