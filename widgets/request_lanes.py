"""Request lanes: one row per request on a millisecond axis, showing when it waited in the queue,
when it ran (prefill, then decode), and when its first token came.

Either all at once from finished traces:

    lanes = RequestLanes(x_label="ms since the first arrival")
    lanes.show([{"id": 0, "arrival_ms": 0, "admitted_ms": 5, "first_token_ms": 30,
                 "finish_ms": 400}, ...])

or live, as a run happens (each call patches or streams the lanes in place):

    lanes.expect(12)                    # how many rows to make room for
    lanes.arrive(3, 120.0); lanes.admit(3, 180.0); lanes.first_token(3, 205.0)
    lanes.advance(260.0)                # open bars grow to "now"
    lanes.finish(3, 900.0)

Colours: queued (waiting for a batch slot), running: prefill (admitted, first token not out
yet), running: decode (first token out, until the last). A diamond marks the first token.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import panel as pn
import param
from bokeh.models import ColumnDataSource, HoverTool, Range1d, Span
from bokeh.plotting import figure

from .a11y import ChartText
from .palette import PHASE_FILL
from .runtime.doc_hold import changes_bokeh_models
from .tables import html_table, sig

PARTS = ("queued", "prefill", "decode")
PART_LABELS = {"queued": "queued", "prefill": "running: prefill", "decode": "running: decode"}
PART_COLORS = {part: PHASE_FILL[part] for part in PARTS}


def _empty() -> dict:
    return {"id": [], "y": [], "left": [], "right": [], "part": [], "label": [], "color": []}


class RequestLanes(pn.viewable.Viewer):
    """One lane per request: queued and running (prefill, decode) time, first token marked."""

    title = param.String(default="", doc="The figure's title.")
    x_label = param.String(default="ms since the first arrival", doc="Time axis label (unit).")
    height = param.Integer(default=320, bounds=(100, None), doc="Figure height in pixels.")

    def __init__(self, **params):
        super().__init__(**params)
        self.lanes = ColumnDataSource(_empty(), name="lanes")
        self.firsts = ColumnDataSource({"id": [], "y": [], "x": []}, name="first tokens")
        fig = figure(title=self.title or None, height=self.height, sizing_mode="stretch_width",
                     x_axis_label=self.x_label, y_axis_label="request",
                     y_range=Range1d(0.5, -0.5), tools="xpan,xwheel_zoom,reset,save",
                     toolbar_location="above")
        fig.x_range.start = 0
        bars = fig.hbar(y="y", left="left", right="right", height=0.72, color="color",
                        legend_field="label", source=self.lanes)
        firsts = fig.scatter("x", "y", source=self.firsts, marker="diamond", size=11,
                             color="black", legend_label="first token")
        fig.add_tools(HoverTool(renderers=[bars], tooltips=[
            ("request", "@id"), ("", "@label"), ("from", "@left{0.0} ms"),
            ("to", "@right{0.0} ms")]))
        fig.add_tools(HoverTool(renderers=[firsts], tooltips=[
            ("request", "@id"), ("first token at", "@x{0.0} ms")]))
        self.now_line = Span(location=0, dimension="height", line_color="#888888",
                             line_dash="dotted", visible=False)
        fig.add_layout(self.now_line)
        fig.legend.location = "bottom_right"
        fig.legend.orientation = "horizontal"
        fig.yaxis.minor_tick_line_color = None
        fig.ygrid.grid_line_color = None
        self.figure = fig
        self._pane = pn.pane.Bokeh(fig, sizing_mode="stretch_width")
        self._rows: dict[int, dict[str, int]] = {}  # request id -> part -> row in self.lanes
        self._times: dict[int, dict[str, float | None]] = {}
        self.text = ChartText(f"Timeline of each request, queued and running: "
                              f"{self.title or self.x_label}", fig, table_css="lanes-table")
        self._layout = pn.Column(self._pane, self.text.summary, self.text.table,
                                 sizing_mode="stretch_width")
        self._describe()

    # ---- all at once ----------------------------------------------------------------------
    @changes_bokeh_models
    def show(self, requests: Iterable[Mapping]) -> None:
        """Draw finished (or partly finished) requests: each a mapping with id, arrival_ms,
        admitted_ms, first_token_ms, finish_ms (None where it had not happened)."""
        requests = list(requests)
        self.clear()
        self.expect(len(requests))
        end = 0.0
        for r in requests:
            times = {k: r.get(k) for k in ("arrival_ms", "admitted_ms", "first_token_ms",
                                          "finish_ms")}
            end = max([end, *[t for t in times.values() if t is not None]])
            self._times[int(r["id"])] = times
        data = _empty()
        for rid, times in self._times.items():
            for part, (start, stop) in self._spans(times, end).items():
                self._rows.setdefault(rid, {})[part] = len(data["id"])
                self._append(data, rid, part, start, stop)
        self.lanes.data = data
        self.firsts.data = {
            "id": [i for i, t in self._times.items() if t["first_token_ms"] is not None],
            "y": [i for i, t in self._times.items() if t["first_token_ms"] is not None],
            "x": [t["first_token_ms"] for t in self._times.values()
                  if t["first_token_ms"] is not None]}
        self.now_line.visible = False
        self._describe()

    # ---- live ------------------------------------------------------------------------------
    @changes_bokeh_models
    def clear(self) -> None:
        self.lanes.data = _empty()
        self.firsts.data = {"id": [], "y": [], "x": []}
        self._rows.clear()
        self._times.clear()
        self.now_line.visible = False
        self._describe()

    @changes_bokeh_models
    def expect(self, count: int) -> None:
        """Make room for request ids 0 .. count - 1 (first on top)."""
        self.figure.y_range.update(start=max(count, 1) - 0.5, end=-0.5)

    @changes_bokeh_models
    def arrive(self, rid: int, t_ms: float) -> None:
        if rid in self._times:
            return
        self._times[rid] = {"arrival_ms": t_ms, "admitted_ms": None, "first_token_ms": None,
                            "finish_ms": None}
        if rid >= self.figure.y_range.start:
            self.expect(rid + 1)
        first = len(self.lanes.data["id"])
        new = _empty()
        for i, part in enumerate(PARTS):
            self._rows.setdefault(rid, {})[part] = first + i
            self._append(new, rid, part, t_ms, t_ms)
        self.lanes.stream(new)

    def admit(self, rid: int, t_ms: float) -> None:
        self._set(rid, "admitted_ms", t_ms)

    @changes_bokeh_models
    def first_token(self, rid: int, t_ms: float) -> None:
        if self._set(rid, "first_token_ms", t_ms):
            self.firsts.stream({"id": [rid], "y": [rid], "x": [t_ms]})

    def finish(self, rid: int, t_ms: float) -> None:
        if self._set(rid, "finish_ms", t_ms):
            self._describe()  # the text follows finished requests, not every step

    def advance(self, now_ms: float) -> None:
        """Grow every open bar to now (call after each engine step)."""
        self.now_line.update(location=now_ms, visible=True)
        self._patch(now_ms)

    # ---- reading back ----------------------------------------------------------------------
    @property
    def finished_count(self) -> int:
        """How many requests have finished (live) or are drawn finished."""
        return sum(t["finish_ms"] is not None for t in self._times.values())

    def spans(self, rid: int) -> dict[str, tuple[float, float]]:
        """part -> (start ms, end ms) as drawn for one request (zero-width parts left out)."""
        data = self.lanes.data
        return {data["part"][row]: (data["left"][row], data["right"][row])
                for row in self._rows.get(rid, {}).values()
                if data["right"][row] > data["left"][row]}

    def times(self) -> list[dict]:
        """Each request's moments as drawn (ms; None where not reached yet), request order: the
        chart's data for a download."""
        return [{"request": rid, **t} for rid, t in sorted(self._times.items())]

    # ---- the text beside the chart -------------------------------------------------------------
    def _describe(self) -> None:
        done = {rid: t for rid, t in sorted(self._times.items()) if t["finish_ms"] is not None}
        waits = [t["admitted_ms"] - t["arrival_ms"] for t in done.values()
                 if t["admitted_ms"] is not None]
        if done:
            self.text.say(f"{len(done)} of {len(self._times)} requests finished; the longest "
                          f"wait in the queue was {sig(max(waits) if waits else 0)} ms, the "
                          f"last request finished at {sig(max(t['finish_ms'] for t in done.values()))} ms.")
        else:
            self.text.say(f"{len(self._times)} requests, none finished yet.")

        def cell(t):
            return "-" if t is None else sig(t)

        self.text.table.object = html_table(
            f"Each finished request ({self.x_label})",
            ["request", "arrived", "admitted", "first token", "finished"],
            [[str(rid), cell(t["arrival_ms"]), cell(t["admitted_ms"]),
              cell(t["first_token_ms"]), cell(t["finish_ms"])] for rid, t in done.items()],
            numeric=[False, True, True, True, True])

    # ---- internals -------------------------------------------------------------------------
    def _set(self, rid: int, key: str, t_ms: float) -> bool:
        times = self._times.get(rid)
        if times is None or times[key] is not None:
            return False
        times[key] = t_ms
        self._patch(max(t_ms, self.now_line.location or 0.0))
        return True

    @staticmethod
    def _spans(times: Mapping, now: float) -> dict[str, tuple[float, float]]:
        arrival = times["arrival_ms"]
        admitted, first, finish = (times["admitted_ms"], times["first_token_ms"],
                                   times["finish_ms"])
        queued_end = admitted if admitted is not None else now
        spans = {"queued": (arrival, queued_end)}
        if admitted is None:
            return {**spans, "prefill": (arrival, arrival), "decode": (arrival, arrival)}
        prefill_end = first if first is not None else (finish if finish is not None else now)
        spans["prefill"] = (admitted, prefill_end)
        if first is None:
            spans["decode"] = (prefill_end, prefill_end)
        else:
            spans["decode"] = (first, finish if finish is not None else now)
        return spans

    @changes_bokeh_models
    def _patch(self, now: float) -> None:
        data = self.lanes.data
        patches: dict[str, list] = {"left": [], "right": []}
        for rid, rows in self._rows.items():
            for part, (start, stop) in self._spans(self._times[rid], now).items():
                row = rows[part]
                if data["left"][row] != start:
                    patches["left"].append((row, start))
                if data["right"][row] != stop:
                    patches["right"].append((row, stop))
        patches = {k: v for k, v in patches.items() if v}
        if patches:
            self.lanes.patch(patches)

    @staticmethod
    def _append(data: dict, rid: int, part: str, start: float, stop: float) -> None:
        data["id"].append(rid)
        data["y"].append(rid)
        data["left"].append(float(start))
        data["right"].append(float(max(start, stop)))
        data["part"].append(part)
        data["label"].append(PART_LABELS[part])
        data["color"].append(PART_COLORS[part])

    def __panel__(self):
        return self._layout
