"""What every ``tether_<framework>`` package's ``__init__`` does, written once.

    from tether.adapter_package import Tool as Tool
    from tether.adapter_package import package, requires
    from tether.adapter_package import tool as tool

    requires("tether-langchain", "LangChain and langchain-openai", "langchain.agents", "langchain_openai")

    from .adapter import LangChainAdapter as LangChainAdapter  # after the guard: it imports the framework

    ADAPTER, run_agent, run_agent_sync = package(LangChainAdapter())

:func:`requires` is the import guard users see when the framework is missing; :func:`package`
binds ``run_agent``/``run_agent_sync`` to the package's one adapter (what ``load_adapter`` finds
as ``ADAPTER``). ``Tool`` and ``tool`` are re-exported so a package's ``__init__`` imports from
one place. A package names each public name once, where it imports it: ``name as name`` is the
explicit re-export type checkers honour (no ``__all__`` repeating the imports).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .agent import Adapter, AgentResult, Tool, bind, tool

A = TypeVar("A", bound=Adapter)


def requires(distribution: str, what: str, *modules: str) -> None:
    """Import each framework module, or raise the ImportError that names what to install."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ImportError(f"{distribution} needs {what}: pip install '{distribution}'") from e


def package(adapter: A) -> tuple[A, Callable[..., Coroutine[Any, Any, AgentResult]], Callable[..., AgentResult]]:
    """``(ADAPTER, run_agent, run_agent_sync)`` for a package's one adapter."""
    run_agent: Callable[..., Any]
    run_agent_sync: Callable[..., Any]
    run_agent, run_agent_sync = bind(adapter)
    return adapter, run_agent, run_agent_sync


__all__ = ["Tool", "package", "requires", "tool"]
