"""Seeded SIGKILL trials of a scripted multi-turn run with tools, resumed until it completes.

The run is ``tether.testing.chat_loop`` (the real ``openai`` SDK, the tool seam, the wire seam
through the in-process transport or the loopback proxy, chosen per attempt): three model turns and
four tool calls (``get_weather`` and ``lookup`` sleep a little; ``flaky`` fails and its error is
recorded), against a fake provider with 20 ms latency. Each trial kills 1-3 attempts — at a seeded
random time, or with ``--kill-after-step N`` (SIGKILL from inside, right after step N was
recorded), or a moment (0-4 ms) after a tool's side effect — then runs attempts until one
completes. A tenth of the trials journal to S3.

Attempts are real processes killed with SIGKILL. To keep 50 trials fast, each worker keeps a
*zygote*: a Python process that imported everything once and forks one child per attempt; the
child runs ``chat_loop.main(argv)`` exactly as ``python -m tether.testing.chat_loop`` does, and the
zygote (its parent) kills it and reaps it, so a pid is never reused under our feet. One
uninterrupted run of the real command gives the expected answer.

What is proved for every trial, and why it is exact
---------------------------------------------------
The attempts P1..Pn of a trial run strictly one after the other (each is reaped before the next
starts). Each claims at most one attempt number when it loads the journal (an exclusive create of
``attempts/NNNNN``); listing the markers after each process tells which process claimed which
number, and every record carries the attempt number that wrote it — so every record has a known
writer process W(record). Records are created exclusively and never rewritten (no record is
corrupt, checked below), so a record written by Pw exists, unchanged, from the moment Pw wrote
it, through every later process.

Tools. ``chat_loop`` appends one line per execution to ``$TETHER_TOOL_LOG`` *before* the seam
writes the record, with the step's idempotency key (sha256 of scope, fingerprint, occurrence —
recomputed here from each record) and the pid (mapped to the process). For every tool record with
writer Pw: no execution of its key in any process after Pw (that would be a run of a step whose
record existed), exactly one in Pw (the recorded one), at most one in each earlier process (an
execution whose record was lost to a kill between the side effect and the write — the window the
idempotency key exists for: the re-execution carries the same key). Every logged key belongs to a
record, and the run's four tool steps all have one.

Model turns. Each process makes its model calls one at a time (``max_retries=0``), and a live
answer is written to the journal before the SDK sees it. So the live calls of a process (the ledger
of the fake provider that attempt alone talks to: a request a killed attempt left in flight reaches
the ledger after it died, answered or marked "caller gone", so time windows would not do) are, in
order, the calls whose records it wrote, plus at most one in flight when it was killed:
``live(Pj) == written(Pj) + {0, or 1 if killed}``. Summed: total live calls ≤ model records +
killed attempts. Pairing the k-th live call of Pj with the k-th record it wrote (checked by time:
the call lies inside the record's timing) gives each model record the exact request body hash it
answered; no process after the writer sends that body live again — a recorded model turn never
reaches the provider twice.

Finally every object in the journal decodes (``Record.decode`` is not ``None``), the journal holds
exactly the 3 model and 4 tool records of the uninterrupted path, and the completing attempt's
answer equals the uninterrupted run's.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.s3 import new_bucket
from tests.support.zygote import Zygote
from tether.canonical import sha256_hex
from tether.journal import Record, read_records
from tether.stores import open_store
from tether.testing import FakeProvider

ROOT = Path(__file__).resolve().parents[2]
TRIALS = 50
WORKERS = 2
QUESTION = "plan a trip to Paris and Rome"
SCRIPT = {
    "conversations": [
        {
            "match": "trip",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "get_weather", "arguments": {"city": "Paris"}},
                        {"name": "lookup", "arguments": {"topic": "trains"}},
                    ]
                },
                {
                    "tool_calls": [
                        {"name": "get_weather", "arguments": {"city": "Rome"}},
                        {"name": "flaky", "arguments": {"reason": "demo"}},
                    ]
                },
                {"text": "Plan:", "text_from_tool_results": True},
            ],
        }
    ]
}
MODEL_TURNS, TOOL_CALLS = 3, 4
STEPS = MODEL_TURNS + TOOL_CALLS
SLEEPS = ["--tool-sleep", "get_weather=0.04", "--tool-sleep", "lookup=0.07"]
LATENCY = 0.02

#: What every attempt would import; the zygote (``tests/support/zygote.py``) imports it once.
IMPORTS = [
    "httpx",
    "openai",
    "openai.resources.chat",
    "openai.types.chat",
    "aiohttp",
    "boto3",
    "tether.testing.chat_loop",
    "tether.wire.proxy",
    "tether.wire.transport",
    "tether.stores.s3",
    "tether.wire.seam",
]


def new_zygote() -> Zygote:
    """Forks ``python -m tether.testing.chat_loop ARGV``, exactly, per attempt; the CA bundle is
    loaded once before forking (as a long-lived process would)."""
    return Zygote("tether.testing.chat_loop:main", imports=IMPORTS, prepare="tether.wire.seam:tls_context")


def _argv(store: str, scope: str, upstream: str, *, stream: bool, via: str, kill_after_step: int = 0) -> list[str]:
    argv = ["--store", store, "--scope", scope, "--upstream", upstream, "--question", QUESTION, "--via", via, *SLEEPS]
    if stream:
        argv.append("--stream")
    if kill_after_step:
        argv += ["--kill-after-step", str(kill_after_step)]
    return argv


def _records(store_url: str, scope: str) -> tuple[dict[str, Record], list[str]]:
    """The run's records (pack, tail and loose records, read only) by step, and its attempt markers."""
    store = open_store(store_url)
    keys = store.list(f"journal/{scope}/")
    records = {f"{r.kind}/{r.fingerprint}-{r.occurrence}": r for r in read_records(store, scope)}
    return records, sorted(k for k in keys if "/attempts/" in k)


