"""`tether exec --standby FILE`: what a standby pod runs (the Kubernetes executor's spec.standby).
It starts, imports everything and waits, running nothing, until FILE holds anything (the pod's
`tether.dev/go` annotation as a downward API file); then it runs the attempt in the process that
was ready before it was needed. Stopped while it waits (its pod deleted: SIGTERM), it exits 130
having run nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.support.cli import REPO
from tether.progress import read_progress
from tether.stores import open_store
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script

SCRIPT = {"conversations": [{"match": "", "turns": [{"text": "Done: standing by paid off."}]}]}


def standby(tmp_path: Path, base_url: str, go_at_start: str = "", fifo: bool = False) -> tuple[subprocess.Popen[str], Path, Path]:
    request = {
        "runId": "standby-1",
        "namespace": "default",
        "name": "standby",
        "spec": {"framework": "openai", "model": {"name": "gpt-4o-mini", "provider": "openai", "baseURL": base_url}, "input": "hi"},
    }
    (tmp_path / "request.json").write_text(json.dumps(request))
    go, store = tmp_path / "go", tmp_path / "store"
    if fifo:  # its first read blocks until the test answers it (empty): the test knows it was looked at
        os.mkfifo(go)
    else:
        go.write_text(go_at_start)  # the annotation's file exists from the pod's start, empty while it waits
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k not in ("TETHER_COMMAND", "TETHER_ENV")}
    proc = subprocess.Popen(
        ["./tether", "exec", str(tmp_path / "request.json"), "--standby", str(go), "--store", str(store)],
        cwd=REPO,
        env={**clean, "OPENAI_API_KEY": "sk-standby", "OPENAI_AGENTS_DISABLE_TRACING": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, go, store


def ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:  # what its pod's log says once the imports are done
        if line.startswith("tether exec: standing by (imports done), waiting for "):
            return
    raise AssertionError(f"exited {proc.wait()} without standing by")


def still_waiting(proc: subprocess.Popen[str], fake: FakeProvider, store: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        assert fake.live_calls() == 0 and read_progress(open_store(str(store)), "standby-1") is None, "it ran before its go"
        time.sleep(0.2)


def test_a_standby_runs_its_attempt_only_once_told_to_go(tmp_path: Path) -> None:
    with FakeProvider(Script.from_dict(SCRIPT)) as fake:
        proc, go, store = standby(tmp_path, fake.base_url("openai"))
        ready(proc)
        still_waiting(proc, fake, store, 2)
        told = time.time()
        go.write_text("1764921600.0")
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out + err
        outcome = json.loads(out.strip().splitlines()[-1])
        assert outcome["status"] == "succeeded" and outcome["output"] == "Done: standing by paid off."
        worker = outcome["warm_worker"]
        assert worker["ready"] < told <= worker["go"], "ready before it was told to go, and ran only after"
        assert fake.live_calls() == 1


def test_a_standby_stopped_while_it_waits_runs_nothing(tmp_path: Path) -> None:
    with FakeProvider(Script.from_dict(SCRIPT)) as fake:
        proc, go, store = standby(tmp_path, fake.base_url("openai"))
        ready(proc)
        still_waiting(proc, fake, store, 1)
        proc.send_signal(signal.SIGTERM)  # its pod deleted
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, out + err
        assert fake.live_calls() == 0 and read_progress(open_store(str(store)), "standby-1") is None


def test_a_pod_created_told_to_go_runs_at_once(tmp_path: Path) -> None:
    """A spec.standby run's first pod is created with its go set: it runs its attempt without
    the warm-up (and without standing by)."""
    with FakeProvider(Script.from_dict(SCRIPT)) as fake:
        proc, _, _ = standby(tmp_path, fake.base_url("openai"), go_at_start="1764921600.0")
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out + err
        outcome = json.loads(out.strip().splitlines()[-1])
        assert outcome["status"] == "succeeded" and "warm_worker" not in outcome
        assert "standing by" not in err and fake.live_calls() == 1


def warm_pod(tmp_path: Path, base_url: str, *extra: str) -> tuple[subprocess.Popen[str], Path, Path, dict[str, object]]:
    """`tether exec REQUEST --warm-pod openai`: a warm pod's runtime, its request file empty (the
    pod's `tether.dev/request` annotation before a run claims it)."""
    request = {
        "runId": "warm-1",
        "namespace": "default",
        "name": "warm",
        "spec": {"framework": "openai", "model": {"name": "gpt-4o-mini", "provider": "openai", "baseURL": base_url}, "input": "hi"},
    }
    file, store = tmp_path / "request.json", tmp_path / "store"
    file.write_text("")
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k not in ("TETHER_COMMAND", "TETHER_ENV")}
    proc = subprocess.Popen(
        ["./tether", "exec", str(file), "--warm-pod", "openai", "--store", str(store), *extra],
        cwd=REPO,
        env={**clean, "OPENAI_AGENTS_DISABLE_TRACING": "1", "TETHER_SECRETS": json.dumps({"model": {"apiKey": "sk-warm"}})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, file, store, request


def warm(proc: subprocess.Popen[str]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("tether exec: a warm pod (imports done), waiting for a run to claim it"):
            return
    raise AssertionError(f"exited {proc.wait()} without waiting to be claimed")


def test_a_warm_pod_runs_the_request_of_the_run_that_claims_it(tmp_path: Path) -> None:
    """Started before any run: it imports the framework and waits; the claiming run's request,
    written into its request file, runs in that process, with the provider key from the pod's
    Secrets (the provider known only from the request)."""
    with FakeProvider(Script.from_dict(SCRIPT)) as fake:
        proc, file, store, request = warm_pod(tmp_path, fake.base_url("openai"))
        warm(proc)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            assert proc.poll() is None and fake.live_calls() == 0, "it ran nothing before a claim"
            time.sleep(0.2)
        claimed = time.time()
        file.write_text(json.dumps(request))
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out + err
        outcome = json.loads(out.strip().splitlines()[-1])
        assert outcome["status"] == "succeeded" and outcome["output"] == "Done: standing by paid off."
        assert outcome["warm_worker"]["ready"] < claimed <= outcome["warm_worker"]["go"]
        # No *_API_KEY in its environment: the SDK would refuse to start without the pod's key.
        assert fake.live_calls() == 1 and "authorization" in next(iter(fake.ledger)).headers
        assert read_progress(open_store(str(store)), "warm-1") is not None


def test_a_warm_pod_nobody_claims_exits_having_run_nothing(tmp_path: Path) -> None:
    with FakeProvider(Script.from_dict(SCRIPT)) as fake:
        proc, _, store, _ = warm_pod(tmp_path, fake.base_url("openai"), "--idle-seconds", "1")
        warm(proc)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, out + err
        assert fake.live_calls() == 0 and not store.exists()


def test_a_warm_pod_refuses_a_request_of_another_framework(tmp_path: Path) -> None:
    with FakeProvider(Script.from_dict(SCRIPT)) as fake:
        proc, file, _, request = warm_pod(tmp_path, fake.base_url("openai"))
        warm(proc)
        file.write_text(json.dumps({**request, "spec": {**request["spec"], "framework": "langgraph"}}))  # type: ignore[dict-item]
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 2 and "this warm pod is openai's; the request is langgraph's" in err, out + err
        assert fake.live_calls() == 0


def test_a_standby_told_to_go_during_its_imports_skips_the_rest_of_its_warm_up(tmp_path: Path) -> None:
    """The next attempt's pod started beside one being deleted is often told to go before its
    imports are done (the old pod stopped within a second): it runs its attempt once the framework
    is imported, without the warm-up's throwaway run and collection (and never stands by)."""
    with FakeProvider(Script.from_dict(SCRIPT)) as fake:
        proc, go, _ = standby(tmp_path, fake.base_url("openai"), fifo=True)
        with open(go, "w"):  # its first look at the go file (before its imports): empty
            pass
        told = tmp_path / "go.told"
        told.write_text("1764921600.0")
        told.replace(go)  # told to go while it imports the framework
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out + err
        outcome = json.loads(out.strip().splitlines()[-1])
        assert outcome["status"] == "succeeded" and "warm_worker" not in outcome
        assert "standing by" not in err and fake.live_calls() == 1
