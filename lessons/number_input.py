"""What is wrong with a number a reader typed (a memory budget, a price, a latency target), in
the page's own words.

A typed value is not clamped as a URL's is (lessons.url_state): the reader sees their number
and a message saying what it needs to be, and the page draws nothing from it meanwhile. The one
rule for such a range is `number_problem`; each page writes its own sentences for it.
"""

from __future__ import annotations


def number_problem(value: float | None, *, lo: float, above: bool = False,
                   hi: float | None = None, empty: str = "", low: str = "",
                   high: str = "") -> str:
    """'' when value lies in [lo, hi] (above lo, not at it, when `above`; no upper limit when
    hi is None); otherwise the message for what is wrong: `empty` for no number (leave it ''
    where an empty field is allowed), `low` below the range (or not a number at all), `high`
    above it. Messages may name the value as {value:g}."""
    if value is None:
        return empty
    if not (value > lo or (value == lo and not above)):
        return low.format(value=value)
    if hi is not None and value > hi:
        return high.format(value=value)
    return ""
