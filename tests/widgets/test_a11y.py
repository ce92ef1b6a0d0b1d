"""Screen-reader pieces (widgets.a11y): every chart is a figure with a name, described by a
summary sentence and a table in its own layout; the summary follows the data; the polite live
region reads one message at a time, the latest of a burst."""

from __future__ import annotations

import pytest
from bokeh.models import Model

from widgets.a11y import AriaHTML, LiveRegion, describe_chart, plain_words
from widgets.block_table import BlockTableView
from widgets.count_bars import CountBars
from widgets.floor_chart import FloorChart
from widgets.itl_timeline import ItlTimeline
from widgets.latency_histogram import LatencyHistogram
from widgets.rate_curve import RateCurve
from widgets.request_lanes import RequestLanes
from widgets.roofline_chart import RooflineChart
from widgets.throughput_curve import ThroughputCurve
from widgets.token_timeline import TokenTimeline


def test_describe_chart_names_the_figure_and_points_at_its_text():
    from bokeh.plotting import figure

    fig = figure()
    summary, table = AriaHTML(""), AriaHTML("")
    describe_chart(fig, "Throughput against batch size", summary, table)
    assert summary.html_id and table.html_id and summary.html_id != table.html_id
    assert fig.html_attributes == {"role": "figure", "aria-label": "Throughput against batch size",
                                   "aria-describedby": f"{summary.html_id} {table.html_id}"}
    root = summary.get_root()
    assert root.html_id == summary.html_id  # the pane's own element carries the id


CHARTS = {
    "itl": lambda: ItlTimeline(series=["whole", "chunks"]),
    "roofline": lambda: RooflineChart(),
    "counts": lambda: CountBars(unit="sequences", title="What fits"),
    "floor": lambda: FloorChart(),
    "rates": lambda: RateCurve(),
    "blocks": lambda: BlockTableView(num_blocks=8),
    "throughput": lambda: ThroughputCurve(),
    "histogram": lambda: LatencyHistogram(title="End-to-end latency"),
    "lanes": lambda: RequestLanes(),
    "ticks": lambda: TokenTimeline(rows=["engine", "your browser"]),
}


def models_with_ids(root: Model) -> dict[str, Model]:
    return {m.html_id: m for m in root.references() if getattr(m, "html_id", None)}


@pytest.mark.parametrize("name", list(CHARTS))
def test_each_chart_is_described_by_text_in_its_own_layout(name):
    widget = CHARTS[name]()
    root = widget.__panel__().get_root()
    figures = [m for m in root.children if getattr(m, "html_attributes", {}).get("role") == "figure"]
    assert figures, f"{name}: no figure with role=figure among its layout's children"
    siblings = {getattr(c, "html_id", None) for c in root.children}
    for fig in figures:
        assert fig.html_attributes["aria-label"]
        ids = fig.html_attributes["aria-describedby"].split()
        assert len(ids) == 2 and set(ids) <= siblings, (name, ids, siblings)
    assert widget.text.sentence  # a summary from the start ("nothing measured yet")


def test_summaries_follow_the_data():
    bars = CountBars(unit="sequences")
    bars.set([("fit with paging", 12, "blocks"), ("fit without", 3, "whole context")])
    assert bars.text.sentence == "fit with paging: 12 sequences; fit without: 3 sequences."
    assert "12 sequences" in bars.text.summary.object
    hist = LatencyHistogram(title="E2E", markers=["p50", "p99"])
    hist.update([10.0, 20.0, 30.0, 40.0, 1000.0])
    assert hist.text.sentence == "E2E: 5 requests; P50 30.0 ms, P99 962 ms."
    curve = ThroughputCurve()
    curve.add_point(1, tokens_per_s=100.0, ms_per_token=10.0)
    curve.add_point(16, tokens_per_s=2296.0, ms_per_token=6.97)
    assert curve.text.sentence == ("2 batch sizes measured: from batch 1, 100 tokens/s in all and "
                                   "10.0 ms per token for each user, to batch 16, 2,296 tokens/s "
                                   "in all and 6.97 ms per token for each user.")
    itl = ItlTimeline(series=["whole"])
    itl.set("whole", [0.1, 0.2, 0.3], [8.0, 40.0, 9.0], [0, 0, 0])
    assert itl.text.sentence == "Gaps between tokens: whole, worst 40.0 ms (median 9.00 ms)."


def test_live_region_is_polite_and_reads_the_latest_of_a_burst():
    region = LiveRegion()
    root = region.__panel__().get_root()
    assert root.html_attributes["aria-live"] == "polite"
    assert root.html_attributes["role"] == "status"
    region.announce("batch 1 measured", now=100.0)
    assert region.message == "batch 1 measured" and region.pending is None
    for i in range(2, 20):  # a stream within the gap: nothing more is read yet
        region.announce(f"token {i}", now=100.0 + i * 0.05)
    assert region.message == "batch 1 measured" and region.pending == "token 19"
    region.flush(now=102.5)
    assert region.message == "token 19" and region.pending is None
    region.announce("batch 16 measured", now=105.0)  # after the gap: read at once
    assert region.message == "batch 16 measured"


def test_live_region_reads_the_same_words_again():
    region = LiveRegion()
    region.announce("cached result", now=0.0)
    first = region.__panel__().object
    region.announce("cached result", now=10.0)
    assert region.__panel__().object != first  # a changed node is read again
    assert region.message == "cached result"


def test_checkpoint_choices_are_a_group_named_by_the_question_and_verdicts_are_read_out():
    from widgets.checkpoint import Checkpoint, Choice, Question

    question = Question("Which clock starts at your click?",
                        (Choice("the browser's", True, "It stamps the click."),
                         Choice("the engine's", False, "It starts when the request arrives.")))
    checkpoint = Checkpoint([question])
    asked = checkpoint.questions[0]
    layout = asked.__panel__().get_root()
    prompt, picker = layout.children[0], layout.children[1]
    assert picker.html_attributes == {"role": "radiogroup", "aria-labelledby": prompt.html_id}
    asked.answer = "the engine's"
    assert checkpoint.live.message == "Not quite. It starts when the request arrives. 0 of 1 right."


def test_the_status_widget_announces_queue_errors_and_finished_results():
    from engine.lab.events import JobEvent
    from widgets.job_status import JobStatus

    status = JobStatus("runs")
    status.start(1)
    status.queued(2)
    assert status.live.message.startswith("Queued behind 2 jobs from other readers")
    status.queued(2)  # the same position again: not read again
    assert status.live.pending is None
    status.handle(JobEvent(1, "sweep_point", "result", {}, cached=True, device="cpu",
                           measured_at="2026-11-22T02:48:18+0000"))
    assert status.live.pending == ("Runs done: cached: measured on cpu at "
                                   "2026-11-22 02:48 UTC.")
    status.error.message = "the KV budget holds 3 requests, not 8\nmore detail"
    assert status.live.pending == "The engine could not do this: the KV budget holds 3 requests, not 8"
    status.live.flush()
    assert status.live.message.startswith("The engine could not do this")


def test_plain_words_are_what_a_page_shows_without_its_marks():
    assert plain_words("Under <b>static</b> batching the 4 requests waited 12 ms.") == (
        "Under static batching the 4 requests waited 12 ms.")
    assert plain_words("- **whole:** worst gap **45 ms**\n- **in chunks:** 12 ms &amp; less") == (
        "whole: worst gap 45 ms in chunks: 12 ms & less")
