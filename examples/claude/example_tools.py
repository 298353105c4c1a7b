"""Tools of the example agents. Plain functions: AgentTools name them as `example_tools:NAME`.

They sleep a little so a kill (`tether run --kill-after N`) lands mid-run, and print what they
do, so you can see that a resumed run does not do it again.
"""

from __future__ import annotations

import time

import tether


def get_weather(city: str) -> str:
    """Current weather in a city."""
    print(f"    [tool] get_weather({city!r}) running", flush=True)
    time.sleep(0.5)
    return f"{city}: sunny, 21 C, light wind from the west."


def search(topic: str) -> str:
    """Search the literature on a topic; returns the best source."""
    print(f"    [tool] search({topic!r}) running (slow)", flush=True)
    time.sleep(1.5)
    return f"Best source on {topic}: 'Durable execution for agents', 2026, section 3."


def read_source(title: str) -> str:
    """Read a source and return its key finding."""
    print(f"    [tool] read_source({title!r}) running (slow)", flush=True)
    time.sleep(1.5)
    return f"{title}: replaying recorded model turns makes retries ~100x cheaper than re-running them."


def lookup_order(order: str) -> str:
    """Look an order up."""
    print(f"    [tool] lookup_order({order!r}) running", flush=True)
    return f"Order {order}: 2 items, 40 USD, delivered damaged."


def issue_refund(order: str, amount: int) -> str:
    """Refund an order. Side effect: money leaves the company, so it must never run twice."""
    key = tether.idempotency_key()  # hand this to the payment API so a crash can't refund twice
    print(f"    [tool] issue_refund({order!r}, {amount}) running, idempotency key {key}", flush=True)
    return f"Refunded {amount} USD on order {order} (refund id R-{(key or 'local')[:8]})."
