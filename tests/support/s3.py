"""A real S3-compatible server on loopback: moto in server mode, started as its own process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import boto3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def s3_server():
    """Yield the endpoint URL of a fresh moto S3 server; the process is ended afterwards."""
    port = free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto S3 server did not start")
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def set_aws_env() -> None:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


def new_bucket(endpoint: str) -> str:
    set_aws_env()
    name = f"tether-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


def read_all_bytes(store_url: str, endpoint: str | None = None) -> bytes:
    """Every stored byte of a store (for secret scans)."""
    if store_url.startswith("s3://"):
        from tether.stores import open_store

        store = open_store(store_url)
        return b"".join(store.get(k) or b"" for k in store.list(""))
    root = Path(store_url.removeprefix("file://"))
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())
