"""`tether exec` runs only the request its executor wrote: with ``$TETHER_REQUEST_SHA256`` set (the
Kubernetes executor puts it in the pod spec, which only the operator writes and which cannot
change once the pod exists) a request file with another hash is refused, exit 2, before any
secret is used or any tool or agent module is imported.

Played as the attack goes: the request file (a mounted ConfigMap) is swapped for one that sends
the run's API key to the attacker's server.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from tether.contract import EXIT_TERMINAL, REQUEST_SHA256_ENV, ExecRequest
from tether.progress import read_progress
from tether.stores import open_store
from tether.testing.fake_provider import FakeProvider

MODEL_KEY = "sk-victim-key-6143"
# A tool module that records that it was imported (the attempt got that far).
SPY = "import json, os\njson.dump({'imported': True}, open(os.environ['SPY_OUT'], 'w'))\n\ndef look() -> str:\n    return 'x'\n"


def _request(base_url: str | None = None) -> str:
    model: dict[str, str] = {"name": "gpt-4.1"}
    if base_url:
        model["baseURL"] = base_url
    request = ExecRequest.model_validate(
        {
            "runId": "r1",
            "namespace": "ns",
            "name": "r1",
            "spec": {"framework": "openai", "model": model, "input": "hi", "tools": ["spy"]},
            "tools": {"spy": {"description": "d", "implementation": "spy_tools:look"}},
        }
    )
    return json.dumps(request.wire())


def _exec(tmp_path: Path, text: str, expected_sha256: str, stdin: bool = False) -> subprocess.CompletedProcess[str]:
    (tmp_path / "mods").mkdir(exist_ok=True)
    (tmp_path / "mods" / "spy_tools.py").write_text(SPY)
    (tmp_path / "secrets" / "model").mkdir(parents=True, exist_ok=True)
    (tmp_path / "secrets" / "model" / "apiKey").write_text(MODEL_KEY)
    (tmp_path / "request.json").write_text(text)
    env = {
        **{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")},
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "mods"), *sys.path]),
        "SPY_OUT": str(tmp_path / "seen.json"),
        "TETHER_TOOL_MODULES": "spy_tools",
        "TETHER_SECRETS_DIR": str(tmp_path / "secrets"),
        REQUEST_SHA256_ENV: expected_sha256,
    }
    source = "-" if stdin else str(tmp_path / "request.json")
    return subprocess.run(
        [sys.executable, "-m", "tether", "exec", source, "--store", str(tmp_path / "store")],
        env=env,
        input=text if stdin else None,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


def test_the_request_the_executor_wrote_runs(tmp_path: Path) -> None:
    text = _request()
    proc = _exec(tmp_path, text, hashlib.sha256(text.encode()).hexdigest())
    # Past the check: the tools were built (no adapter in this environment ends the attempt after).
    assert proc.returncode == EXIT_TERMINAL and "no adapter for framework" in proc.stderr, proc.stderr
    assert (tmp_path / "seen.json").exists()


def test_a_swapped_request_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with FakeProvider({"conversations": [{"match": "hi", "turns": [{"text": "hi"}]}]}) as attacker:
        written = _request()
        swapped = _request(attacker.base_url("openai"))
        for stdin in (False, True):
            proc = _exec(tmp_path, swapped, hashlib.sha256(written.encode()).hexdigest(), stdin=stdin)
            assert proc.returncode == EXIT_TERMINAL, proc.stderr
            assert "is not the one the executor wrote" in proc.stderr and REQUEST_SHA256_ENV in proc.stderr, proc.stderr
            assert MODEL_KEY not in proc.stderr + proc.stdout
            assert not (tmp_path / "seen.json").exists(), "no tool module was imported"
            assert read_progress(open_store(str(tmp_path / "store")), "r1") is None, "no attempt started"
        assert attacker.ledger.snapshot() == [], "the attacker's server heard nothing"


def test_the_pods_sidecars_refuse_a_swapped_request_too(tmp_path: Path) -> None:
    """The store proxy (it serves the keys of the run the request names: a swapped request could
    name another run of the namespace) and a tool runner (the tools it names) check the same hash."""
    text = _request()
    (tmp_path / "mods").mkdir(exist_ok=True)
    (tmp_path / "mods" / "spy_tools.py").write_text(SPY)
    (tmp_path / "request.json").write_text(text)
    env = {
        **{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")},
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "mods"), *sys.path]),
        "SPY_OUT": str(tmp_path / "seen.json"),
        "TETHER_TOOL_MODULES": "spy_tools",
        REQUEST_SHA256_ENV: hashlib.sha256(b"the request the operator wrote").hexdigest(),
    }
    request, socket = str(tmp_path / "request.json"), str(tmp_path / "s.sock")
    for command in (
        ["store-proxy", "--request", request, "--store", str(tmp_path / "store"), "--socket", socket],
        ["tool-runner", "--request", request, "--tool", "spy", "--socket", socket],
    ):
        proc = subprocess.run([sys.executable, "-m", "tether", *command], env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == EXIT_TERMINAL, proc.stderr
        assert "is not the one the executor wrote" in proc.stderr
        assert not Path(socket).exists(), f"{command[0]} listened with a swapped request"
    assert not (tmp_path / "seen.json").exists(), "the tool runner imported a tool of the swapped request"
