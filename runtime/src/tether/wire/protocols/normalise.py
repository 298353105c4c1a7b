"""The hook through which an adapter leaves its framework's volatile request parts out of fingerprints.

Some clients write facts that change from one attempt, day or node to the next (a date, a kernel
release, a home directory) into every request they send. A retry elsewhere must still replay, so
the adapter of that framework registers a normaliser with the protocol its client speaks
(:meth:`WireProtocol.normalise_requests_from`): the canonical body of a request whose User-Agent
starts with the client's — and only such a request, no other client's fingerprint changes — passes
through it before fingerprinting. The runtime knows no framework: it applies what adapters register
(when the adapter is imported, before its first request).

A normaliser replaces each volatile value by :data:`NORMALISED` (:func:`normalise_volatile`), and
finds it where the client writes it, never by its shape alone: the user's own text travels in the
same request and may hold a line of the same shape (issue 23). What it cannot locate so it leaves
alone (the retry goes live: a miss, never a stale answer). The seam counts the replacements
(``normalised_parts`` of the run's progress).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

#: What a normaliser puts in a canonical request where it left a volatile value out.
NORMALISED = "<tether:normalised>"

#: The canonical body of one request (a fresh dict, its values shared with the request) to the
#: same body with the client's volatile values replaced. May raise ``ValueError``: the seam then
#: passes the request through unrecorded.
Normaliser = Callable[[dict[str, Any]], dict[str, Any]]


def sent_by(headers: Mapping[str, str] | None, user_agent: str) -> bool:
    """True when the request's User-Agent starts with ``user_agent``: how a normaliser's client
    is told from every other. Header names are lower-case, as ``canonical_request`` gets them."""
    return (headers or {}).get("user-agent", "").startswith(user_agent)


def normalise_volatile(text: str, patterns: tuple[re.Pattern[str], ...]) -> str:
    """``text`` with what every capturing group of every match of ``patterns`` captured
    replaced by :data:`NORMALISED`; the rest of each match (written with non-capturing groups
    and lookarounds) is kept. Groups must not nest. For the facts a known client writes into its
    requests that change from one attempt, day or node to the next (a date, a kernel release)."""
    for pattern in patterns:
        text = pattern.sub(_normalised_groups, text)
    return text


def _normalised_groups(match: re.Match[str]) -> str:
    out, pos = [], match.start()
    for group in range(1, match.re.groups + 1):
        start, end = match.span(group)
        if start < 0:  # an optional group that did not take part
            continue
        out += [match.string[pos:start], NORMALISED]
        pos = end
    out.append(match.string[pos : match.end()])
    return "".join(out)
