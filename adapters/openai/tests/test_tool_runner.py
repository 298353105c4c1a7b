"""The OpenAI Agents SDK with a tool holding a Secret in a tool runner (tether.toolrunner), as the
Kubernetes executor lays a runner pod out: ``python -m tether exec`` runs the SDK's own Runner
with the provider key only; ``python -m tether tool-runner`` runs the tool with its Secret.

The tool sees its secret, in the runner's process; its error goes down the SDK's tool-error path
to the model; nothing the agent wrote or sent holds the secret; a second attempt of the finished
run replays every call and sends none to the runner."""

from __future__ import annotations

from pathlib import Path

from tests.support.tool_runner_pod import DIGEST, SCRIPT, WEATHER_KEY, Pod, finish, stop
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
