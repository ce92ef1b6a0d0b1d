"""What the console and the student page share: the class run's charts, fed from the server's one
ClassFeed a frame at a time (FRAME_MS: a frame a second at most), each session streaming only
the rows new to it, and the knob changes marked on every time axis."""

from __future__ import annotations

from collections.abc import Callable

import panel as pn

from engine.lab.client import get_service
from widgets.class_charts import ClassHistogram, ClassLanes, KnobMarks, StepChart, TimeChart
from widgets.runtime.doc_hold import changes_bokeh_models

from .feed import ClassFeed, class_feed, describe_change

FRAME_MS = 1000


def change_rows(changes: list[dict]) -> list[dict]:
    """Knob changes as the charts label them."""
    return [{"t_s": c["t_s"], "label": describe_change(c.get("changes") or {})} for c in changes]


def served() -> bool:
    """Whether this page is in a browser's live session (not built by a test or an export):
    only then do its frames and its start on load run."""
    return pn.state.curdoc is not None and pn.state.curdoc.session_context is not None


class LiveClass(pn.viewable.Viewer):
    """The charts of the class run and their frame-by-frame update from the feed."""

    def __init__(self, service=None, feed: ClassFeed | None = None, me: str | None = None,
                 full: bool = True, on_frame: Callable[[], None] | None = None):
        super().__init__()
        self._on_frame = on_frame  # the page's own lines, after each frame's charts
        self._service = service
        self.feed = feed if feed is not None else class_feed()
        self.me = me  # the reader's student id: their requests picked out
        self.full = full  # the console's whole set, or the student's few charts
        self.marks = KnobMarks()
        self.ttft = ClassHistogram(title="Time to first token, everyone",
                                   x_label="TTFT (ms)", mine_label="yours")
        self.itl = ClassHistogram(title="Gaps between tokens (ITL), everyone",
                                  x_label="ITL (ms)", mine_label="yours")
        self.lanes = ClassLanes(marks=self.marks)
        self.tail = TimeChart(title="TTFT over time (last 10 s of requests)",
                              y_label="TTFT (ms)", unit=" ms", marks=self.marks,
                              series=[("ttft_p50", "P50"), ("ttft_p99", "P99")])
        self.itl_tail = TimeChart(title="ITL over time (last 10 s of requests)",
                                  y_label="ITL (ms)", unit=" ms", marks=self.marks,
                                  series=[("itl_p50", "P50"), ("itl_p99", "P99")])
        self.load = TimeChart(title="Requests in flight and waiting", y_label="requests",
                              marks=self.marks,
                              series=[("in_flight", "in flight"), ("waiting", "waiting")])
        self.steps = StepChart(marks=self.marks)
        self.kv = TimeChart(title="KV cache blocks in use", y_label="blocks", marks=self.marks,
                            series=[("kv_blocks_used", "in use"), ("kv_blocks_total", "all")])
        self.speed = TimeChart(title="Tokens per second (last 5 s)", y_label="tokens/s",
                               unit=" tokens/s", marks=self.marks,
                               series=[("tokens_per_s", "output tokens/s")])
        self._run = None
        self._steps_at = 0
        self._points_at = 0
        self._version = -1
        self.frames = 0

    @property
    def service(self):
        return self._service if self._service is not None else get_service()

    def time_charts(self) -> list:
        return [self.load, self.steps, self.kv, self.speed, self.tail, self.itl_tail]

    def start_frames(self) -> None:
        """A frame a second while the session lives (served pages only)."""
        if served():
            pn.state.add_periodic_callback(self.tick, period=FRAME_MS)

    def tick(self) -> None:
        """One frame: ask the feed (it polls the service at most once a second for the whole
        server), then draw what is new."""
        self.feed.poll(self.service)
        self.draw()

    def tick_now(self) -> None:
        """A frame at once, asking the service now (after the teacher changed something)."""
        self.feed.poll(self.service, force=True)
        self.draw()

    @changes_bokeh_models
    def draw(self) -> None:
        """Draw what the feed holds that this session has not drawn (everything after a new run)."""
        feed = self.feed
        if feed.run != self._run:
            self._run = feed.run
            self._steps_at = self._points_at = 0
            self._version = -1
            self.marks.clear()
            for chart in self.time_charts():
                chart.clear()
        points, self._points_at = feed.points_from(self._points_at)
        steps, self._steps_at = feed.steps_from(self._steps_at)
        if self.full:
            for chart in (self.load, self.kv, self.speed, self.itl_tail):
                chart.stream(points)
            self.steps.stream(steps)
        self.tail.stream(points)
        self.marks.show(change_rows(feed.changes()))
        if feed.version != self._version:  # the histograms and lanes only when data came
            self._version = feed.version
            everyone = feed.latencies()
            mine = feed.rows_of(self.me)
            self.ttft.update(everyone["ttft"], [r.get("ttft_ms") for r in mine])
            self.itl.update(everyone["itl"], [g for r in mine for g in r.get("itl_ms") or []])
            self.lanes.update(feed.recent_rows(self.lanes.window_s), feed.t_s, self.me)
        self.frames += 1
        if self._on_frame is not None:
            self._on_frame()

    def __panel__(self):
        if self.full:
            return pn.Column(
                pn.Row(self.load, self.steps, sizing_mode="stretch_width"),
                pn.Row(self.kv, self.speed, sizing_mode="stretch_width"),
                pn.Row(self.ttft, self.itl, sizing_mode="stretch_width"),
                pn.Row(self.tail, self.itl_tail, sizing_mode="stretch_width"),
                self.lanes, sizing_mode="stretch_width")
        return pn.Column(pn.Row(self.ttft, self.itl, sizing_mode="stretch_width"),
                         self.tail, self.lanes, sizing_mode="stretch_width")
