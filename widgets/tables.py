"""Plain HTML tables and number formats shared by the chart widgets: every chart has a table of
the same numbers beside it, for screen readers and for readers who want the figures."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import panel as pn

from .site_css import site_stylesheets


def html_table(caption: str, head: Sequence[str], rows: Sequence[Sequence], numeric: Sequence[bool]
               | None = None, css_class: str = "plain") -> str:
    """A <table> with a caption, a header row and body rows; cells are escaped text (already
    formatted). `numeric` marks the columns to align right; a row's first cell is its header."""
    numeric = list(numeric) if numeric is not None else [False] * len(head)
    header = "".join(f'<th scope="col">{html.escape(str(h))}</th>' for h in head)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            text = html.escape(str(cell))
            if i == 0:
                cells.append(f'<th scope="row">{text}</th>')
            else:
                cls = ' class="num"' if i < len(numeric) and numeric[i] else ""
                cells.append(f"<td{cls}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="site"><table class="{css_class}"><caption>{html.escape(caption)}'
            f'</caption><thead><tr>{header}</tr></thead><tbody>{"".join(body)}</tbody></table>'
            "</div>")


def table_pane(**params) -> pn.pane.HTML:
    """An HTML pane for a table, with the site's stylesheet."""
    params.setdefault("sizing_mode", "stretch_width")
    return pn.pane.HTML("", stylesheets=site_stylesheets(), **params)


def sig(x: float | None, digits: int = 3) -> str:
    """A number to `digits` significant figures (whole numbers whole), with thousands
    separators; "-" for None or not finite."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) >= 10 ** digits):
        return f"{int(x):,}"
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - magnitude)
    return f"{x:,.{decimals}f}"


UNBOUNDED = "†"  # marks a percentile from too few samples to bound it (engine.calc.stats)


def with_interval(value: float | None, est) -> str:
    """'412 [380–450]' (an engine.calc.stats.Estimate's 95% interval), '412 †' for a percentile
    too few samples bound, the figure alone without an estimate."""
    if value is None or est is None or est.value is None:
        return sig(value)
    if not est.bounded:
        return f"{sig(value)} {UNBOUNDED}"
    return interval_text(value, est.lo, est.hi)


def interval_text(value: float | None, lo: float | None, hi: float | None) -> str:
    """'412 [380–450]': a figure and its interval; the figure alone without one."""
    return sig(value) if lo is None or hi is None else f"{sig(value)} [{sig(lo)}–{sig(hi)}]"
