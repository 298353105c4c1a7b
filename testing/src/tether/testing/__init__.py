"""Test doubles that are real parts: scripted fake model providers speaking the vendors' wire protocols.

Names load lazily so ``python -m tether.testing.fake_provider`` does not import its module twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .fake_provider import FakeProvider, Fault, Ledger, LedgerEntry, fetch_ledger, inject_remote
    from .script import Conversation, Script, ScriptedCall, Turn

_EXPORTS = {
    "FakeProvider": "fake_provider",
    "Fault": "fake_provider",
    "Ledger": "fake_provider",
    "LedgerEntry": "fake_provider",
    "fetch_ledger": "fake_provider",
    "inject_remote": "fake_provider",
    "Script": "script",
    "Conversation": "script",
    "Turn": "script",
    "ScriptedCall": "script",
}

__all__ = [
    "Conversation",
    "FakeProvider",
    "Fault",
    "Ledger",
    "LedgerEntry",
    "Script",
    "ScriptedCall",
    "Turn",
    "fetch_ledger",
    "inject_remote",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
