"""Gaps between tokens over time, per run, with marks and a summary table."""

from __future__ import annotations

import numpy as np
import panel as pn
import pytest
from bokeh.models import Span

from widgets.itl_timeline import ItlTimeline
from widgets.tables import sig


def test_gaps_stream_then_are_replaced_by_the_final_figures():
    timeline = ItlTimeline(series=["whole", "chunks"])
    root = pn.panel(timeline).get_root()
    timeline.stream("whole", [0.1, 0.2], [10.0, 400.0], [0, 1])
    timeline.stream("whole", [0.3], [11.0], [0])
    assert timeline.gaps("whole") == [10.0, 400.0, 11.0] and timeline.worst("whole") == 400.0
    timeline.set("whole", [0.1, 0.25], [10.0, 390.0], [0, 1])
    assert timeline.worst("whole") == 390.0 and timeline.worst("chunks") is None
    timeline.mark("whole", "long prompt arrives", 0.2)
    timeline.mark("whole", "long prompt arrives", 0.21)  # moved, not added
    spans = [m for m in root.references() if isinstance(m, Span)]
    assert len(spans) == 4  # made up front: two marks per run
    assert timeline.marks["whole"] == [("long prompt arrives", 0.21)]
    assert [s.location for s in spans if s.visible] == [0.21]
    with pytest.raises(ValueError, match="unknown mark"):
        timeline.mark("whole", "lunch", 1.0)
    table = timeline.table_html
    assert "390" in table and "long prompt arrives at 0.21 s" in table and "chunks" in table
    timeline.clear("whole")
    assert timeline.gaps("whole") == [] and timeline.marks["whole"] == []
    assert not any(s.visible for s in spans)


def test_final_figures_carry_intervals_by_whole_requests():
    timeline = ItlTimeline(series=["whole"])
    pn.panel(timeline).get_root()
    rng = np.random.default_rng(5)
    gaps = {rid: list(rng.normal(20 + rid, 1, 30)) for rid in range(6)}  # each its own level
    flat = [(rid, g) for rid, gs in gaps.items() for g in gs]
    timeline.stream("whole", [0.1] * len(flat), [g for _, g in flat], [r for r, _ in flat])
    assert "[" not in timeline.table_html  # streaming: the figures alone
    timeline.set("whole", [0.1] * len(flat), [g for _, g in flat], [r for r, _ in flat])
    median, p99 = timeline.estimates["whole"][50], timeline.estimates["whole"][99]
    assert median.value == pytest.approx(np.percentile([g for _, g in flat], 50))
    assert median.n == 180 and median.lo < median.value < median.hi
    # resampled by request: about as wide as the six requests' levels spread, not 1/sqrt(180)
    assert median.hi - median.lo > 1.0
    assert p99.bounded and f"[{sig(median.lo)}–{sig(median.hi)}]" in timeline.table_html
    timeline.set("whole", [0.1, 0.2], [10.0, 12.0], [0, 1])
    assert not timeline.estimates["whole"][99].bounded and "†" in timeline.table_html
