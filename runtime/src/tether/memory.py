"""Agent memory keyed by ``memoryKey`` (README.md, "How it works": Memory).

The path comes from the namespace and the key, never the run, so later runs share it and
namespaces never see each other's memory:

    memory/<namespace>/<key>/HEAD              {"segments": ["<id>", ...]}  (compare-and-swap)
    memory/<namespace>/<key>/segments/<id>     JSON list of items, written once

A run reads every segment listed in HEAD, works, and on success commits its new items as one
segment: write the segment (exclusive create), then add its id to HEAD with compare-and-swap,
retrying on conflict. The segment id comes from the run scope, so a retry after a crash between
the two writes finds its segment already there and lists it once: no duplicated turn, no
whole-store re-upload, and a concurrent writer's segment is never lost (no last-writer-wins).
Items are whatever JSON the adapter stores (messages, session items, checkpoints).

The rule for adapters, so that concurrent runs sharing a key lose nothing: a segment holds only
what its run *added* (never a copy of the state it started from), and reading folds every
segment in HEAD order. Item lists (messages, session items) merge by construction. A framework
whose state is one blob (a LangGraph checkpoint) must commit it as a delta that merges at the
message level (``tether_langgraph.memory``), or serialise its commits; overwriting the head's
state with a run's whole state is never allowed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .canonical import sha256_hex
from .contract import memory_prefix
from .errors import ConfigError, StoreError
from .stores import Store

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


class Memory:
    def __init__(self, store: Store, namespace: str, key: str) -> None:
        for what, value in (("namespace", namespace), ("memory key", key)):
            if not _NAME.match(value) or ".." in value:
                raise ConfigError(f"invalid {what} {value!r}: letters, digits, '.', '_' and '-' only")
        self.store = store
        self.prefix = f"{memory_prefix(namespace)}{key}/"
        self.namespace, self.key = namespace, key

    def _head(self) -> tuple[list[str], str | None]:
        found = self.store.get_versioned(self.prefix + "HEAD")
        if found is None:
            return [], None
        return json.loads(found[0])["segments"], found[1]

    @staticmethod
    def segment_id(writer: str) -> str:
        return sha256_hex(writer.encode())[:24]

    def load(self, *, writer: str | None = None) -> list[Any]:
        """Every committed item, oldest first. A run passes its own scope as ``writer``: a retry
        of a run that crashed after committing must see the memory its first attempt saw."""
        segments, _ = self._head()
        segments = [s for s in segments if writer is None or s != self.segment_id(writer)]
        blobs = self.store.get_many(self.prefix + f"segments/{s}" for s in segments)
        items: list[Any] = []
        for s in segments:
            data = blobs.get(self.prefix + f"segments/{s}")
            if data is None:
                raise StoreError(f"memory {self.namespace}/{self.key}: segment {s} listed in HEAD is missing")
            items.extend(json.loads(data))
        return items

    def commit(self, items: list[Any], *, writer: str) -> str | None:
        """Append ``items`` as one segment on behalf of ``writer`` (the run scope). Idempotent
        per writer: committing again after a crash adds nothing twice. Returns the segment id."""
        if not items:
            return None
        segment = self.segment_id(writer)
        self.store.create(self.prefix + f"segments/{segment}", json.dumps(items, sort_keys=True).encode())
        for _ in range(50):
            segments, version = self._head()
            if segment in segments:
                return segment
            head = json.dumps({"segments": [*segments, segment]}).encode()
            if version is None:
                if self.store.create(self.prefix + "HEAD", head):
                    return segment
            elif self.store.replace(self.prefix + "HEAD", head, version):
                return segment
        raise StoreError(f"memory {self.namespace}/{self.key}: HEAD kept changing; segment {segment} not committed")
