"""A real S3-compatible server on loopback: moto in server mode, started as its own process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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


def enforce_iam(endpoint: str) -> None:
    """From now on this moto server checks every request's signature and IAM policies (moto's
    ``reset-auth``: no more unauthenticated requests). Only for a server of its own: the
    setting is process-wide in the server."""
    request = urllib.request.Request(f"{endpoint}/moto-api/reset-auth", data=b"0", method="POST", headers={"Content-Type": "text/plain"})
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def iam_user(endpoint: str, name: str, policy: dict[str, Any]) -> dict[str, str]:
    """An IAM user with ``policy`` inline and an access key: its ``AWS_*`` environment variables
    (what the namespace's ``tether-store`` Secret holds). Call before :func:`enforce_iam`."""
    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1")
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="tether-store", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