def trial(seed: int, zygote: Zygote, workdir: Path, stores: dict[str, str], expected: str, durations: dict[str, float]) -> dict:
    """One seeded trial; returns what it saw (the assertions run in the test, per trial)."""
    rng = random.Random(seed)
    backend = "s3" if seed % 10 == 9 else "local"
    store, scope = stores[backend], f"trial-{seed}"
    stream = rng.random() < 0.5
    kills = rng.choice([1, 1, 2, 2, 3])
    workdir.mkdir(parents=True, exist_ok=True)
    tool_log = workdir / "tools.jsonl"
    processes: list[dict] = []
    markers_before: list[str] = []
    # One fake provider per attempt: a request a killed attempt left in flight is still answered
    # (and written to a ledger) after its sender died; its own provider's ledger keeps it apart.
    providers: list[FakeProvider] = []
    try:
        for n in range(kills + 12):  # planned kills, then attempts until one completes
            via = rng.choice(["transport", "proxy"])
            step, kill_s, side_effect = 0, None, {}
            if n < kills:
                mode = rng.choice(["step", "timer", "side-effect"])
                if mode == "step":
                    step = rng.randint(1, STEPS)
                elif mode == "timer":
                    kill_s = rng.uniform(0.0, durations[backend])
                else:  # a moment after the k-th tool execution of this attempt: inside the side effect → record window
                    side_effect = {
                        "tool_log": str(tool_log),
                        "kill_after_execution": rng.randint(1, TOOL_CALLS),
                        "delay": rng.uniform(0.0, 0.004),
                    }
            providers.append(FakeProvider(SCRIPT, latency=LATENCY).start())
            argv = _argv(store, scope, providers[-1].url + "/openai", stream=stream, via=via, kill_after_step=step)
            p = zygote.run(argv, workdir, f"attempt{n}", env={"TETHER_TOOL_LOG": str(tool_log)}, kill_after_s=kill_s, **side_effect)
            p.update(plan={"via": via, "kill_after_step": step, "kill_after_s": kill_s, **side_effect})
            _, markers = _records(store, scope)
            p["claimed"] = [int(m.rsplit("/", 1)[1]) for m in markers if m not in markers_before]
            markers_before = markers
            processes.append(p)
            if not p["killed"]:
                break
        time.sleep(LATENCY + 0.1)  # requests orphaned by the last kill reach their ledger
        for p, provider in zip(processes, providers):
            p["ledger"] = provider.ledger.snapshot()
    finally:
        for provider in providers:
            provider.stop()
    records, _ = _records(store, scope)
    executions = [json.loads(line) for line in tool_log.read_text().splitlines()] if tool_log.exists() else []
    return {
        "seed": seed,
        "backend": backend,
        "stream": stream,
        "scope": scope,
        "expected": expected,
        "processes": processes,
        "records": records,
        "executions": executions,
    }


