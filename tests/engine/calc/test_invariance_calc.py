"""The batch-invariance lesson's arithmetic (engine.calc.invariance)."""

from __future__ import annotations

import pytest

from engine.calc.invariance import (
    IDENTICAL,
    LAST_BITS,
    TEXT_DIFFERS,
    cost_ratio,
    outcome,
    wilson_interval,
)


def test_wilson_interval_matches_the_textbook_values():
    lo, hi = wilson_interval(0, 4)  # nothing seen in 4: up to about half is still possible
    assert lo == 0.0 and hi == pytest.approx(0.4899, abs=1e-4)
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    lo, hi = wilson_interval(4, 4)
    assert hi == pytest.approx(1.0) and lo == pytest.approx(0.5101, abs=1e-4)
    with pytest.raises(ValueError):
        wilson_interval(5, 4)


def test_cost_ratio_and_outcome():
    assert cost_ratio(30.0, 6.0) == 5.0
    with pytest.raises(ValueError):
        cost_ratio(1.0, 0.0)
    assert outcome(0, 0, 4) == IDENTICAL
    assert outcome(12, 0, 4) == LAST_BITS and outcome(12, 2, 4) == LAST_BITS
    assert outcome(12, 3, 4) == TEXT_DIFFERS
