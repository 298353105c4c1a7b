"""The frameworks Tether has adapters for, as import-linter sees them.

An adapter is a folder ``adapters/<id>/``: that folder is the list of frameworks (scripts/test.sh
runs one test group per folder, ruff knows ``adapters/*/src`` as first-party). Its
``pyproject.toml`` names, under ``[tool.tether] framework-modules``, the framework's top-level
modules. :class:`ForbiddenFrameworks` is import-linter's ``forbidden`` contract with every
adapter package (``tether_<id>``) and every framework module added to ``forbidden_modules``, so
runtime/.importlinter and operator/.importlinter forbid them all without listing them
(``contract_types`` there names this class; ``lint-imports`` runs from the repository root).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from importlinter.contracts.forbidden import ForbiddenContract

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Framework:
    id: str
    #: The adapter's package (``pydantic-ai`` → ``tether_pydantic_ai``, as ``load_adapter`` finds it).
    package: str
    #: The framework's modules (``google.adk``), from the adapter's pyproject.toml.
    modules: tuple[str, ...]


def frameworks(repo: Path = REPO) -> list[Framework]:
    """Every adapter under ``adapters/``, by id."""
    found = []
    for pyproject in sorted(repo.glob("adapters/*/pyproject.toml")):
        ident = pyproject.parent.name
        table = tomllib.loads(pyproject.read_text())
        modules = table.get("tool", {}).get("tether", {}).get("framework-modules")
        if not modules:
            raise ValueError(f"{pyproject.relative_to(repo)} names no [tool.tether] framework-modules")
        found.append(Framework(ident, "tether_" + ident.replace("-", "_"), tuple(modules)))
    return found


def forbidden_modules() -> list[str]:
    """Each adapter package and each framework module, top level only: import-linter sees an
    external package by its top-level name (``google.adk`` → ``google``)."""
    names = {f.package for f in frameworks()} | {m.split(".")[0] for f in frameworks() for m in f.modules}
    return sorted(names)


class ForbiddenFrameworks(ForbiddenContract):
    """``type = forbidden_frameworks``: a ``forbidden`` contract that also forbids every adapter
    package and every framework (:func:`forbidden_modules`)."""

    def __init__(self, name: str, session_options: dict[str, Any], contract_options: dict[str, Any]) -> None:
        listed = contract_options.get("forbidden_modules", [])
        listed = [listed] if isinstance(listed, str) else list(listed)
        options = {**contract_options, "forbidden_modules": sorted({*listed, *forbidden_modules()})}
        super().__init__(name, session_options, options)
