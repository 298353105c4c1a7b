"""The runtime/operator contract (exit codes, the progress record's key, annotation and label
keys, environment variable names, the run request, the progress record, the outcome) is spelled
out once, in tether.contract: no other module of the runtime or the operator writes one of those
values as a literal, and the operator takes them from there."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from tether import contract
from tether.contract import EXIT_SUSPENDED, EXIT_TERMINAL, ExecRequest, Figures, Outcome
from tether.progress import read_progress
from tether.stores import open_store

REPO = Path(__file__).resolve().parents[2]
SOURCES = [REPO / "runtime" / "src" / "tether", REPO / "operator" / "src" / "tether_operator"]


def _contract_strings() -> set[str]:
    values = {v for k, v in vars(contract).items() if k.isupper() and isinstance(v, str)}
    values |= set(contract.PROVIDER_KEY_ENV.values())
    values.add("progress.json")
    values |= _store_key_segments()
    return values


def _store_key_segments() -> set[str]:
    """The fixed parts of the store keys tether.contract makes (``/progress.json``, ``journal/``,
    ``cache/tools/`` ...), found by calling its key functions with a placeholder. ``runs/`` and ``/``
    alone are too common to count."""
    keys = [
        contract.progress_key("\0"),
        contract.manifest_key("\0"),
        contract.attempt_log_key("\0", 1),
        contract.runner_key("\0"),
        contract.cancel_key("\0"),
        contract.step_lines_prefix("\0"),
        contract.flyte_starts_prefix("\0", "\0", "\0"),
        contract.journal_prefix("\0"),
        contract.approvals_prefix("\0"),
        contract.memory_prefix("\0"),
        contract.tool_cache_prefix(),
    ]
    return {part for key in keys for part in key.split("\0")} - {"", "/", contract.runs_prefix()}


def _literals(path: Path) -> list[tuple[int, str]]:
    """String constants of a module that are not docstrings, with their line numbers."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def _exit_code_definitions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and name.id.startswith("EXIT_"):
                        names.append(f"{path.name}:{node.lineno} {name.id}")
    return names


def test_contract_values_are_spelled_once() -> None:
    wanted = _contract_strings()
    found = []
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            if path == Path(contract.__file__).resolve() or "testing" in path.relative_to(root).parts:
                continue
            for line, text in _literals(path):
                # Prose (a CRD description) may name a provider's variable; keys and paths may not appear at all.
                if text in wanted or any(value in text for value in wanted if "/" in value or value.endswith(".json")):
                    found.append(f"{path.relative_to(REPO)}:{line} {text!r}")
            found += [f"{path.relative_to(REPO)} defines {d}" for d in _exit_code_definitions(path)]
    assert not found, "contract values outside tether.contract (import them from there):\n" + "\n".join(found)


def test_both_sides_read_the_same_values() -> None:
    from tether.progress import progress_key
    from tether_operator.executors import base
    from tether_operator.runs import RunLoop  # noqa: F401  (the operator's reader imports the contract)

    assert (base.EXIT_SUCCEEDED, base.EXIT_TERMINAL, base.EXIT_SUSPENDED) == (0, 2, 3)
    assert progress_key("u-1") == contract.progress_key("u-1") == "runs/u-1/progress.json"


def test_one_reading_of_an_attempts_exit_code() -> None:
    """The executors and `tether run` read an attempt's exit code with the same function."""
    from tether.commands import run as tether_run
    from tether_operator.executors import base, flyte

    AttemptEnd = contract.AttemptEnd
    ends = {code: contract.attempt_end(code) for code in (0, 1, 2, 3, 4, 130, -9, 5)}
    assert ends == {
        0: AttemptEnd.SUCCEEDED,
        1: AttemptEnd.RECOVERABLE,
        2: AttemptEnd.TERMINAL,
        3: AttemptEnd.SUSPENDED,
        4: AttemptEnd.STORE_UNREACHABLE,  # the store did not answer: not counted against retries
        130: AttemptEnd.INTERRUPTED,
        -9: AttemptEnd.RECOVERABLE,  # killed by a signal
        5: AttemptEnd.RECOVERABLE,
    }
    assert tether_run.attempt_end is base.attempt_end is flyte.attempt_end is contract.attempt_end
    assert [code for code in ends if base.retried(code)] == [1, 130, -9, 5]


