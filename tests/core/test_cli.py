"""The `tether` CLI as a new user runs it: `./tether` from the checkout, in a subprocess, against
Tether's fake provider (no API key), with a store of its own.

    an approval-required tool asks in every run (no result from an earlier run's cache), and a
    completed approved call replays within its run without asking again
    a run id means one run: resuming it from another manifest is refused, saying what differs
    a failed start says why (no adapter, a tool that cannot be imported), never "exit code 2",
    and the summary shows no figures of an earlier run
    `tether status` shows a decision as soon as it is made; hints name `tether`
    exit codes are documented in --help
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.support.cli import tether

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "openai"


def example(tmp_path: Path, name: str, edit=None) -> Path:
    """A copy of examples/openai/NAME.yaml (with its script and tools), its documents passed to
    ``edit(docs)`` first."""
    for f in (f"{name}.script.yaml", "example_tools.py"):
        shutil.copy(EXAMPLES / f, tmp_path / f)
    docs = list(yaml.safe_load_all((EXAMPLES / f"{name}.yaml").read_text()))
    if edit is not None:
        edit(docs)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def doc(docs: list[dict], name: str) -> dict:
    return next(d for d in docs if d["metadata"]["name"] == name)


def agent_run(docs: list[dict]) -> dict:
    return next(d for d in docs if d["kind"] == "AgentRun")


def test_approval_required_tool_asks_in_every_run(tmp_path: Path) -> None:
    def default_cache(docs: list[dict]) -> None:
        del doc(docs, "issue-refund")["spec"]["cache"]  # what the CRD defaults to now decides

    manifest, store = example(tmp_path, "refund", default_cache), tmp_path / "store"
    first = tether("run", str(manifest), "--run-id", "first", store=store)
    assert first.returncode == 3, first.stdout + first.stderr
    (approval_id,) = re.findall(r"approve:  tether approve first (\w+) --yes", first.stdout)  # the command the user has

    decided = tether("approve", "first", approval_id, "--yes", "--by", "alice", store=store)
    assert decided.returncode == 0, decided.stderr
    status = tether("status", "first", store=store)  # the runtime has not run since the decision
    assert f"approval {approval_id} approved by alice" in status.stdout, status.stdout

    done = tether("run", str(manifest), "--run-id", "first", store=store)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("issue_refund(") == 1 and "Refunded 40 USD on order A1" in done.stdout
    # Within the run, the approved and completed call replays without asking again.
    again = tether("run", str(manifest), "--run-id", "first", store=store)
    assert again.returncode == 0 and "issue_refund(" not in again.stdout and "Waiting for approval" not in again.stdout

    # A second run with the same arguments waits for its own decision: no cached refund.
    second = tether("run", str(manifest), "--run-id", "second", store=store)
    assert second.returncode == 3, second.stdout + second.stderr
    assert "Waiting for approval" in second.stdout and "issue_refund(" not in second.stdout


def test_cache_auto_with_approval_is_refused_unless_opted_in(tmp_path: Path) -> None:
    def cache_auto(docs: list[dict]) -> None:
        doc(docs, "issue-refund")["spec"]["cache"] = "auto"

    refused = tether("run", str(example(tmp_path, "refund", cache_auto)), store=tmp_path / "store")
    assert refused.returncode == 2
    assert "approval.cachedWithoutApproval" in refused.stderr and "without asking for approval" in refused.stderr


def test_a_run_id_means_one_run(tmp_path: Path) -> None:
    store = tmp_path / "store"
    manifest = example(tmp_path, "weather")
    first = tether("run", str(manifest), "--run-id", "w", store=store)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Answer:" in first.stdout and "Summary" in first.stdout

    def other(docs: list[dict]) -> None:
        agent_run(docs)["spec"]["input"] = "And in Lyon?"
        agent_run(docs)["spec"]["model"]["name"] = "gpt-4.1"

    changed = example(tmp_path, "weather", other)
    refused = tether("run", str(changed), "--run-id", "w", store=store)
    assert refused.returncode == 2
    assert "run id 'w' was started from a different manifest" in refused.stderr
    assert "model: openai:gpt-4o-mini -> openai:gpt-4.1" in refused.stderr
    assert "input: What is the weather in Paris" in refused.stderr and "-> And in Lyon?" in refused.stderr
    assert "attempt 1:" not in refused.stdout  # nothing ran

    # A start that fails says why — in the CLI output, not "exit code 2" — and the summary has
    # none of the earlier run's figures (the run id is reused on purpose, with the explicit flag).
    # A tool module beside the manifest (so allowed) that cannot be imported.
    (tmp_path / "broken_tools.py").write_text("import no_such_dependency  # noqa: F401\n")

    def broken_tool(docs: list[dict]) -> None:
        doc(docs, "get-weather")["spec"]["implementation"] = "broken_tools:get_weather"

    broken = tether("run", str(example(tmp_path, "weather", broken_tool)), "--run-id", "w", "--allow-manifest-change", store=store)
    assert broken.returncode == 2
    assert "Failed: ConfigError: AgentTool get-weather: cannot import broken_tools:get_weather" in broken.stdout, broken.stdout
    assert "exit code 2" not in broken.stdout
    assert "Answer:" not in broken.stdout and "model turns" not in broken.stdout.split("Failed:")[1]


def test_no_adapter_is_the_cause_shown(tmp_path: Path) -> None:
    def langgraph(docs: list[dict]) -> None:
        agent_run(docs)["spec"]["framework"] = "langgraph"

    # The openai environment has no LangGraph adapter.
    proc = tether("run", str(example(tmp_path, "weather", langgraph)), store=tmp_path / "store", env={"TETHER_ENV": "openai"})
    assert proc.returncode == 2
    assert "Failed: ConfigError: no adapter for framework 'langgraph'" in proc.stdout, proc.stdout + proc.stderr


def test_help_documents_exit_codes(tmp_path: Path) -> None:
    for args in (["--help"], ["run", "--help"]):
        proc = subprocess.run(["./tether", *args], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        for line in (
            "0  succeeded",
            "2  terminal failure",
            "3  suspended: waiting for a human approval",
            "4  the store did not answer for longer than TETHER_STORE_OUTAGE_SECONDS",
            "other  the agent process crashed",
        ):
            assert line in proc.stdout, proc.stdout
    assert "usage: tether" in proc.stdout and "./tether" not in proc.stdout


def test_a_store_that_never_answers_ends_the_run_with_exit_code_4(tmp_path: Path) -> None:
    """S3 at a port nobody listens on, waited for 1 s: `tether run` exits 4 (the store did not
    answer: run it again once it does), naming the store, not 1 (a failure of the run's own)."""
    from tests.support.s3 import free_port, set_aws_env

    set_aws_env()
    store = f"s3://runs/tether?endpoint_url=http://127.0.0.1:{free_port()}"
    proc = tether("run", str(example(tmp_path, "weather")), store=store, env={"TETHER_STORE_OUTAGE_SECONDS": "1"})  # type: ignore[arg-type]
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "Could not connect to the endpoint URL" in proc.stdout + proc.stderr


def test_the_cli_behaves_like_kubectl(tmp_path: Path) -> None:
    """--version, an unknown command named as such, `list`, and no traceback when the reader of a
    pipe stops early (`tether status --json | head -n 1`)."""
    import json
    import time

    from tether.api import Steps, Usage
    from tether.contract import Progress
    from tether.progress import write_progress
    from tether.stores import open_store

    version = subprocess.run(["./tether", "--version"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and re.fullmatch(r"tether \d+\.\d+\.\d+\S*\n", version.stdout)
    unknown = subprocess.run(["./tether", "stauts"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 2 and "unknown command 'stauts'" in unknown.stderr and "commands:" in unknown.stderr

    store = open_store(str(tmp_path / "store"))
    empty = tether("list", store=tmp_path / "store")
    assert empty.returncode == 0 and "no runs in" in empty.stdout
    for n, (run, phase) in enumerate((("older-run", "Succeeded"), ("newer-run", "AwaitingApproval"))):
        progress = Progress(
            phase=phase,
            attempt=2,
            steps=Steps(model_live=1, model_replayed=3),
            usage=Usage(live_cost_usd=0.25, run_live_cost_usd=0.5),
            result="x" * 20_000,
            updated_at=time.time() + n,
        )
        write_progress(store, run, progress)
    listed = tether("list", store=tmp_path / "store")
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.splitlines()
    assert rows[0].split()[:3] == ["RUN", "PHASE", "ATTEMPT"]
    assert rows[1].split()[:5] == ["newer-run", "AwaitingApproval", "2", "1/3", "$0.500000"]  # newest first, the run's total cost
    assert rows[2].split()[:2] == ["older-run", "Succeeded"]
    assert [r["run"] for r in json.loads(tether("list", "--json", store=tmp_path / "store").stdout)] == ["newer-run", "older-run"]

    piped = subprocess.run(
        f"./tether status newer-run --json --store {tmp_path / 'store'} | head -n 1",
        shell=True,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert piped.stdout == "{\n" and "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr, piped.stderr


def test_a_killed_attempt_with_no_retries_left_says_so_and_its_last_line_agrees_with_the_exit_code(tmp_path: Path) -> None:
    """`--retries 0` and a SIGKILL right after step 2 (the tool, a few milliseconds after the
    turn): no retry is promised, the summary counts both steps as the journal does, `tether run`
    exits 1 and its last JSON line says 1 and Failed (never the signal as the exit code, never
    Succeeded)."""
    import json

    proc = tether("run", str(example(tmp_path, "weather")), "--kill-after", "2", "--retries", "0", store=tmp_path / "store")
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "killing the agent process after step 2" in out
    assert "starting it again" not in out and "the agent process died (signal 9); no retries left (0)" in out
    assert "attempt 2:" not in out and "Answer:" not in out
    assert "model turns 1 live / 0 replayed, tools 1 live / 0 replayed" in out, out
    assert json.loads(out.strip().splitlines()[-1]) == {"run_id": "weather-openai", "exit_code": 1, "phase": "Failed", "signal": 9}


BYO_AGENT = '''
import os
import pathlib

from agents import Agent
from tether import tool
from tether_openai.adapter import function_tool


@tool(cache="auto")
def exchange_rate(currency: str) -> str:
    """The exchange rate of a currency to USD."""
    with open(pathlib.Path(os.environ["BYO_EFFECTS"]), "a") as f:
        f.write(currency + "\\n")
    return f"1 {currency} = 1.08 USD"


agent = Agent(name="byo", instructions="Answer with the rate.", model="gpt-4o-mini", tools=[function_tool(exchange_rate)])
'''


def test_a_byo_agents_cached_tool_is_reused_across_three_local_runs(tmp_path: Path) -> None:
    """A bring-your-own agent's Tether tool with cache="auto", run three times with `tether run`
    on the local store (three run ids, the same call): the tool's side effect happens once, the
    second and third runs show its result as cached."""
    (tmp_path / "byo_rates.py").write_text(BYO_AGENT)
    script = {
        "conversations": [
            {"match": "", "turns": [{"tool_calls": [{"name": "exchange_rate", "arguments": {"currency": "EUR"}}]}, {"text": "1.08"}]}
        ]
    }
    (tmp_path / "rates.script.yaml").write_text(yaml.safe_dump(script))
    run = {
        "apiVersion": "tether.dev/v1alpha1",
        "kind": "AgentRun",
        "metadata": {"name": "rates"},
        "spec": {
            "framework": "openai",
            "model": {"name": "gpt-4o-mini", "provider": "openai"},
            "agent": "byo_rates:agent",
            "input": "EUR?",
        },
    }
    manifest = tmp_path / "rates.yaml"
    manifest.write_text(yaml.safe_dump(run, sort_keys=False))
    effects = tmp_path / "effects"
    modes = []
    for i in range(3):
        proc = tether("run", str(manifest), "--run-id", f"rates-{i}", store=tmp_path / "store", env={"BYO_EFFECTS": str(effects)})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        modes.append(re.findall(r"step +\d+ +(\w+) +tool +exchange_rate", proc.stdout))
    assert modes == [["live"], ["cached"], ["cached"]]
    assert effects.read_text() == "EUR\n"
