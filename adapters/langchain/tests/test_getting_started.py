"""docs/getting-started/langchain.md, run as its reader would (tests/support/getting_started.py)."""

from pathlib import Path

from tests.support.getting_started import run_page


def test_getting_started_page(tmp_path: Path) -> None:
    run_page("langchain", tmp_path)
