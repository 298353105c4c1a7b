"""The weather example's tool, shipped in tether-testing so that ``helm test`` (the chart's test
hook, tether.testing.helm_test) runs the weather example in any image built by ``tether image
build`` (which declares this module in the image's ``tether.tools`` entry points)."""

from __future__ import annotations


def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"{city}: sunny, 21 C, light wind from the west."
