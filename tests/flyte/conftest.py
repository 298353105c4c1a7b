"""The Flyte-backend test group: a real Flyte 2 backend (tests/support/flyte_backend.py) on the
bare apiserver. Run on its own (scripts/test.sh group `flyte`): it needs the backend binary, built
by scripts/flyte-backend.sh from the pinned sources in ../shared/sources (or clones of the same
commits); only where neither exists is the group reported NOT RUN."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.flyte_backend import Backend, flyte_backend
from tests.support.kube import ControlPlane, kube  # noqa: F401  (the session fixture)


@pytest.fixture(scope="session")
def backend(kube: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with flyte_backend(kube, tmp_path_factory.mktemp("flyte-backend")) as b:
        yield b
