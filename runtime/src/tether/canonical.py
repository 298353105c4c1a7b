"""Canonical JSON and fingerprints (README.md, "How it works": Fingerprints).

A fingerprint is SHA-256 over a *versioned* canonical form: JSON with keys sorted at every depth,
no whitespace, UTF-8, no reprs. Bump ``FINGERPRINT_VERSION`` whenever the canonical form of any
step changes, so old journals miss instead of replaying the wrong answer.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

FINGERPRINT_VERSION = "tether-fp-1"


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON bytes. Raises ``TypeError`` for values JSON cannot carry (no reprs)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def fingerprint(kind: str, canonical: Any) -> str:
    """SHA-256 hex of ``(version, kind, canonical form)``."""
    return fingerprint_json(kind, canonical_json(canonical))


def fingerprint_json(kind: str, data: bytes) -> str:
    """:func:`fingerprint` of a canonical form already serialised by :func:`canonical_json`."""
    h = hashlib.sha256()
    h.update(f"{FINGERPRINT_VERSION}\0{kind}\0".encode())
    h.update(data)
    return h.hexdigest()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
