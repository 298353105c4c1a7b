"""A real S3-compatible server on loopback: moto in server mode, started as its own process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
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


class Gate:
    """A TCP forwarder in front of the S3 server: ``shut()`` closes it (connections refused, open
    ones cut), ``open()`` listens again on the same port. ``silence(True)``: requests still
    reach the server, its answers never come back (a connection is cut once the server answers:
    a write that landed, its answer lost). The server and its data stay up."""

    def __init__(self, target_port: int) -> None:
        self.port, self.target = free_port(), target_port
        self.mute = False
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.open()

    @property
    def is_open(self) -> bool:
        return self._listener is not None

    def open(self) -> None:
        if self._listener is not None:
            return
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self._lock:
                self._conns += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, self.mute), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket, drop: bool = False) -> None:
        try:
            while data := a.recv(65536):
                if drop and not data.startswith(b"HTTP/1.1 100 "):  # "100 Continue" passes: the body must be sent
                    break  # the server answered: the answer is lost, the connection cut
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def silence(self, mute: bool) -> None:
        """From now on, answers are dropped (``True``) or passed back; open connections are cut
        (a client's pooled connection would otherwise go on as before)."""
        self.mute = mute
        self._cut()

    def shut(self) -> None:
        if self._listener is None:
            return
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self._listener.close()
        self._listener = None
        self._cut()

    def _cut(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
