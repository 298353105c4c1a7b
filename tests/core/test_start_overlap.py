"""What a run does before its first step, kept off the critical path: the journal loads while
the agent is built (the load waits on the store, the build on the CPU), a load that fails still
fails the attempt before any step, and progress documents (advisory) are written without an
fsync each while every journal record still gets one."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.core.chat_adapter import ADAPTER, ChatAdapter
from tests.support.startup import SCRIPT
from tether.agent import AgentSession, AgentSpec, bind, tool
from tether.errors import StoreUnavailable
from tether.stores.local import LocalStore
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script


def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"Sunny in {city}"


class ReadsJournalWhen(LocalStore):
    """A local store whose first read of the journal's pack waits (up to 5 s) for ``event``."""

    def __init__(self, root: Path, event: threading.Event, fail: bool = False) -> None:
        super().__init__(root)
        self.event, self.fail = event, fail
        self.waited: bool | None = None

    def get(self, key: str) -> bytes | None:
        if key.startswith("journal/") and key.endswith("/pack") and self.waited is None:
            self.waited = self.event.wait(5)
            if self.fail:
                raise StoreUnavailable("the store is down")
        return super().get(key)


class SignalsBuild(ChatAdapter):
    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def build(self, spec: AgentSpec, session: AgentSession) -> Any:
        self.event.set()
        return super().build(spec, session)


async def test_the_journal_loads_while_the_agent_is_built(tmp_path: Path) -> None:
    building = threading.Event()
    store = ReadsJournalWhen(tmp_path / "store", building)
    run_agent = bind(SignalsBuild(building))[0]
    with FakeProvider(Script.from_dict(SCRIPT)) as fake:
        result = await run_agent(
            "weather?", tools=[tool(get_weather)], model="gpt-4o-mini", run_id="r", store=store, upstreams={"openai": fake.url + "/openai"}
        )
    assert store.waited is True  # the build started while the load was waiting on the store
    assert result.status == "succeeded" and (result.model_live, result.tool_live, result.attempt) == (2, 1, 1)


async def test_a_journal_that_cannot_load_fails_the_attempt_before_any_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_STORE_OUTAGE_SECONDS", "0")  # past the bound at once (else the load is made again)
    building = threading.Event()
    store = ReadsJournalWhen(tmp_path / "store", building, fail=True)
    run_agent = bind(SignalsBuild(building))[0]
    with FakeProvider(Script.from_dict(SCRIPT)) as fake:
        with pytest.raises(StoreUnavailable, match="the store is down"):
            await run_agent(
                "weather?",
                tools=[tool(get_weather)],
                model="gpt-4o-mini",
                run_id="r",
                store=store,
                upstreams={"openai": fake.url + "/openai"},
            )
        assert fake.live_calls() == 0


async def test_progress_is_written_without_an_fsync_and_records_with_one(tmp_path: Path, fsynced: list[str]) -> None:
    synced = fsynced
    store = tmp_path / "store"
    with FakeProvider(Script.from_dict(SCRIPT)) as fake:
        result = await bind(ADAPTER)[0](
            "weather?",
            tools=[tool(get_weather)],
            model="gpt-4o-mini",
            run_id="r",
            store=str(store),
            upstreams={"openai": fake.url + "/openai"},
        )
    assert result.status == "succeeded" and (store / "runs" / "r" / "progress.json").is_file()
    journal = [p for p in synced if f"{store}/journal/" in p]
    assert len(journal) >= 3  # two model turns and a tool call, each durable before it is used
    assert not [p for p in synced if f"{store}/runs/" in p]
