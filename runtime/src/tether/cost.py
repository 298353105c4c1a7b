"""Dollars from tokens. Usage is read at the wire, for every framework alike (README.md, "How it works": Cost).

Prices are USD per million tokens: ``input`` (uncached), ``cached_input`` (read from the
provider's prompt cache), ``cache_write`` and ``output``. The built-in table covers common models;
``$TETHER_PRICES`` (or ``load_prices(path)``) names a YAML/JSON file of the same shape that
overrides or extends it. A model missing from the table is listed as unpriced, and its turns,
like turns whose usage cannot be read, are of *unknown* cost, never $0: the run counts them
(``unknownCostTurns``) and ``maxCostUSD`` refuses the next live turn after one unless
``limits.unknownCost: ignore`` (``Run(unknown_cost=...)``).
Model names match exactly first, then by the longest table key that prefixes them
(``gpt-4o-mini-2024-07-18`` → ``gpt-4o-mini``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .usage import Usage


@dataclass(frozen=True)
class Price:
    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None

    def dollars(self, usage: Usage) -> float:
        cached = self.cached_input if self.cached_input is not None else self.input
        write = self.cache_write if self.cache_write is not None else self.input
        return (
            usage.input_tokens * self.input
            + usage.cached_input_tokens * cached
            + usage.cache_write_tokens * write
            + usage.output_tokens * self.output
        ) / 1_000_000


DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-5": Price(1.25, 10.00, 0.125),
    "gpt-5-mini": Price(0.25, 2.00, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "o3": Price(2.00, 8.00, 0.50),
    "o4-mini": Price(1.10, 4.40, 0.275),
    "claude-opus-4": Price(15.00, 75.00, 1.50, 18.75),
    "claude-sonnet-4": Price(3.00, 15.00, 0.30, 3.75),
    "claude-3-7-sonnet": Price(3.00, 15.00, 0.30, 3.75),
    "claude-3-5-haiku": Price(0.80, 4.00, 0.08, 1.00),
    "claude-haiku-4": Price(1.00, 5.00, 0.10, 1.25),
    "gemini-2.5-pro": Price(1.25, 10.00, 0.31),
    "gemini-2.5-flash": Price(0.30, 2.50, 0.075),
    "gemini-2.0-flash": Price(0.10, 0.40, 0.025),
    "mistral-large": Price(2.00, 6.00),
    "mistral-medium": Price(0.40, 2.00),
    "mistral-small": Price(0.10, 0.30),
}


class PriceTable:
    def __init__(self, prices: dict[str, Price] | None = None) -> None:
        self.prices = dict(DEFAULT_PRICES if prices is None else prices)

    @classmethod
    def default(cls) -> PriceTable:
        table = cls()
        if path := os.environ.get("TETHER_PRICES"):
            table.prices.update(load_prices(path))
        return table

    def lookup(self, model: str) -> Price | None:
        model = model.rsplit("/", 1)[-1]  # "models/gemini-2.5-flash", "openai/gpt-4o"
        if model in self.prices:
            return self.prices[model]
        prefixes = [k for k in self.prices if model.startswith(k)]
        return self.prices[max(prefixes, key=len)] if prefixes else None

    def dollars(self, model: str, usage: Usage) -> float | None:
        price = self.lookup(model)
        return None if price is None else price.dollars(usage)


def load_prices(path: str | Path) -> dict[str, Price]:
    """``{model: {input: 2.5, output: 10, cached_input: 1.25, cache_write: 3.75}}`` (USD / 1M tokens)."""
    import yaml  # here: only with $TETHER_PRICES set

    raw = yaml.safe_load(Path(path).read_text()) or {}
    return {model: Price(**fields) for model, fields in raw.items()}
