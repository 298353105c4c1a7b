"""Stores: where journals, memory, approvals and progress live.

One small interface (``Store``), two backends: a local directory (the default) and S3 or any
S3-compatible server. Keys are ``/``-separated relative paths. Every write is atomic: a reader
sees the whole object or nothing, never a half-written record.

    open_store("/var/lib/tether")                        # local directory
    open_store("file:///var/lib/tether")
    open_store("s3://bucket/prefix?endpoint_url=http://127.0.0.1:9000&region=us-east-1")
    open_store("tether+unix:///var/run/tether/store/store.sock")   # one run's keys (stores.proxy)
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlparse

from ..errors import ConfigError
from .base import Store
from .local import LocalStore

__all__ = ["LocalStore", "Store", "default_store_url", "open_store"]


def default_store_url() -> str:
    """``$TETHER_STORE``, else ``~/.tether/store``."""
    import os

    return os.environ.get("TETHER_STORE") or str(Path.home() / ".tether" / "store")


def open_store(url: str | Path | Store | None = None) -> Store:
    if isinstance(url, Store):
        return url
    url = str(url or default_store_url())
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        return LocalStore(parsed.path if parsed.scheme else url)
    if parsed.scheme == "s3":
        from .s3 import S3Store

        opts = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        return S3Store(parsed.netloc, parsed.path.strip("/"), endpoint_url=opts.get("endpoint_url"), region=opts.get("region"))
    if parsed.scheme == "tether+unix":  # a run's own keys, through its pod's store proxy
        from .proxy import ProxyStore

        return ProxyStore(parsed.path)
    raise ConfigError(f"unsupported store URL {url!r}: use a directory, file:///dir or s3://bucket/prefix")
