"""The one rule for a number a reader typed: inside its range it is fine, else the page's message
for what is wrong (nothing typed, too low or not a number, too high)."""

from __future__ import annotations

import math

from lessons.number_input import number_problem

WORDS = {"empty": "type one", "low": "{value:g} is too low", "high": "{value:g} is too high"}


def test_inside_the_range_is_fine():
    assert number_problem(5, lo=0, hi=10, **WORDS) == ""
    assert number_problem(0, lo=0, **WORDS) == ""  # lo itself is allowed...
    assert number_problem(10, lo=0, hi=10, **WORDS) == ""  # ...and hi


def test_each_way_out_gets_its_message():
    assert number_problem(None, lo=0, **WORDS) == "type one"
    assert number_problem(-2, lo=0, **WORDS) == "-2 is too low"
    assert number_problem(0, lo=0, above=True, **WORDS) == "0 is too low"  # above lo, not at it
    assert number_problem(math.nan, lo=0, **WORDS) == "nan is too low"  # not a number at all
    assert number_problem(12.5, lo=0, hi=10, **WORDS) == "12.5 is too high"
    assert number_problem(math.inf, lo=0, hi=10, **WORDS) == "inf is too high"


def test_an_empty_field_may_be_allowed():
    assert number_problem(None, lo=0, above=True, low="too low") == ""
