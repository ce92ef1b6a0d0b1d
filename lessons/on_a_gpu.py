"""The "On a GPU" box of a lesson: what its finding becomes on data-centre GPUs.

Every box starts from the same table: this machine's two limits as the engine measured them
(its `info` job), beside an A100's and an H100's from their datasheets, and each one's ridge
point = peak / bandwidth. Below it the lesson's own finding, put through engine.calc.gpu_scaling's
formulas for each machine. When the app runs on a GPU, the first row is that GPU, measured here,
and the box says so: its numbers are then measurements, the datasheet rows the comparison.

    box = GpuBox(finding=lambda machines: "<p>...</p>")   # the lesson's part, as HTML
    box.fetch(page.jobs)        # asks the engine for this machine's limits (cached per machine)
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

import panel as pn

from engine.calc.gpu_scaling import GPUS, Machine, machine_from_info, on_gpu
from widgets.site_css import site_stylesheets
from widgets.tables import sig

Finding = Callable[[list[Machine]], str]  # the machines, this one first once known -> HTML
Column = tuple[str, Callable[[Machine], str]]


def machine_table(machines: Sequence[Machine], columns: Sequence[Column], caption: str) -> str:
    """A table with a row per machine; the first column names it (and says where from)."""
    head = "".join(f'<th scope="col">{html.escape(h)}</th>' for h, _ in columns)
    rows = []
    for m in machines:
        name = f"{html.escape(m.name)}{' (measured here)' if m.measured else ''}"
        cells = "".join(f'<td class="num">{fn(m)}</td>' for _, fn in columns)
        rows.append(f'<tr><th scope="row">{name}</th>{cells}</tr>')
    return (f'<table class="plain"><caption>{html.escape(caption)}</caption><thead><tr>'
            f'<th scope="col">machine</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
            "</table>")


LIMITS: tuple[Column, ...] = (
    ("memory bandwidth (GB/s)", lambda m: f"{m.bandwidth_gbs:,.0f}"),
    ("matrix-multiply peak (TFLOP/s)", lambda m: sig(m.peak_gflops / 1000)),
    ("ridge point = peak / bandwidth (FLOP/byte)", lambda m: sig(m.ridge)),
)


def sources_html(machines: Sequence[Machine]) -> str:
    items = "".join(f"<li>{html.escape(m.name)}: {html.escape(m.source)}.</li>"
                    for m in machines if not m.measured)
    return (f'<p class="source">Datasheet figures (dense bf16 peaks; the headline numbers with '
            f"2:4 sparsity are twice these), quoted, not measured here:</p><ul "
            f'class="source">{items}</ul>')


class GpuBox(pn.viewable.Viewer):
    """A lesson's "On a GPU" box (module docstring)."""

    def __init__(self, finding: Finding, title: str = "On a GPU"):
        super().__init__()
        self.finding = finding
        self.title = title
        self.here: Machine | None = None
        self.gpu_here = False
        self._asked = False
        self._pane = pn.pane.HTML("", sizing_mode="stretch_width",
                                  stylesheets=site_stylesheets(), css_classes=["on-a-gpu"])
        self.refresh()

    @property
    def machines(self) -> list[Machine]:
        """This machine (once measured) first, then the datasheet GPUs."""
        return ([self.here] if self.here else []) + list(GPUS)

    def fetch(self, jobs) -> None:
        """Ask the engine for this machine's measured limits (cached per machine); once."""
        if self._asked:
            return
        self._asked = True
        # aside: the box's answer is not the reader's first number (engine.lab.job_queue rule 0)
        jobs.submit("info", {}, lambda e: self.set_info(e.data) if e.type == "result" else None,
                    aside=True)

    def set_info(self, info: dict) -> None:
        self.here = machine_from_info(info)
        self.gpu_here = on_gpu(info)
        self.refresh()

    def refresh(self) -> None:
        if self.gpu_here:
            where = (f"<p><strong>This app runs on a GPU ({html.escape(self.here.name)}): the "
                     "first row is measured here,</strong> the others are datasheet figures "
                     "for comparison.</p>")
        elif self.here:
            where = ("<p>This machine is a CPU. Its limits are measured here; the GPUs' come "
                     "from their datasheets, and everything below is computed from them by the "
                     "formulas named, so read the GPU rows as floors and ceilings, not "
                     "measurements.</p>")
        else:
            where = "<p>This machine's own limits appear here once the engine has measured them.</p>"
        table = machine_table(self.machines, LIMITS, "Two limits and the ridge point")
        self._pane.object = (
            f'<div class="site"><aside class="gpu-box" aria-label="{html.escape(self.title)}">'
            f"<h2>{html.escape(self.title)}</h2>{where}{table}{self.finding(self.machines)}"
            f"{sources_html(self.machines)}</aside></div>")

    @property
    def text(self) -> str:
        return self._pane.object

    def __panel__(self):
        return self._pane
