"""Readouts: a row of labelled figures (a big number, a line saying what it is), and a plain HTML
table, both as text a screen reader reads, for beside a chart.

    readouts = Readouts([("ttft", "TTFT: arrival to first token"), ("itl", "ITL p50 / p99")])
    readouts.set(ttft="48 ms", itl="9.1 / 14.0 ms")

Values are text: the page formats them with their units. Unset values show a dash.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import panel as pn
import param

from .site_css import site_stylesheets

DASH = "\u2013"


def table_html(header: Sequence[str], rows: Sequence[Sequence], caption: str = "",
               numeric_from: int = 1) -> str:
    """A table.plain: header cells, then rows whose first cell is a row header; cells from
    numeric_from on are right-aligned numbers. Cells are escaped."""
    head = "".join(f'<th scope="col">{html.escape(str(h))}</th>' for h in header)
    body = []
    for row in rows:
        cells = [f'<th scope="row">{html.escape(str(row[0]))}</th>'] + [
            f'<td class="{"num" if i >= numeric_from else ""}">{html.escape(str(c))}</td>'
            for i, c in enumerate(row[1:], start=1)]
        body.append(f"<tr>{''.join(cells)}</tr>")
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f'<table class="plain">{cap}<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


class Readouts(pn.viewable.Viewer):
    """A grid of figures: value (big) and what it is (small), in a fixed order."""

    values = param.Dict(default={}, doc="key -> the value's text, with its unit.")
    notes = param.Dict(default={}, doc="key -> a replacement for the 'what' line (optional).")

    def __init__(self, items: Sequence[tuple[str, str]], **params):
        super().__init__(**params)
        self.items = list(items)
        self._pane = pn.pane.HTML("", sizing_mode="stretch_width", stylesheets=site_stylesheets(),
                                  css_classes=["readouts"])
        self._render()

    def set(self, **values: str) -> None:
        """Set some values (text with units); the others keep theirs."""
        self.values = {**self.values, **values}

    def clear(self) -> None:
        self.param.update(values={}, notes={})

    @property
    def text(self) -> str:
        """The readouts as one line of text: 'what: value; ...'."""
        return "; ".join(f"{self.notes.get(k, what)}: {self.values.get(k, DASH)}"
                         for k, what in self.items)

    @param.depends("values", "notes", watch=True)
    def _render(self) -> None:
        cells = "".join(
            f'<div class="figure" data-key="{html.escape(k)}"><div class="value">'
            f"{html.escape(self.values.get(k, DASH))}</div><div class=\"what\">"
            f"{html.escape(self.notes.get(k, what))}</div></div>" for k, what in self.items)
        self._pane.object = f'<div class="site"><div class="figures">{cells}</div></div>'

    def __panel__(self):
        return self._pane
