"""Where each request's time went: one horizontal bar per request, stacked by phase (tokenize,
queue, prefill, decode, detokenize, the rest between the engine's steps), in ms, with a table
beside it that gives every phase's ms and share.

`set(rows)` takes [(label, {phase: ms})], the phases keyed as PHASES names them; a phase missing
from a row counts as 0. The bars are redrawn in place (one ColumnDataSource).
"""

from __future__ import annotations

import param
from bokeh.models import ColumnDataSource, Legend, LegendItem

from .chart_view import ChartView, bar_figure
from .palette import GREEN, PHASE_FILL, VERMILLION
from .runtime.doc_hold import changes_bokeh_models
from .tables import html_table

PHASES = ("tokenize", "queue", "prefill", "decode", "detokenize", "other")
LABELS = {"tokenize": "tokenize", "queue": "queue", "prefill": "prefill", "decode": "decode",
          "detokenize": "detokenize", "other": "between steps"}
COLORS = {"tokenize": VERMILLION, "queue": PHASE_FILL["queued"],
          "prefill": PHASE_FILL["prefill"], "decode": PHASE_FILL["decode"], "detokenize": GREEN,
          "other": PHASE_FILL["waiting"]}  # queue, prefill, decode as the token timeline's


def share_text(ms: float, total: float) -> str:
    """A phase's ms and its share of the request's time: "0.21 ms (0.03%)"."""
    share = 100 * ms / total if total > 0 else 0.0
    digits = 2 if ms < 10 else 1
    return f"{ms:.{digits}f} ms ({share:.2g}%)"


class PhaseBars(ChartView):
    """One stacked bar per request: its time by phase, in ms."""

    title = param.String(default="Where each request's time went", doc="The chart's title.")
    height = param.Integer(default=170, bounds=(80, None))

    def __init__(self, **params):
        super().__init__(**params)
        self.source = ColumnDataSource({"label": [], **{p: [] for p in PHASES}})
        fig = bar_figure(self.title, "ms, from the request's arrival to its text being ready",
                         self.height)
        renderers = fig.hbar_stack(list(PHASES), y="label", height=0.6, source=self.source,
                                   color=[COLORS[p] for p in PHASES])
        fig.add_layout(Legend(items=[LegendItem(label=LABELS[p], renderers=[r])
                                     for p, r in zip(PHASES, renderers, strict=True)],
                              orientation="horizontal", location="center"), "below")
        self._place(fig, f"Stacked bar chart: {self.title}", table_css="phase-table")
        self.set([])

    @changes_bokeh_models
    def set(self, rows: list[tuple[str, dict[str, float]]]) -> None:
        labels = [label for label, _ in rows]
        self.figure.y_range.factors = list(reversed(labels))
        self.source.data = {"label": labels,
                            **{p: [ms.get(p, 0.0) for _, ms in rows] for p in PHASES}}
        totals = [sum(ms.get(p, 0.0) for p in PHASES) for _, ms in rows]
        self.figure.x_range.end = max(totals, default=1.0) * 1.05 or 1.0
        self.text.table.object = html_table(
            self.title, ["request", *(LABELS[p] for p in PHASES), "total"],
            [[label, *(share_text(ms.get(p, 0.0), total) for p in PHASES), f"{total:.1f} ms"]
             for (label, ms), total in zip(rows, totals, strict=True)],
            numeric=[False, *([True] * (len(PHASES) + 1))])
        self.text.say(" ".join(
            f"{label}: {total:.1f} ms, of which tokenize {share_text(ms.get('tokenize', 0.0), total)}"
            f" and prefill {share_text(ms.get('prefill', 0.0), total)}."
            for (label, ms), total in zip(rows, totals, strict=True))
            if rows else "No request measured yet.")

    def totals(self) -> dict[str, float]:
        """Each bar's total ms, by label."""
        data = self.source.data
        return {label: sum(data[p][i] for p in PHASES) for i, label in enumerate(data["label"])}
