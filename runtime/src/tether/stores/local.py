from __future__ import annotations

import fcntl
import hashlib
import os
import uuid
from pathlib import Path
from typing import BinaryIO

from ..errors import ConfigError, StoreError, StoreUnavailable
from .base import Store

_TMP = ".tmp-"


class LocalStore(Store):
    """A directory. Writes go to a temp file in the target folder, are fsynced, then renamed
    (or hard-linked, for an exclusive create) into place, so a crash at any point leaves the old
    object or the new one, never a torn one.

    ``fsync`` (default on) makes a record survive a node crash, not only a process crash.
    """

    def __init__(self, root: str | Path, *, fsync: bool = True) -> None:
        self.root = Path(root).expanduser().resolve()
        self._root = str(self.root)
        self._dirs: set[Path] = set()  # folders known to exist: one mkdir per folder, not per write
        self.url = f"file://{self.root}"
        self.fsync = fsync

    def _path(self, key: str) -> Path:
        # String work only (``Path.resolve`` costs a syscall per path component, on every write).
        path = os.path.normpath(os.path.join(self._root, key))
        if not path.startswith(self._root + os.sep):
            raise ConfigError(f"store key escapes the store: {key!r}")
        return Path(path)

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreUnavailable(f"cannot read {key}: {e}") from e

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        data = self.get(key)
        return None if data is None else (data, hashlib.sha256(data).hexdigest())

    def _folder(self, path: Path) -> None:
        if path.parent not in self._dirs:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._dirs.add(path.parent)

    def _open_new(self, tmp: Path) -> BinaryIO:
        try:
            return open(tmp, "wb")  # the caller's with closes it
        except FileNotFoundError:  # the folder was removed since: make it again
            self._dirs.discard(tmp.parent)
            self._folder(tmp)
            return open(tmp, "wb")

    def _write_temp(self, path: Path, data: bytes) -> Path:
        self._folder(path)
        tmp = path.parent / f"{_TMP}{uuid.uuid4().hex}"
        try:
            with self._open_new(tmp) as f:
                f.write(data)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as e:  # disk full, read-only...: nothing visible is changed
            tmp.unlink(missing_ok=True)
            raise StoreUnavailable(f"cannot write {path.name}: {e}") from e
        return tmp

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        tmp = self._write_temp(path, data)
        os.replace(tmp, path)

    def create(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        tmp = self._write_temp(path, data)
        try:
            os.link(tmp, path)  # atomic and exclusive: fails if the key exists
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def replace(self, key: str, data: bytes, version: str) -> bool:
        path = self._path(key)
        self._folder(path)
        with open(path.parent / f".lock-{path.name}", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = self.get_versioned(key)
            if current is None or current[1] != version:
                return False
            self.put(key, data)
            return True

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix.rsplit("/", 1)[0]) if "/" in prefix else self.root
        if not base.is_dir():
            return []
        keys = []
        for dirpath, _, files in os.walk(base):
            for name in files:
                if name.startswith((_TMP, ".lock-")):
                    continue
                key = os.path.relpath(os.path.join(dirpath, name), self.root)
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as e:
            raise StoreError(f"cannot delete {key}: {e}") from e
