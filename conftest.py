"""Every suite's hang guard (tests/, adapters/<id>/tests, tests/conformance, tests/e2e).

A test that hangs ends its pytest process after ``TETHER_TEST_HANG_S`` seconds (default 900; the
slowest test takes about 70 s on a loaded machine), printing every thread's stack ("Timeout
(h:mm:ss)!", the test's frames among them): its group fails showing where it hung, rather than the
whole suite running into CI's time limit.
"""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Iterator

import pytest

HANG_S = float(os.environ.get("TETHER_TEST_HANG_S", "900"))


def pytest_configure(config: pytest.Config) -> None:
    # The terminal's stderr, kept before tests run: while one runs, pytest captures fd 2.
    config.stash[_stderr] = os.dup(sys.stderr.fileno())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    faulthandler.dump_traceback_later(HANG_S, exit=True, file=item.config.stash[_stderr])
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()


_stderr = pytest.StashKey[int]()
