"""What the adapters' own tests (adapters/<id>/tests) share, so that none copies another's: the
store fixture, a run's arguments against a fake provider, and the journal and memory read back
from the store. The LangChain family's tests share more: tests/support/langchain_family.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.journal import Record, read_records
from tether.memory import Memory
from tether.stores import LocalStore, open_store
from tether.testing.fake_provider import FakeProvider


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A local store in the test's own folder."""
    return str(tmp_path / "store")


def run_args(fake: FakeProvider, store: str, run_id: str, provider: str = "openai", **kw: Any) -> dict[str, Any]:
    """``run_agent``'s arguments for one run on ``store`` whose model requests go to ``fake``."""
    return dict(run_id=run_id, store=store, upstreams={provider: f"{fake.url}/{provider}"}, **kw)


def records(store: str, run_id: str, kind: str = "model") -> list[Record]:
    """The run's journal records of one kind (``model`` or ``tool``), in the order they started."""
    found = [r for r in read_records(LocalStore(store), run_id) if r.kind == kind]  # pack, tail and loose records, deltas resolved
    return sorted(found, key=lambda r: r.started_at)


def memory_items(store: str, key: str, namespace: str = "default") -> list[Any]:
    """The committed items under a memory key, in commit order."""
    return Memory(open_store(store), namespace, key).load()
