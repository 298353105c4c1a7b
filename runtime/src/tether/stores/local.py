from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import ConfigError, StoreError, StoreUnavailable
from .base import Store

_TMP = ".tmp-"
#: A temp file this old whose writer is gone was left by a kill mid-write: removed.
_STALE_TMP_SECONDS = 60.0
#: Temp file numbers: unique in a process (its pid is in the name too), cheaper than a random id.
_temp_numbers = itertools.count()
#: Keys whose path is remembered (a journal's few keys are written on every step).
_PATHS_KEPT = 4096


def _writer_gone(name: str) -> bool:
    """Whether the process that wrote temp file ``name`` (``.tmp-<pid>-<hex>``) is gone. Older
    names carry no pid: their writer is taken as gone (they are removed only once stale)."""
    pid = name[len(_TMP) :].partition("-")[0]
    if not pid.isdigit() or int(pid) == os.getpid():
        return not pid.isdigit()
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, someone else's
    return False


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


class LocalStore(Store):
    """A directory. Writes go to a temp file in the target folder, are fsynced, then renamed
    (or hard-linked, for an exclusive create) into place, so a crash at any point leaves the old
    object or the new one, never a torn one.

    ``fsync`` (default on) makes a record survive a node crash, not only a process crash.
    ``atomic=False`` (only with ``fsync=False``) writes an object in place, no temp file: for
    objects whose readers take a torn one as changed (``tether.fence``'s announcements).
    """

    local = True

    def __init__(self, root: str | Path, *, fsync: bool = True, atomic: bool = True) -> None:
        if fsync and not atomic:
            raise ValueError("a durable LocalStore writes atomically")
        self.root = Path(root).expanduser().resolve()
        self._root = str(self.root)
        self._dirs: set[str] = set()  # folders known to exist: one mkdir per folder, not per write
        self._paths: dict[str, str] = {}
        self.url = f"file://{self.root}"
        self.fsync = fsync
        self.atomic = atomic

    def _path(self, key: str) -> str:
        # String work only: ``Path.resolve`` costs a syscall per path component, and building
        # ``Path`` objects ~0.1 ms per write (a store write or read runs several times a step).
        path = self._paths.get(key)
        if path is None:
            path = os.path.normpath(os.path.join(self._root, key))
            if not path.startswith(self._root + os.sep):
                raise ConfigError(f"store key escapes the store: {key!r}")
            if len(self._paths) >= _PATHS_KEPT:
                self._paths.clear()
            self._paths[key] = path
        return path

    def get(self, key: str) -> bytes | None:
        return self._read(key)

    def _read(self, key: str) -> bytes | None:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreUnavailable(f"cannot read {key}: {e}") from e

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        data = self.get(key)
        return None if data is None else (data, hashlib.sha256(data).hexdigest())

    def _folder(self, path: str) -> str:
        """``path``'s folder, made if this process has not seen it yet."""
        folder = os.path.dirname(path)
        if folder not in self._dirs:
            if self.fsync:
                self._make_durable(folder)
            else:
                os.makedirs(folder, exist_ok=True)
            self._dirs.add(folder)
            self._sweep(folder)
        return folder

    @staticmethod
    def _sweep(folder: str) -> None:
        """Remove the temp files of writers killed mid-write (a 0-byte ``.tmp-*`` otherwise stays
        forever), the first time this process writes into ``folder``: one listing per folder."""
        now = time.time()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if not entry.name.startswith(_TMP) or not _writer_gone(entry.name):
                        continue
                    try:  # a writer on another machine sharing the folder: only once it is stale
                        if now - entry.stat().st_mtime >= _STALE_TMP_SECONDS:
                            os.unlink(entry.path)
                    except FileNotFoundError:
                        pass
        except OSError:
            pass  # housekeeping only: the write itself reports what is wrong

    def _open_new(self, tmp: str) -> BinaryIO:
        try:
            return open(tmp, "wb")  # the caller's with closes it
        except FileNotFoundError:  # the folder was removed since: make it again
            self._dirs.discard(os.path.dirname(tmp))
            self._folder(tmp)
            return open(tmp, "wb")

    def _write_temp(self, path: str, data: bytes) -> str:
        tmp = os.path.join(self._folder(path), f"{_TMP}{os.getpid()}-{next(_temp_numbers)}")
        try:
            with self._open_new(tmp) as f:
                f.write(data)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as e:  # disk full, read-only...: nothing visible is changed
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise StoreUnavailable(f"cannot write {os.path.basename(path)}: {e}") from e
        return tmp

    def _entry_synced(self, path: str) -> None:
        """With ``fsync``: the rename or link that put ``path`` in place survives a node crash too.
        The file's data is synced before; its name is the folder's, which ext4 otherwise commits
        with its next journal commit (up to seconds later: a step handed on could revert)."""
        if not self.fsync:
            return
        try:
            fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:  # in place, but not known to be durable: the caller counts it as not written
            raise StoreUnavailable(f"cannot sync the folder of {os.path.basename(path)}: {e}") from e

    def _make_durable(self, folder: str) -> None:
        """Make ``folder`` and any missing parents, each new one's entry synced in its parent."""
        if os.path.isdir(folder):
            return
        self._make_durable(os.path.dirname(folder))
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder)
        self._entry_synced(folder)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        if not self.atomic:
            self._folder(path)
            try:
                with self._open_new(path) as f:
                    f.write(data)
            except OSError as e:
                raise StoreUnavailable(f"cannot write {os.path.basename(path)}: {e}") from e
            return
        tmp = self._write_temp(path, data)
        os.replace(tmp, path)
        self._entry_synced(path)

    def create(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        tmp = self._write_temp(path, data)
        try:
            os.link(tmp, path)  # atomic and exclusive: fails if the key exists
            self._entry_synced(path)
            return True
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def replace(self, key: str, data: bytes, version: str) -> bool:
        return self.write_if(key, data, version) is not None

    @contextlib.contextmanager
    def _locked(self, path: str) -> Iterator[None]:
        """The key's lock file (``.lock-<name>`` beside it), held: every conditional writer takes it."""
        # A bare descriptor: Python's buffered file object cost more than the lock itself.
        lock = os.open(
            os.path.join(self._folder(path), f".lock-{os.path.basename(path)}"),
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
            0o666,
        )
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
        finally:
            os.close(lock)

    def write_if(self, key: str, data: bytes, version: str | None) -> str | None:
        path = self._path(key)
        with self._locked(path):
            current = self._read(key)  # part of this write, not a read of the caller's
            if (hashlib.sha256(current).hexdigest() if current is not None else None) != version:
                return None
            self.put(key, data)
            return hashlib.sha256(data).hexdigest()

    appends = True

    def append_if(self, key: str, data: bytes, version: str) -> str | None:
        # Under the key's lock like write_if (which replaces the file by a rename: the file read
        # here is the one appended to). No temp file, no rename, no folder sync: one sync of the
        # file (~0.2 ms a step less than a rewrite, benchmarks/mcp_overhead.py).
        path = self._path(key)
        with self._locked(path):
            try:
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                return None
            except OSError as e:
                raise StoreUnavailable(f"cannot append to {key}: {e}") from e
            try:
                current = _read_all(fd)
                digest = hashlib.sha256(current)  # the version read, then (with data) the version written
                if digest.hexdigest() != version:
                    return None
                try:
                    written = 0
                    while written < len(data):
                        written += os.pwrite(fd, data[written:], len(current) + written)
                    if self.fsync:
                        os.fdatasync(fd)
                except OSError as e:  # disk full...: what was added is taken back, nothing changes
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, len(current))
                    raise StoreUnavailable(f"cannot append to {key}: {e}") from e
            except OSError as e:
                raise StoreUnavailable(f"cannot append to {key}: {e}") from e
            finally:
                os.close(fd)
            digest.update(data)
            return digest.hexdigest()

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix.rsplit("/", 1)[0]) if "/" in prefix else self._root
        if not os.path.isdir(base):
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
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StoreError(f"cannot delete {key}: {e}") from e
