"""Every file path, link and `tether` subcommand the READMEs and docs/ mention exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tether
from tether.cli import COMMANDS
from tether_operator import crds, python_reference

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted(
    {*REPO.glob("*.md"), *REPO.glob("*/README.md"), *REPO.glob("*/*/README.md"), *REPO.glob("docs/**/*.md")} - set(REPO.glob(".*/**/*.md"))
)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
CODE = re.compile(r"`([^`\s]+)`")
SUBCOMMAND = re.compile(r"(?:\./|\b)tether ([a-z][a-z-]+)\b")
PATHLIKE = re.compile(r"^[\w.-]+(/[\w.-]+)*/?$")


def _mentioned_paths(doc: Path) -> set[str]:
    text = doc.read_text()
    prose = re.sub(r"`[^`\n]*`", "", text)  # a link inside code (a regex such as `[a-z]([-a-z]*)`) is none
    found = {m.group(1) for m in LINK.finditer(prose) if not m.group(1).startswith(("http:", "https:", "mailto:"))}
    for m in CODE.finditer(text):
        ref = m.group(1)
        # a repository path: has a folder part and a file suffix or a trailing slash, no placeholder
        if "/" in ref and PATHLIKE.match(ref) and ("." in ref.rsplit("/", 1)[-1] or ref.endswith("/")):
            placeholder = any(part.split(".")[0].isupper() for part in ref.split("/"))  # envs/NAME.txt
            if not placeholder and not ref.startswith(("tether.dev/", "app.kubernetes.io/", "http")):
                found.add(ref)
    return found


def test_paths_in_docs_exist() -> None:
    assert DOCS, "no docs found"
    missing = []
    for doc in DOCS:
        for ref in sorted(_mentioned_paths(doc)):
            if not ((doc.parent / ref).exists() or (REPO / ref).exists()):
                missing.append(f"{doc.relative_to(REPO)}: {ref}")
    assert not missing, "docs mention paths that do not exist:\n" + "\n".join(missing)


def test_tether_subcommands_in_docs_exist() -> None:
    unknown = []
    for doc in DOCS:
        for m in SUBCOMMAND.finditer(doc.read_text()):
            word = m.group(1)
            if word not in COMMANDS and word not in ("and", "charts", "operator", "oci"):  # helm install tether oci://...
                unknown.append(f"{doc.relative_to(REPO)}: tether {word}")
    assert not unknown, "docs mention tether subcommands that do not exist:\n" + "\n".join(unknown)


def test_python_reference_is_current() -> None:
    # docs/reference/python.md is generated from the docstrings by `tether crds` (`--check` in CI).
    assert (REPO / "docs" / "reference" / "python.md").read_text() == python_reference.render(REPO), "run `tether crds` to regenerate"


def test_python_reference_documents_every_public_name() -> None:
    text = (REPO / "docs" / "reference" / "python.md").read_text()
    missing = [name for name in tether.__all__ if f"### `tether.{name}`" not in text]
    for init in sorted(REPO.glob("adapters/*/src/tether_*/__init__.py")):
        section = text.split(f"### `{init.parent.name}`", 1)[-1].split("\n### ", 1)[0]
        exported = re.findall(r"^from \S+ import (\w+) as \1$", init.read_text(), re.M)
        missing += [
            f"{init.parent.name}.{n}" for n in exported if n not in ("Tool", "tool") and not re.search(rf"`(class |async )?{n}\b", section)
        ]
    assert not missing, f"public names missing from docs/reference/python.md: {missing}"


def test_python_reference_follows_a_docstring(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(tether.idempotency_key, "__doc__", "A key that changed its story.")
    assert "A key that changed its story." in python_reference.render(REPO)
    assert crds.main(["--check"]) == 1
    assert "docs/reference/python.md is out of date" in capsys.readouterr().err


def test_the_readme_python_snippet_is_the_tested_one() -> None:
    # The README's Python API example is docs/getting-started/openai.md's agent, which the openai
    # adapter's tests run (tests/support/getting_started.py).
    readme = (REPO / "README.md").read_text().split("## Python API\n", 1)[1]
    page = (REPO / "docs" / "getting-started" / "openai.md").read_text()
    shown = re.search(r"^```python\n(.*?)^```", readme, re.M | re.S)
    tested = re.search(r"^```python weather\.py\n(.*?)^```", page, re.M | re.S)
    assert shown and tested and shown.group(1) == tested.group(1)
