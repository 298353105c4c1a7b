"""The OpenAI Agents SDK with a tool holding a Secret in a tool runner (tether.toolrunner), as the
Kubernetes executor lays a runner pod out: ``python -m tether exec`` runs the SDK's own Runner
with the provider key only; ``python -m tether tool-runner`` runs the tool with its Secret.

The tool sees its secret, in the runner's process; its error goes down the SDK's tool-error path
to the model; nothing the agent wrote or sent holds the secret; a second attempt of the finished
run replays every call and sends none to the runner."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.tool_runner_pod import DIGEST, SCRIPT, WEATHER_KEY, Pod, finish, run_image_only_embed, stop
from tether.contract import EXIT_SUCCEEDED
from tether.testing.fake_provider import FakeProvider


def test_a_tool_with_a_secret_works_through_its_runner(tmp_path: Path) -> None:
    with FakeProvider(SCRIPT, seed=5) as fake:
        pod = Pod(tmp_path, fake.url, "weather: Paris and Atlantis?", test_adapter=False)
        runner = pod.runner()
        try:
            code, outcome, err = finish(pod.agent())
            assert code == EXIT_SUCCEEDED, err
            assert outcome["status"] == "succeeded" and outcome["tool_live"] == 3, outcome
            calls = {c["city"]: c for c in pod.seen()}
            assert set(calls) == {"Paris", "Atlantis"}
            assert all(c["pid"] == runner.pid and c["key_sha"] == DIGEST and c["environ"] for c in calls.values())
            sent = b"".join(e.body for e in fake.ledger).decode()
            assert "no such city: Atlantis" in sent and "Paris: sunny" in sent  # the error reached the model
            assert WEATHER_KEY not in sent and WEATHER_KEY.encode() not in pod.store_bytes()

            live = fake.live_calls()
            code, again, err = finish(pod.agent())
            assert code == EXIT_SUCCEEDED, err
            assert again["tool_replayed"] == 3 and again["tool_live"] == 0 and again["output"] == outcome["output"]
            assert fake.live_calls() == live and len(pod.seen()) == 2  # nothing sent again
        finally:
            stop(runner)


def test_a_tool_only_its_image_has_is_offered_with_its_own_schema(tmp_path: Path) -> None:
    """AgentTool image: the module exists only where its runner runs; the SDK builds the tool's
    schema from the stand-in its runner described, and the call runs in the runner."""
    image = tmp_path / "tool-image"
    image.mkdir()
    (image / "embed_tools.py").write_text(
        "def embed(text: str, dims: int = 4, normalise: bool = True) -> list[float]:\n"
        '    """Embed a text."""\n'
        "    return [float(len(text))] * dims\n"
    )
    script = {"conversations": [{"match": "embed:", "turns": [
        {"tool_calls": [{"name": "embed", "arguments": {"text": "hello", "dims": 3}}]}, {"text_from_tool_results": True, "text": "Vector:"}]}]}  # fmt: skip
    with FakeProvider(script, seed=5) as fake:
        pod = Pod(tmp_path, fake.url, "embed: hello", test_adapter=False)
        code, outcome, err = run_image_only_embed(pod, image)
        assert code == EXIT_SUCCEEDED, err
        [offered] = json.loads(fake.ledger[0].body)["tools"]
    assert "[5.0, 5.0, 5.0]" in outcome["output"], outcome
    assert offered["name"] == "embed" and offered["description"] == "Embed a text"
    properties = offered["parameters"]["properties"]
    assert {k: v["type"] for k, v in properties.items()} == {"text": "string", "dims": "integer", "normalise": "boolean"}