def check(t: dict) -> None:
    """Every assertion of the module docstring, for one trial."""
    procs, scope = t["processes"], t["scope"]
    last = procs[-1]
    assert not last["killed"] and last["exit"] == 0, f"the last attempt did not complete: {last['stderr'][-2000:]}"
    for p in procs[:-1]:
        assert p["killed"], f"an attempt failed without being killed: exit {p['exit']}: {p['stderr'][-2000:]}"
    out = json.loads(last["stdout"].strip().splitlines()[-1])
    assert out["answer"] == t["expected"]
    assert out["corrupt"] == 0
    assert out["model_live"] + out["model_replayed"] == MODEL_TURNS
    assert out["tool_live"] + out["tool_replayed"] == TOOL_CALLS

    # Which process claimed which attempt number.
    for p in procs:
        assert len(p["claimed"]) <= 1, p["claimed"]
    writer_of = {a: i for i, p in enumerate(procs) for a in p["claimed"]}
    assert out["attempt"] in writer_of and writer_of[out["attempt"]] == len(procs) - 1

    # Exactly the records of the uninterrupted path (a corrupt one would be missing).
    records = t["records"]
    kinds = Counter(r.kind for r in records.values())
    assert kinds == {"model": MODEL_TURNS, "tool": TOOL_CALLS}, kinds

    # Tools: no execution of a recorded step after the process that wrote its record.
    pid_index = {p["pid"]: i for i, p in enumerate(procs)}
    runs_of: dict[str, list[int]] = {}
    for e in t["executions"]:
        runs_of.setdefault(e["key"], []).append(pid_index[e["pid"]])
    tool_keys = {}
    for r in records.values():
        if r.kind == "tool":
            key = sha256_hex(f"{scope}\0{r.fingerprint}\0{r.occurrence}".encode())[:32]
            tool_keys[key] = writer_of[r.attempt]
    assert set(runs_of) == set(tool_keys), "a tool ran under a key no record has, or a record has no execution"
    for key, w in tool_keys.items():
        where = Counter(runs_of[key])
        assert all(i <= w for i in where), f"tool step {key} ran again after its record was written by process {w}: {runs_of[key]}"
        assert where[w] == 1, f"tool step {key}: {where[w]} executions in its writing process"
        assert all(n == 1 for n in where.values()), f"tool step {key} ran twice in one attempt: {runs_of[key]}"

    # Model turns: live calls per process = records it wrote (+1 in flight when killed).
    # The one call a killed process had in flight may be answered to no one ("caller gone").
    assert all(e.live or (p["killed"] and e.fault == "caller gone") for p in procs for e in p["ledger"]), (
        "a call failed though no fault was injected"
    )
    model_records = [r for r in records.values() if r.kind == "model"]
    recorded_sha: dict[str, int] = {}
    for i, p in enumerate(procs):
        live = sorted(p["ledger"], key=lambda e: e.time)
        wrote = sorted((r for r in model_records if writer_of[r.attempt] == i), key=lambda r: r.started_at)
        slack = 1 if p["killed"] else 0
        assert len(wrote) <= len(live) <= len(wrote) + slack, f"process {i}: {len(live)} live calls, {len(wrote)} records"
        for e, r in zip(live, wrote):
            assert r.started_at - 0.05 <= e.time <= r.started_at + r.duration_ms / 1000 + 0.05, "live call and record out of step"
            recorded_sha[e.body_sha256] = i
    assert sum(len(p["ledger"]) for p in procs) <= len(model_records) + sum(p["killed"] for p in procs)
    for i, p in enumerate(procs):
        for e in p["ledger"]:
            if e.body_sha256 in recorded_sha:
                assert i <= recorded_sha[e.body_sha256], (
                    f"process {i} called the model for a turn recorded by process {recorded_sha[e.body_sha256]}"
                )


