"""The frameworks are listed once: the folders under adapters/. Each adapter's pyproject.toml names
its framework's modules (what the import contracts forbid the runtime and the operator), and its
package's import guard asks for nothing else, so the two cannot drift apart."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.import_contracts import REPO, forbidden_modules, frameworks


def _guarded_modules(init: Path) -> list[str]:
    """The modules the package's ``requires(distribution, what, *modules)`` call imports."""
    for node in ast.walk(ast.parse(init.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "requires":
            return [arg.value for arg in node.args[2:] if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
    raise AssertionError(f"{init.relative_to(REPO)} has no requires(...) import guard")


def test_every_adapter_folder_is_a_framework_with_its_environment() -> None:
    """The folders are the list; each has its test environment (envs/<id>.txt, which the e2e
    reads for its images) and nothing else has one but core."""
    folders = sorted(p.parent.name for p in REPO.glob("adapters/*/pyproject.toml"))
    assert [f.id for f in frameworks()] == folders and len(folders) >= 10
    assert sorted(p.stem for p in REPO.glob("envs/*.txt") if p.stem != "core") == folders


def test_each_guard_asks_only_for_its_framework_modules() -> None:
    for f in frameworks():
        guarded = _guarded_modules(REPO / "adapters" / f.id / "src" / f.package / "__init__.py")
        tops = {m.split(".")[0] for m in f.modules}
        assert guarded and all(m.split(".")[0] in tops for m in guarded), (f.id, guarded, f.modules)


def test_the_contracts_forbid_every_adapter_and_framework() -> None:
    forbidden = set(forbidden_modules())
    for f in frameworks():
        assert f.package in forbidden and all(m.split(".")[0] in forbidden for m in f.modules)
    assert {"tether_langchain", "tether_deepagents", "deepagents", "run_agent", "google"} <= forbidden
