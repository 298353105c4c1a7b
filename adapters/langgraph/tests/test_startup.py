"""Start-up of a LangGraph agent process: ``import tether_langgraph`` and a finished run's
``run_agent`` (a declarative graph with a ``@tool``, every step replayed) load no Flyte, no
loopback proxy, no Kubernetes client and no S3 client. Measured in a fresh process."""

from __future__ import annotations

from pathlib import Path

from tests.support.startup import probe
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script

SCRIPT = {
    "conversations": [
        {
            "match": "",
            "turns": [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Done:"},
            ],
        }
    ]
}


def test_import_and_finished_run_load_nothing_heavy(tmp_path: Path) -> None:
    with FakeProvider(Script.from_dict(SCRIPT)) as fake:
        figures = probe("tether_langgraph", str(tmp_path / "store"), fake.url + "/openai")
        assert fake.live_calls() == 2
    assert figures["after_import"] == [] and figures["after_run"] == []
    assert (figures["model_live"], figures["model_replayed"], figures["tool_replayed"]) == (0, 2, 1)
