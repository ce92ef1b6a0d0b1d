"""Lesson 14: Experts, when a bigger batch reads more weights. /app?lesson=experts

Real runs of the engine's `experts_point` job: one sweep point (64-token prompts, 16 new tokens)
at batch 1 to 64 on a mixture-of-experts preset (moe-mini: 16 experts a layer, top-2) and on the
dense preset of its active size (moe-mini-dense). Each MoE point says how many distinct experts
a layer read per decode step, beside a uniform router's expectation, and the weight bytes that
makes (engine.calc.experts); the page draws them with the step times of both models, and the
"On a GPU" box the same floors for Mixtral 8x7B and DeepSeek-V3 from their papers' figures.

URL: preset: /app?lesson=experts&preset=moe-tiny (tiny shapes, for tests)

The lesson's words (prose, questions, instructor notes, quoted sources) are in
lessons/words/experts.py; this module is its view.
"""

from __future__ import annotations

from dataclasses import dataclass

import panel as pn
import param

from engine.calc.experts import weight_floor_ms
from engine.calc.gpu_scaling import Machine
from engine.config import EXPERT_PRESETS
from engine.lab.results import ExpertsPointResult
from widgets.checkpoint import Choice, Question
from widgets.data_download import DataDownload
from widgets.experts_chart import ExpertsChart
from widgets.html import html_pane
from widgets.job_status import RANDOM_WEIGHTS
from widgets.tables import sig

from .base import LessonPage
from .data_record import Run, check_text, runs_header
from .on_a_gpu import GpuBox, machine_table
from .teaching import Cached
from .words.experts import (
    GPU_MODELS,
    GPU_TEXT,
    INSTRUCTOR,
    INTRO,
    OBJECTIVES,
    PREDICTION,
    QUESTIONS,
    QUOTE,
    READING,
    SETUP,
    TAKEAWAY,
    TIME_CHOICES,
)

BATCHES = (1, 2, 4, 8, 16, 32, 64)
DENSE = {"moe-mini": "moe-mini-dense", "moe-tiny": "moe-tiny-dense"}  # same active size
PROMPT_LEN, NEW_TOKENS = 64, 16
MIB = 2**20


def gpu_finding(machines: list[Machine]) -> str:
    """Lesson 14's finding on each machine: each quoted model's decode floor (weight bytes /
    bandwidth, calc.experts.weight_floor_ms) reading its active parameters (batch 1) and all
    of them (a batch large enough to pick every expert)."""
    columns = []
    for m in GPU_MODELS:
        columns.append((f"{m.name}, active {m.active / 1e9:.0f}B: floor (ms)",
                        lambda mach, m=m: sig(weight_floor_ms(m.active, m.bytes_per_weight,
                                                              mach.bandwidth_gbs))))
        columns.append((f"{m.name}, all {m.total / 1e9:.0f}B: floor (ms)",
                        lambda mach, m=m: sig(weight_floor_ms(m.total, m.bytes_per_weight,
                                                              mach.bandwidth_gbs))))
    table = machine_table(machines, columns, "A decode step's floor from its weight bytes "
                                             "alone: bytes / bandwidth (parameter counts "
                                             "quoted: " + "; ".join(m.source for m in
                                                                   GPU_MODELS) + ")")
    return GPU_TEXT + table


@dataclass(frozen=True)
class Point:
    """One measured decode point in figures."""

    batch: int
    model: str  # "moe" or "dense"
    experts_read: float
    expected: float
    weight_bytes: int  # the weights one step read (calc.experts.step_weight_bytes)
    tpot_ms: float
    p10_ms: float
    p90_ms: float
    tokens_per_s: float
    check: str
    weights: str


def point_of(result: ExpertsPointResult) -> Point:
    return Point(batch=result.batch_size, model="moe" if result.experts else "dense",
                 experts_read=result.experts_read, expected=result.expected_experts,
                 weight_bytes=result.step_weight_bytes, tpot_ms=result.tpot_ms,
                 p10_ms=result.step_ms_p10, p90_ms=result.step_ms_p90,
                 tokens_per_s=result.tokens_per_s, check=check_text(result),
                 weights=result.weights)


def time_outcome(moe: Point, dense: Point) -> tuple[str, str]:
    """Which prediction choice the largest batch's pair supports."""
    ratio = moe.tpot_ms / dense.tpot_ms
    choice = (TIME_CHOICES[0] if ratio < 1.25 else TIME_CHOICES[1] if ratio < 2.0
              else TIME_CHOICES[2])
    return choice, (f"at batch {moe.batch} the MoE step took {sig(moe.tpot_ms)} ms and the "
                    f"dense one {sig(dense.tpot_ms)} ms: {ratio:.2f}x, reading "
                    f"{moe.weight_bytes / dense.weight_bytes:.1f}x the weight bytes")