@pytest.fixture(scope="module")
def trials(tmp_path_factory, s3_endpoint):
    base = tmp_path_factory.mktemp("crash")
    stores = {"local": str(base / "store"), "s3": f"s3://{new_bucket(s3_endpoint)}/crash?endpoint_url={s3_endpoint}"}
    zygotes: list[Zygote] = []
    local = threading.local()

    warmer = FakeProvider(SCRIPT).start()

    def zygote() -> Zygote:
        if not hasattr(local, "z"):
            local.z = new_zygote()
            for stream in (False, True):
                local.z.warm(
                    _argv(str(base / "warm"), f"warm-{id(local.z)}-{stream}", warmer.url + "/openai", stream=stream, via="transport")
                )
            zygotes.append(local.z)
        return local.z

    try:
        # The reference: one uninterrupted run of the real command.
        with FakeProvider(SCRIPT, latency=LATENCY) as provider:
            cmd = [
                sys.executable,
                "-m",
                "tether.testing.chat_loop",
                *_argv(stores["local"], "reference", provider.url + "/openai", stream=False, via="transport"),
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
            assert done.returncode == 0, done.stderr
            reference = json.loads(done.stdout.strip().splitlines()[-1])
            assert (reference["model_live"], reference["tool_live"]) == (MODEL_TURNS, TOOL_CALLS)
            assert provider.live_calls() == MODEL_TURNS
            # How long an uninterrupted forked attempt takes on each store: the range of kill times.
            durations = {}
            for backend, store in stores.items():
                p = zygote().run(
                    _argv(store, f"timing-{backend}", provider.url + "/openai", stream=False, via="transport"), base, "attempt0"
                )
                assert p["exit"] == 0, p["stderr"]
                durations[backend] = (p["t1"] - p["t0"]) * 1.1
        expected = reference["answer"]
        assert expected.startswith("Plan:") and "Rome" in expected and "flaky tool failed" in expected

        with ThreadPoolExecutor(WORKERS) as pool:
            futures = [
                pool.submit(lambda s: trial(s, zygote(), base / f"t{s}", stores, expected, durations), seed) for seed in range(TRIALS)
            ]
            yield [f.result() for f in futures]
    finally:
        warmer.stop()
        for z in zygotes:
            z.close()


@pytest.mark.parametrize("seed", range(TRIALS))
def test_crash_trial(trials, seed):
    t = trials[seed]
    try:
        check(t)
    except AssertionError as e:
        plan = [(p["plan"], "killed" if p["killed"] else p["exit"]) for p in t["processes"]]
        raise AssertionError(f"seed {seed} ({t['backend']}, stream={t['stream']}), attempts {plan}: {e}") from e


def test_trials_cover_the_interesting_cases(trials):
    """The seeds are only worth something if they hit the cases that matter."""
    procs = [p for t in trials for p in t["processes"]]
    assert sum(p["killed"] for p in procs) >= TRIALS
    assert any(p["plan"]["kill_after_step"] == STEPS for p in procs), "no kill between the last record and the answer"
    assert any(p["plan"]["kill_after_s"] is not None and p["killed"] for p in procs)
    assert {t["backend"] for t in trials} == {"local", "s3"} and {t["stream"] for t in trials} == {True, False}
    assert any(p["plan"].get("kill_after_execution") and p["killed_by_timer"] for p in procs)
    reexecuted = sum(len(t["executions"]) - len({x["key"] for x in t["executions"]}) for t in trials)
    unrecorded = sum(len(p["ledger"]) for t in trials for p in t["processes"]) - MODEL_TURNS * len(trials)
    print(
        f"\n{len(procs)} attempts, {sum(p['killed'] for p in procs)} killed "
        f"({sum(p['plan']['kill_after_step'] > 0 for p in procs)} after a step, {sum(p['killed_by_timer'] for p in procs)} by the timer, "
        f"{sum(bool(p['plan'].get('kill_after_execution')) and p['killed_by_timer'] for p in procs)} of them just after a tool's side effect); "
        f"{unrecorded} live model calls lost to a kill and re-made; {reexecuted} tool executions lost to a kill "
        f"between side effect and record and re-run under the same key"
    )
    # Some retry replayed tools and model turns recorded by an earlier process.
    finals = [json.loads(t["processes"][-1]["stdout"].strip().splitlines()[-1]) for t in trials]
    assert any(f["model_replayed"] and f["tool_replayed"] for f in finals)
    assert any(f["model_replayed"] == MODEL_TURNS for f in finals)
