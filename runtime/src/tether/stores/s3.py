from __future__ import annotations

import functools
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import ConfigError, StoreAccessDenied, StoreError, StoreUnavailable
from .base import Store

try:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError("the S3 store needs boto3: pip install 'tether[s3]'") from e

# Client errors that mean "the server is struggling, try again": botocore's standard retry mode
# already retried them with backoff before we see them.
_DENIED_CODES = {"AccessDenied", "403", "AllAccessDisabled"}
_TRANSIENT_CODES = {"500", "502", "503", "504", "SlowDown", "Throttling", "RequestTimeout", "InternalError", "ServiceUnavailable"}


@functools.lru_cache(maxsize=16)
def _client(endpoint_url: str | None, region: str, max_attempts: int, connect_timeout: float, read_timeout: float, pool: int) -> Any:
    """One boto3 client per endpoint and settings, shared by every store of the process: making
    one costs tens of milliseconds (every attempt opens its store), and clients are thread-safe."""
    config = Config(
        retries={"max_attempts": max_attempts, "mode": "standard"},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        max_pool_connections=pool,
    )
    return boto3.client("s3", endpoint_url=endpoint_url, region_name=region, config=config)


class S3Store(Store):
    """S3 or any S3-compatible server (MinIO, moto, Ceph) through boto3.

    Atomicity comes from S3 itself (a PUT is all or nothing). Conditional writes use
    ``If-None-Match: *`` (create) and ``If-Match: <ETag>`` (compare-and-swap). Transient failures
    are retried by botocore's standard mode (bounded attempts, exponential backoff with jitter);
    what still fails surfaces as :class:`StoreUnavailable`. Credentials come from the usual AWS
    environment/config chain and are never written anywhere by Tether.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        max_attempts: int = 4,
        connect_timeout: float = 3.0,
        read_timeout: float = 20.0,
        parallelism: int = 16,
    ) -> None:
        if not bucket:
            raise ConfigError("an S3 store needs a bucket: s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.url = f"s3://{bucket}/{self.prefix}" + (f"?endpoint_url={endpoint_url}" if endpoint_url else "")
        self.parallelism = parallelism
        self.client = _client(endpoint_url, region or "us-east-1", max_attempts, connect_timeout, read_timeout, parallelism)

    def _key(self, key: str) -> str:
        return self.prefix + key

    def _fail(self, op: str, key: str, e: Exception) -> StoreError:
        if isinstance(e, ClientError):
            code = str(e.response.get("Error", {}).get("Code", ""))
            status = str(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if code in _TRANSIENT_CODES or status in _TRANSIENT_CODES:
                return StoreUnavailable(f"S3 {op} {key}: {code or status}")
            if code in _DENIED_CODES or (not code and status == "403"):
                # Never "absent": a journal read as empty would run every finished step again.
                return StoreAccessDenied(
                    f"S3 {op} s3://{self.bucket}/{self.prefix}{key}: access denied ({code or status}): these store "
                    "credentials may not use this key (a namespace's credentials reach only its own prefix)"
                )
            return StoreError(f"S3 {op} {key}: {code or status}: {e}")
        return StoreUnavailable(f"S3 {op} {key}: {type(e).__name__}: {e}")

    @staticmethod
    def _code(e: ClientError) -> str:
        return str(e.response.get("Error", {}).get("Code", ""))

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            return obj["Body"].read(), obj["ETag"]
        except ClientError as e:
            if self._code(e) in ("NoSuchKey", "404"):
                return None
            raise self._fail("get", key, e) from e
        except BotoCoreError as e:
            raise self._fail("get", key, e) from e

    def get(self, key: str) -> bytes | None:
        found = self.get_versioned(key)
        return None if found is None else found[0]

    def _put(self, key: str, data: bytes, **condition: str) -> str | None:
        """The new ETag, or ``None`` if the condition did not hold."""
        try:
            return str(self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, **condition)["ETag"])
        except ClientError as e:
            if self._code(e) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                return None
            raise self._fail("put", key, e) from e
        except BotoCoreError as e:
            raise self._fail("put", key, e) from e

    def put(self, key: str, data: bytes) -> None:
        self._put(key, data)

    def create(self, key: str, data: bytes) -> bool:
        return self._put(key, data, IfNoneMatch="*") is not None

    def replace(self, key: str, data: bytes, version: str) -> bool:
        return self._put(key, data, IfMatch=version) is not None

    def write_if(self, key: str, data: bytes, version: str | None) -> str | None:
        return self._put(key, data, IfMatch=version) if version is not None else self._put(key, data, IfNoneMatch="*")

    def list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self._key(prefix)):
                keys.extend(obj["Key"][len(self.prefix) :] for obj in page.get("Contents", []))
        except (ClientError, BotoCoreError) as e:
            raise self._fail("list", prefix, e) from e
        return sorted(keys)

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except (ClientError, BotoCoreError) as e:
            raise self._fail("delete", key, e) from e

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        keys = list(keys)
        if len(keys) <= 1:
            return super().get_many(keys)
        with ThreadPoolExecutor(min(self.parallelism, len(keys))) as pool:
            found = pool.map(self.get, keys)
        return {k: v for k, v in zip(keys, found, strict=True) if v is not None}
