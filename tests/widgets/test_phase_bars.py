"""One stacked bar per request, by phase: the data, the totals, the table and the sentence."""

from __future__ import annotations

import panel as pn
import pytest

from widgets.phase_bars import PHASES, PhaseBars, share_text


def test_one_stacked_bar_per_request_with_its_phases_in_ms():
    bars = PhaseBars()
    pn.panel(bars).get_root()
    short = {"tokenize": 0.2, "queue": 1.0, "prefill": 20.0, "decode": 78.0, "detokenize": 0.3,
             "other": 0.5}
    long = {"tokenize": 2.0, "prefill": 400.0, "decode": 98.0}
    bars.set([("short prompt", short), ("long prompt", long)])
    assert bars.totals() == pytest.approx({"short prompt": 100.0, "long prompt": 500.0})
    assert list(bars.source.data["tokenize"]) == [0.2, 2.0]
    assert list(bars.source.data["queue"]) == [1.0, 0.0]  # a missing phase is 0
    assert bars.figure.y_range.factors == ["long prompt", "short prompt"]
    assert bars.figure.x_range.end >= 500.0
    assert len(bars.figure.renderers) == len(PHASES)
    assert "0.20 ms (0.2%)" in bars.table_html  # the tokenizer's share of the short request
    assert "short prompt: 100.0 ms, of which tokenize 0.20 ms (0.2%)" in bars.text.sentence
    bars.set([])
    assert bars.totals() == {} and bars.text.sentence == "No request measured yet."


def test_share_text():
    assert share_text(0.21, 700.0) == "0.21 ms (0.03%)"
    assert share_text(350.0, 700.0) == "350.0 ms (50%)"
    assert share_text(1.0, 0.0) == "1.00 ms (0%)"