def half_read_question(moe: dict[int, Point], experts: int) -> Question | None:
    """At which batch the reader's MoE step first read half the experts or more (the key is
    their runs); None until every batch has come, or where no batch read half."""
    if set(moe) != set(BATCHES):
        return None
    first = next((b for b in BATCHES if moe[b].experts_read >= experts / 2), None)
    if first is None:
        return None
    i = BATCHES.index(first)
    others = [BATCHES[j] for j in (i - 1, i + 1, i + 2, i - 2) if 0 <= j < len(BATCHES)][:2]
    why = "Your runs, experts read per layer: " + ", ".join(
        f"batch {b} {moe[b].experts_read:.1f}" for b in BATCHES) + f" (of {experts})."
    return Question(f"In your runs, from which batch size on did the MoE step read at least "
                    f"half of the {experts} experts in a layer?",
                    tuple(Choice(f"Batch {b}", b == first, why) for b in sorted([first, *others])))


def table_html(points: dict[tuple[str, int], Point]) -> str:
    body = []
    for b in BATCHES:
        moe, dense = points.get(("moe", b)), points.get(("dense", b))
        if moe is None and dense is None:
            continue

        def cells(p: Point | None) -> str:
            if p is None:
                return '<td class="num">-</td>' * 3
            return (f'<td class="num">{p.weight_bytes / MIB:.1f}</td>'
                    f'<td class="num">{sig(p.tpot_ms)} ({p.p10_ms:.2f}&ndash;{p.p90_ms:.2f})'
                    f'</td><td class="num">{p.tokens_per_s:,.0f}</td>')
        read = (f"{moe.experts_read:.2f} ({moe.expected:.2f})" if moe else "-")
        ratio = f"{moe.tpot_ms / dense.tpot_ms:.2f}x" if moe and dense else "-"
        body.append(f'<tr><th scope="row">{b}</th><td class="num">{read}</td>{cells(moe)}'
                    f'{cells(dense)}<td class="num">{ratio}</td></tr>')
    heads = ("experts read per layer (uniform router)", "MoE: weight MiB per step",
             "MoE: step ms (p10&ndash;p90)", "MoE: tokens/s", "dense: weight MiB per step",
             "dense: step ms (p10&ndash;p90)", "dense: tokens/s", "MoE step against dense")
    head = "".join(f'<th scope="col">{h}</th>' for h in heads)
    return (f'<table class="plain experts-table"><caption>Decode steps after {PROMPT_LEN}-token '
            f"prompts, {NEW_TOKENS} new tokens each</caption><thead><tr>"
            f'<th scope="col">batch</th>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            "</table>")


class ExpertsLesson(LessonPage):
    """Lesson 14: an MoE model's experts read, bytes and step time against the batch size,
    beside the dense model of its active size."""

    slug = "experts"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS

    preset = param.Selector(default="moe-mini", objects=list(DENSE), label="Model preset",
                            doc="moe-mini: 16 experts a layer, top-2, beside moe-mini-dense "
                                "(random weights: timing only); moe-tiny: tiny shapes.")

    def __init__(self, **params):
        super().__init__(**params)
        self.points: dict[tuple[str, int], Point] = {}
        self.shown: dict[str, Run] = {}
        cfg = EXPERT_PRESETS[self.preset]
        self.chart = ExpertsChart(experts=cfg.experts, top_k=cfg.top_k)
        self.table = pn.pane.HTML("", sizing_mode="stretch_width")
        self.verdict = pn.pane.Markdown("", sizing_mode="stretch_width",
                                        css_classes=["experts-verdict"])
        self.download = DataDownload("experts-decode-steps", self.download_rows,
                                     self.download_header, "The measured steps")
        self.again = pn.widgets.Button(label="Measure again (not from the cache)")
        self.again.on_click(lambda _e: self.start(fresh=True))
        self.gpu_box = GpuBox(gpu_finding)

    # ---- jobs ------------------------------------------------------------------------------
    def default_jobs(self) -> dict[str, tuple[str, dict]]:
        """Every job the page shows, by its label: both models at each batch, smallest first."""
        jobs = {}
        for b in BATCHES:
            for model, preset in (("moe", self.preset), ("dense", DENSE[self.preset])):
                jobs[f"{model}, batch {b}"] = ("experts_point", {
                    "preset": preset, "batch_size": b, "prompt_len": PROMPT_LEN,
                    "new_tokens": NEW_TOKENS})
        return jobs

    def expected_lines(self, label: str, kind: str, cached: Cached) -> list[str]:
        r = cached.result
        return [f"{label}: {r.experts_read:.1f} experts read, "
                f"{r.step_weight_bytes / MIB:.0f} MiB of weights, TPOT {sig(r.tpot_ms)} ms"]

    def start(self, fresh: bool = False) -> None:
        self.gpu_box.fetch(self.jobs)
        self.points.clear()
        self.chart.clear()
        self.table.object = self.verdict.object = ""
        cfg = EXPERT_PRESETS[self.preset]
        self.chart.param.update(experts=cfg.experts, top_k=cfg.top_k)
        self.shown = {label: Run(kind, params) for label, (kind, params)
                      in self.default_jobs().items()}
        self.runner.run([(run.kind, run.params, self._handler(run))
                         for run in self.shown.values()], use_cache=not fresh)

    def _handler(self, run: Run):
        def on_event(event):
            if event.type != "result":
                return
            run.done(event.result, event)
            self.show_point(point_of(event.result), bool(event.cached))
        return on_event

    @param.depends("preset", watch=True)
    def _settings_changed(self) -> None:
        if self.started:
            self.start()

    # ---- results ---------------------------------------------------------------------------
    def show_point(self, p: Point, cached: bool) -> None:
        self.points[p.model, p.batch] = p
        self.chart.set_point(p.model, p.batch, p.experts_read, p.expected,
                             p.weight_bytes / MIB, p.tpot_ms)
        what = (f"{p.experts_read:.1f} experts read per layer (uniform router "
                f"{p.expected:.1f}), " if p.model == "moe" else "")
        self.say(f"{'MoE' if p.model == 'moe' else 'Dense'} model at batch {p.batch} "
                 f"{'from the cache' if cached else 'measured'}: {what}"
                 f"{p.weight_bytes / MIB:.0f} MiB of weights a step, TPOT {sig(p.tpot_ms)} ms.")
        self._draw()

    def _draw(self) -> None:
        self.table.object = table_html(self.points)
        moe = {b: p for (m, b), p in self.points.items() if m == "moe"}
        dense = {b: p for (m, b), p in self.points.items() if m == "dense"}
        lines = []
        if moe:
            lo, hi = min(moe), max(moe)
            lines.append(f"- **Experts read:** {moe[lo].experts_read:.1f} per layer at batch "
                         f"{lo}, {moe[hi].experts_read:.1f} at batch {hi} (of "
                         f"{EXPERT_PRESETS[self.preset].experts}).")
        both = sorted(set(moe) & set(dense))
        if both:
            lo, hi = both[0], both[-1]
            for b in dict.fromkeys((lo, hi)):
                lines.append(f"- **Batch {b}:** the MoE step read "
                             f"{moe[b].weight_bytes / dense[b].weight_bytes:.2f}x the dense "
                             f"step's weight bytes and took {moe[b].tpot_ms / dense[b].tpot_ms:.2f}x "
                             f"its time ({sig(moe[b].tpot_ms)} ms against "
                             f"{sig(dense[b].tpot_ms)} ms).")
        if any(p.weights == "random" for p in self.points.values()):
            lines.append(f"\nPresets {self.preset} and {DENSE[self.preset]}: {RANDOM_WEIGHTS} "
                         "(which experts a token picks depends on the weights; the time of "
                         "reading them does not).")
        self.verdict.object = "\n".join(lines)
        self.chart.text.say(" ".join(line.removeprefix("- ").replace("**", "")
                                     for line in lines[:3]) or "No point measured yet.")
        top = BATCHES[-1]
        if top in moe and top in dense:
            self.prediction_box.reveal(*time_outcome(moe[top], dense[top]))
        question = half_read_question(moe, EXPERT_PRESETS[self.preset].experts)
        if question is not None:
            self.checkpoint.provide("read-half", question)

    # ---- the data, to download ---------------------------------------------------------------
    def download_rows(self) -> list[dict]:
        return [{"model": p.model, "batch": p.batch, "experts_read": p.experts_read,
                 "expected_uniform": p.expected, "step_weight_bytes": p.weight_bytes,
                 "tpot_ms": p.tpot_ms, "p10_ms": p.p10_ms, "p90_ms": p.p90_ms,
                 "tokens_per_s": p.tokens_per_s, "check": p.check}
                for _, p in sorted(self.points.items())]

    def download_header(self) -> dict:
        return runs_header(
            self, self.shown,
            columns="model (moe or dense), batch, experts_read (distinct experts per layer per "
                    "decode step, the mean), expected_uniform (E x (1 - (1 - k/E)^B)), "
                    "step_weight_bytes (everything but the experts, plus layers x experts read "
                    "x one expert's bytes; a dense model's: all its weights), tpot_ms (median "
                    "decode step), p10_ms and p90_ms (the steps' spread), tokens_per_s (batch / "
                    "TPOT), check (the disturbance check)")

    # ---- the page --------------------------------------------------------------------------
    def body(self) -> list:
        controls = pn.Row(
            pn.widgets.Select.from_param(self.param.preset, sizing_mode="stretch_width"),
            self.again, sizing_mode="stretch_width")
        return [html_pane(INTRO), self.prediction_box, html_pane(SETUP), controls,
                self.runner.status, self.verdict, self.chart, self.table, self.download,
                html_pane(READING), html_pane(QUOTE), self.gpu_box]
