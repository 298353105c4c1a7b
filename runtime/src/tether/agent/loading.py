"""Adapter loading: the installed adapter of a framework id."""

from __future__ import annotations

import importlib

from ..errors import ConfigError
from .adapter import Adapter


def load_adapter(framework: str) -> Adapter:
    """The adapter for a framework id (``pydantic-ai`` → package ``tether_pydantic_ai``)."""
    module = f"tether_{framework.replace('-', '_')}"
    try:
        adapter: Adapter = importlib.import_module(module).ADAPTER
        return adapter
    except ImportError as e:
        raise ConfigError(
            f"no adapter for framework {framework!r} in this environment: install the tether-{framework} package ({e})"
        ) from e
