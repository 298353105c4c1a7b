from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable


class Store(ABC):
    """A flat key → bytes store with atomic writes and conditional writes.

    ``version`` tokens are opaque (an ETag on S3, a content hash locally) and only used for
    compare-and-swap through :meth:`replace` and :meth:`write_if`.
    """

    url: str
    #: Its requests are system calls on this machine's disk, no network round trip (``LocalStore``).
    local: bool = False

    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """The object's bytes, or ``None`` if absent."""

    @abstractmethod
    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and version token, or ``None`` if absent."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write (or overwrite) atomically."""

    @abstractmethod
    def create(self, key: str, data: bytes) -> bool:
        """Write only if absent; ``False`` (nothing written) if the key exists."""

    @abstractmethod
    def replace(self, key: str, data: bytes, version: str) -> bool:
        """Overwrite only if the current version is ``version``; ``False`` if it changed."""

    def write_if(self, key: str, data: bytes, version: str | None) -> str | None:
        """Write only if the current version is ``version`` (``None``: only if absent); the new
        version, or ``None`` (nothing written) if the object changed. What fences an attempt
        (``tether.journal``): a writer that lost the object learns it on its next write."""
        raise NotImplementedError(f"{type(self).__name__} has no conditional write (write_if)")

    #: Whether :meth:`append_if` is implemented.
    appends: bool = False

    def append_if(self, key: str, data: bytes, version: str) -> str | None:
        """Add ``data`` at the end of the object if its current version is ``version``; the new
        version, or ``None`` (nothing added) if it changed or is absent. Durable like a write,
        and a failed one adds nothing. Where ``appends`` is true (the journal's tail: a step
        added, not the tail rewritten)."""
        raise NotImplementedError(f"{type(self).__name__} has no conditional append (append_if)")

    @abstractmethod
    def list(self, prefix: str) -> list[str]:
        """All keys starting with ``prefix`` (a folder-like prefix ends in ``/``), sorted."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the key; absent keys are fine."""

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        """Several objects at once (backends fetch in parallel). Missing keys are left out."""
        out = {}
        for key in keys:
            data = self.get(key)
            if data is not None:
                out[key] = data
        return out
