"""A few labelled counts as bars, patched in place when the labels stay."""

from __future__ import annotations

import panel as pn

from widgets.count_bars import CountBars


def test_bars_and_table():
    bars = CountBars(unit="sequences", title="What fits")
    pn.panel(bars).get_root()
    bars.set([("contiguous", 3, "reserves it all"), ("paged", 12, "only what it uses")])
    assert bars.counts() == {"contiguous": 3, "paged": 12}
    assert bars.figure.y_range.factors == ["paged", "contiguous"]
    bars.set([("contiguous", 4, "a"), ("paged", 15, "b")])
    assert bars.counts() == {"contiguous": 4, "paged": 15}
    assert "only what it uses" not in bars.table_html and "15" in bars.table_html
    bars.set([])
    assert bars.counts() == {}
