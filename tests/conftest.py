"""Fixtures shared by every suite: stores (local and S3 on loopback) and fake providers."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tests.support.s3 import new_bucket, s3_server, set_aws_env


@pytest.fixture(scope="session")
def s3_endpoint():
    set_aws_env()
    with s3_server() as url:
        yield url


@pytest.fixture
def s3_store_url(s3_endpoint):
    return f"s3://{new_bucket(s3_endpoint)}/tether?endpoint_url={s3_endpoint}"


@pytest.fixture(params=["local", "s3"])
def store_url(request, tmp_path):
    """A fresh store of each backend."""
    if request.param == "local":
        return str(tmp_path / "store")
    return request.getfixturevalue("s3_store_url")


@pytest.fixture
def fsynced(monkeypatch):
    """The paths ``os.fsync`` or ``os.fdatasync`` (an append's) is called on from now, in order
    (each call still syncs)."""
    synced: list[str] = []

    def recording(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
            real(fd)

        return sync

    monkeypatch.setattr(os, "fsync", recording(os.fsync))
    monkeypatch.setattr(os, "fdatasync", recording(os.fdatasync))
    return synced
