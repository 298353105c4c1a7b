"""Tokens of one model turn: what the wire protocols read, the cost table prices and the run
adds up. Neutral ground below all three, so none of them imports another for it."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Usage:
    """Tokens of one model turn, normalised across providers.

    ``input_tokens`` are the uncached input tokens billed at the full input price;
    ``cached_input_tokens`` were read from the provider's prompt cache; ``cache_write_tokens``
    were written to it; ``output_tokens`` include reasoning tokens.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(a + b for a, b in zip(self.astuple(), other.astuple(), strict=True)))

    def astuple(self) -> tuple[int, int, int, int]:
        return (self.input_tokens, self.output_tokens, self.cached_input_tokens, self.cache_write_tokens)

    @property
    def total(self) -> int:
        return sum(self.astuple())

    def to_dict(self) -> dict[str, int]:
        return asdict(self)
