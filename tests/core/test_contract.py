"""The runtime/operator contract (exit codes, the progress record's key, annotation and label
keys, provider key variables) is spelled out once, in tether.contract: no other module of the
runtime or the operator writes one of those values as a literal."""

from __future__ import annotations

import ast
from pathlib import Path

from tether import contract

REPO = Path(__file__).resolve().parents[2]
SOURCES = [REPO / "runtime" / "src" / "tether", REPO / "operator" / "src" / "tether_operator"]


def _contract_strings() -> set[str]:
    values = {v for k, v in vars(contract).items() if k.isupper() and isinstance(v, str)}
    values |= set(contract.PROVIDER_KEY_ENV.values())
    values.add("progress.json")
    return values


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
    ends = {code: contract.attempt_end(code) for code in (0, 1, 2, 3, 130, -9, 5)}
    assert ends == {
        0: AttemptEnd.SUCCEEDED,
        1: AttemptEnd.RECOVERABLE,
        2: AttemptEnd.TERMINAL,
        3: AttemptEnd.SUSPENDED,
        130: AttemptEnd.INTERRUPTED,
        -9: AttemptEnd.RECOVERABLE,  # killed by a signal
        5: AttemptEnd.RECOVERABLE,
    }
    assert tether_run.attempt_end is base.attempt_end is flyte.attempt_end is contract.attempt_end
    assert [code for code in ends if base.retried(code)] == [1, 130, -9, 5]
