"""docs/getting-started/openai.md, run as its reader would (tests/support/getting_started.py)."""

from pathlib import Path

from tests.support.getting_started import run_flyte_example, run_page


def test_getting_started_page(tmp_path: Path) -> None:
    run_page("openai", tmp_path)


def test_the_python_reference_flyte_example(tmp_path: Path) -> None:
    run_flyte_example(tmp_path)