def test_the_operator_takes_every_shared_name_from_the_contract() -> None:
    """An environment variable, exit code or store key the operator shares with the runtime comes
    from tether.contract, never from the runtime module that happens to read it."""
    found = []
    for path in sorted((REPO / "operator" / "src" / "tether_operator").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tether.") and node.module != "tether.contract":
                shared = [a.name for a in node.names if a.name.endswith("_ENV") or a.name.startswith("EXIT_") or a.name.endswith("_key")]
                found += [f"{path.relative_to(REPO)}:{node.lineno} {name} from {node.module}" for name in shared]
    assert not found, "import these from tether.contract:\n" + "\n".join(found)


def test_an_outcome_has_one_json_form() -> None:
    """What `tether exec` prints last and the Flyte task returns: `error` only when there is one,
    the run's figures flat beside it when the agent ran, the exit code, a warm worker's timings."""
    failed = Outcome("r1", "failed", EXIT_TERMINAL, error="ConfigError: unknown AgentTool(s): nope")
    assert json.loads(failed.to_json()) == {
        "run_id": "r1",
        "status": "failed",
        "error": "ConfigError: unknown AgentTool(s): nope",
        "exit_code": 2,
    }
    figures = Figures(None, 2, "a1b2", 1, 3, 0, 1, 0.25, 0.5, 12.5)
    suspended = Outcome("r1", "suspended", EXIT_SUSPENDED, figures=figures, warm_worker={"pid": 7, "cpu_ms_after_go": 3.5})
    doc = json.loads(suspended.to_json())
    assert list(doc) == [
        "run_id", "status", "output", "attempt", "pending_approval", "model_live", "model_replayed",
        "tool_live", "tool_replayed", "cost_usd", "saved_usd", "replay_ms", "exit_code", "warm_worker",
    ]  # fmt: skip
    assert doc["output"] is None and doc["pending_approval"] == "a1b2" and doc["exit_code"] == 3
    assert Outcome.from_json(suspended.to_json()) == suspended and Outcome.from_json(failed.to_json()) == failed
    # A Flyte start past the run's retries: the runtime's count of starts, after the exit code.
    exhausted = Outcome("r1", "failed", EXIT_TERMINAL, error="attempt 3: retries exhausted (1)", attempts=3, retries_exhausted=True)
    assert list(json.loads(exhausted.to_json())) == ["run_id", "status", "error", "exit_code", "attempts", "retries_exhausted"]
    assert Outcome.from_json(exhausted.to_json()) == exhausted


def test_exec_prints_the_typed_outcome_of_an_attempt_that_cannot_start(tmp_path: Path) -> None:
    """`tether exec` parses the request once and hands it on: an AgentTool the request does not
    carry ends the attempt terminally, its outcome on the last stdout line and its cause in the
    progress record the operator reads."""
    request = ExecRequest.model_validate(
        {
            "runId": "r-start",
            "namespace": "ns",
            "name": "r",
            "spec": {"framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hi", "tools": ["nope"]},
        }
    )
    (tmp_path / "request.json").write_text(json.dumps(request.wire()))
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    proc = subprocess.run(
        [sys.executable, "-m", "tether", "exec", str(tmp_path / "request.json"), "--store", str(tmp_path / "store")],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == EXIT_TERMINAL, proc.stderr
    outcome = Outcome.from_json(proc.stdout.strip().splitlines()[-1])
    assert outcome == Outcome("r-start", "failed", EXIT_TERMINAL, error="ConfigError: unknown AgentTool(s): nope")
    assert "tether exec: ConfigError: unknown AgentTool(s): nope" in proc.stderr
    progress = read_progress(open_store(str(tmp_path / "store")), "r-start")
    assert progress is not None and progress["phase"] == "Failed" and progress["error"] == outcome.error
