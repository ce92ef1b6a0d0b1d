"""Lesson 11: Quantization. /app?lesson=quantization

Real runs of the engine's `int8_point` job: the same decode sweep point (128-token prompts, 32 new
tokens) with float32 weights and with weight-only int8 weights (one int8 number per weight, one
float32 scale per output row, engine/model/int8.py), at batch 1, 4 and 16. Each step is placed on
this machine's roofline (the `info` job's measured bandwidth and matmul peak, as in lesson 5):
int8 moves a step to the right (a quarter of the bytes for the same arithmetic), and whether it
also moves up, that is runs faster, is what the measurement says. The page explains the result
from the measured numbers: the bytes each step read, the bandwidth each reached against this
machine's, and so whether the step waited on memory or on the kernel's work per weight. Then the
`int8_quality` job: the trained tiny model with both weights on the corpus's held-out windows,
its loss and how often the two pick the same next token.

URL: preset: /app?lesson=quantization&preset=tiny

The lesson's words (prose, questions, instructor notes, quoted sources) are in
lessons/words/quantization.py; this module is its view.
"""

from __future__ import annotations

from dataclasses import dataclass

import panel as pn
import param

from engine.calc.gpu_savings import FORMATS as GPU_FORMATS
from engine.calc.gpu_savings import tpot_floor_ms, weight_bytes
from engine.calc.gpu_scaling import LLAMA_3_8B, Machine
from engine.lab.results import InfoResult, Int8PointResult, Int8QualityResult
from widgets.checkpoint import Choice, Question
from widgets.data_download import DataDownload
from widgets.html import html_pane
from widgets.job_status import RANDOM_WEIGHTS
from widgets.roofline_chart import RooflineChart
from widgets.tables import sig

from .base import LessonPage
from .data_record import Run, check_text, runs_header
from .machine_limits import roofs, show_limits
from .on_a_gpu import GpuBox, machine_table
from .teaching import Cached
from .words.quantization import (
    GPU_TEXT,
    INSTRUCTOR,
    INTRO,
    KERNEL,
    OBJECTIVES,
    PREDICTION,
    QUALITY_SETUP,
    QUESTIONS,
    QUOTE,
    SETUP,
    SPEED_CHOICES,
    TAKEAWAY,
)

BATCHES = (1, 4, 16)
FORMATS = ("fp32", "int8")
SERIES = {"fp32": "fp32 weights", "int8": "int8 weights"}
PROMPT_LEN, NEW_TOKENS = 128, 32
QUALITY = {"preset": "tiny", "windows": 58, "seq_len": 256}  # every held-out window
MEMORY_BOUND_SHARE = 0.6  # a step reaching this share of the measured bandwidth waits on memory


GPU_MODEL = LLAMA_3_8B


def gpu_finding(machines: list[Machine]) -> str:
    """Lesson 11's finding on each machine: Llama-3-8B's batch-1 TPOT floor with its weights in
    bf16, 8 bits and 4 bits (engine.calc.gpu_savings: weight bytes / bandwidth)."""
    table = machine_table(machines, tuple(
        (f"{fmt.name}: {weight_bytes(GPU_MODEL, fmt) / 1e9:.0f} GB of weights, TPOT at least (ms)",
         lambda m, fmt=fmt: sig(tpot_floor_ms(GPU_MODEL, fmt, m))) for fmt in GPU_FORMATS),
        f"{GPU_MODEL.name} at batch 1: the decode step's floor, bytes / bandwidth")
    return GPU_TEXT + table


@dataclass(frozen=True)
class Step:
    """One measured decode point in figures."""

    batch: int
    fmt: str
    tpot_ms: float
    p10_ms: float
    p90_ms: float
    bytes: int  # read per step: weights plus the mean KV cache (engine.calc.step_cost)
    weight_bytes: int
    gbs: float  # bytes / TPOT
    intensity: float  # FLOP per byte
    gflops: float
    check: str
    weights: str  # "trained" or "random"


def step_of(point: Int8PointResult) -> Step:
    return Step(batch=point.batch_size, fmt=point.weight_format, tpot_ms=point.tpot_ms,
                p10_ms=point.step_ms_p10, p90_ms=point.step_ms_p90, bytes=point.bytes_per_step,
                weight_bytes=point.weight_bytes, gbs=point.achieved_gbs,
                intensity=point.flops_per_step / point.bytes_per_step,
                gflops=point.flops_per_step / (point.tpot_ms / 1000) / 1e9,
                check=check_text(point), weights=point.weights)


def speed_outcome(fp32: Step, int8: Step) -> tuple[str, str]:
    """Which prediction choice one batch size's pair supports."""
    ratio = int8.tpot_ms / fp32.tpot_ms
    choice = (SPEED_CHOICES[0] if ratio <= 0.4 else SPEED_CHOICES[1] if ratio < 0.9
              else SPEED_CHOICES[2])
    return choice, (f"TPOT {sig(fp32.tpot_ms)} ms with float32 weights, {sig(int8.tpot_ms)} ms "
                    f"with int8: {ratio:.2f}x")


def best_batch_question(pairs: dict[int, tuple[Step, Step]]) -> Question | None:
    """At which batch int8 saved the most time per token (the key is the reader's runs)."""
    if set(pairs) != set(BATCHES):
        return None
    ratios = {b: i.tpot_ms / f.tpot_ms for b, (f, i) in pairs.items()}
    best = min(ratios, key=ratios.get)
    why = "Your runs, int8's TPOT against float32's: " + ", ".join(
        f"batch {b} {r:.2f}x" for b, r in sorted(ratios.items())) + "."
    return Question("In your runs, at which batch size did int8 weights save the largest share "
                    "of the time per token?", tuple(
                        Choice(f"Batch {b}", b == best, why) for b in BATCHES))


def bound_words(step: Step, bandwidth_gbs: float) -> str:
    """What a step waited for, judged by the share of the measured bandwidth it reached."""
    share = step.gbs / bandwidth_gbs
    if share >= MEMORY_BOUND_SHARE:
        return (f"{100 * share:.0f}% of the bandwidth: it moved bytes about as fast as memory "
                "delivers them, so it **waited on memory**")
    return (f"only {100 * share:.0f}% of the bandwidth: memory could have delivered its bytes "
            f"{1 / share:.1f} times as fast, so it **waited on work, not on memory**")


def explain(pair: tuple[Step, Step], bandwidth_gbs: float) -> str:
    """Why int8 did or did not turn its byte saving into speed at one batch size, from the
    measured bytes, times and this machine's bandwidth."""
    f, i = pair
    ratio = i.tpot_ms / f.tpot_ms
    floor_ms = i.bytes / bandwidth_gbs / 1e6
    lines = [
        f"At batch {f.batch}, the float32 step read **{f.bytes / 1e6:.1f} MB** (weights and "
        f"cached keys and values) in **{sig(f.tpot_ms)} ms**: {sig(f.gbs)} GB/s, "
        f"{bound_words(f, bandwidth_gbs)}.",
        f"The int8 step read **{i.bytes / 1e6:.1f} MB** ({i.bytes / f.bytes:.2f} of it) in "
        f"**{sig(i.tpot_ms)} ms**: {sig(i.gbs)} GB/s, {bound_words(i, bandwidth_gbs)}. "
        f"Reading its bytes alone would take {i.bytes / 1e6:.1f} MB / {sig(bandwidth_gbs)} GB/s "
        f"= {sig(floor_ms)} ms.",
    ]
    f_mem = f.gbs / bandwidth_gbs >= MEMORY_BOUND_SHARE
    i_mem = i.gbs / bandwidth_gbs >= MEMORY_BOUND_SHARE
    if ratio <= 0.4:
        verdict = ("The byte saving became speed: both steps waited on memory, and int8 had a "
                   "quarter of the bytes to wait for.")
    elif f_mem and not i_mem:
        took = ("about as long as float32's reading did" if ratio < 1.05 else
                "longer than float32's reading did") if ratio >= 0.9 else \
            "less time than float32's reading, but far more than its own bytes"
        verdict = (f"So int8 took {ratio:.2f}x float32's time: the bytes were saved, but the "
                   "step stopped waiting on memory and started waiting on the kernel's work "
                   "per weight (widening each byte to a float before the multiply-add), which "
                   f"took {took}.")
    elif not f_mem and ratio < 0.9:
        verdict = (f"So int8 took {ratio:.2f}x float32's time: the float32 step was not "
                   "waiting on memory either (its own arithmetic set its pace), and here the "
                   "int8 kernel got through the same sums sooner.")
    elif ratio < 0.9:
        verdict = (f"So int8 took {ratio:.2f}x float32's time: part of the byte saving "
                   "became speed, the rest went into the kernel's work per weight.")
    else:
        verdict = (f"So int8 took {ratio:.2f}x float32's time: with work, not the bytes, "
                   "setting the pace, a quarter of the bytes "
                   f"{'cost time' if ratio > 1.05 else 'bought nothing'}.")
    return " ".join(lines) + "\n\n" + verdict


def quality_words(q: Int8QualityResult) -> str:
    differ = 1 - q.agreement
    every = f", about one position in {1 / differ:,.0f}" if differ > 0 else ""
    return (f"Over **{q.positions:,}** held-out positions ({q.windows} windows of {q.seq_len} "
            f"tokens): loss **{q.loss_fp32:.6f}** with float32 weights, **{q.loss_int8:.6f}** "
            f"with int8 ({q.loss_int8 - q.loss_fp32:+.6f} nats); the two chose the same next "
            f"token at **{100 * q.agreement:.2f}%** of the positions (they differed at "
            f"{100 * differ:.2f}%{every}).")


def table_html(steps: dict[tuple[int, str], Step], bandwidth_gbs: float | None) -> str:
    body = []
    for b in BATCHES:
        for fmt in FORMATS:
            s = steps.get((b, fmt))
            if s is None:
                continue
            fp32 = steps.get((b, "fp32"))
            against = f"{s.tpot_ms / fp32.tpot_ms:.2f}x" if fp32 else "-"
            share = f"{100 * s.gbs / bandwidth_gbs:.0f}%" if bandwidth_gbs else "-"
            verdict = ("quiet" if s.check.startswith("quiet") else "DISTURBED"
                       if s.check.startswith("disturbed") else "not checked")
            body.append(
                f'<tr><th scope="row">{b}</th><td>{fmt}</td><td class="num">{sig(s.tpot_ms)}'
                f'</td><td class="num">{s.p10_ms:.2f}&ndash;{s.p90_ms:.2f}</td>'
                f'<td class="num">{s.bytes / 1e6:.1f}</td><td class="num">{sig(s.gbs)}</td>'
                f'<td class="num">{share}</td><td class="num">{against}</td><td>{verdict}</td>'
                "</tr>")
    heads = ("weights", "TPOT (ms)", "steps p10&ndash;p90 (ms)", "MB read per step",
             "achieved GB/s", "share of measured bandwidth", "TPOT against float32",
             "disturbance check")
    head = "".join(f'<th scope="col">{h}</th>' for h in heads)
    return (f'<table class="plain quant-table"><caption>Decode steps after {PROMPT_LEN}-token '
            f"prompts, {NEW_TOKENS} new tokens each</caption><thead><tr>"
            f'<th scope="col">batch</th>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            "</table>")


class QuantizationLesson(LessonPage):
    """Lesson 11: int8 weights against this CPU's float32; measured speed and quality."""

    slug = "quantization"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS

    preset = param.Selector(default="small", objects=["tiny", "small"], label="Model preset",
                            doc="small: about GPT-2-small size (random weights: timing only); "
                                "tiny: the course's trained model.")

    def __init__(self, **params):
        super().__init__(**params)
        self.machine: InfoResult | None = None
        self.steps: dict[tuple[int, str], Step] = {}
        self.quality: Int8QualityResult | None = None
        self.shown: dict[str, Run] = {}
        self.chart = RooflineChart(series=list(SERIES.values()))
        self.limits = pn.pane.Markdown("", sizing_mode="stretch_width", css_classes=["limits"])
        self.table = pn.pane.HTML("", sizing_mode="stretch_width")
        self.verdict = pn.pane.Markdown("", sizing_mode="stretch_width",
                                        css_classes=["quant-verdict"])
        self.why = pn.pane.Markdown("", sizing_mode="stretch_width", css_classes=["quant-why"])
        self.quality_pane = pn.pane.Markdown("", sizing_mode="stretch_width",
                                             css_classes=["quant-quality"])
        self.download = DataDownload("int8-decode-steps", self.download_rows,
                                     self.download_header, "The measured steps")
        self.again = pn.widgets.Button(label="Measure again (not from the cache)")
        self.again.on_click(lambda _e: self.start(fresh=True))
        self.gpu_box = GpuBox(gpu_finding)

    # ---- jobs ------------------------------------------------------------------------------
    def point_params(self, batch: int, fmt: str) -> dict:
        return {"preset": self.preset, "weight_format": fmt, "batch_size": batch,
                "prompt_len": PROMPT_LEN, "new_tokens": NEW_TOKENS}

    def default_jobs(self) -> dict[str, tuple[str, dict]]:
        """Every job the page shows, by its label: the machine, the six points (batch 1 first:
        the prediction's), the quality check."""
        jobs = {"machine": ("info", {})}
        for b in BATCHES:
            for fmt in FORMATS:
                jobs[f"{fmt}, batch {b}"] = ("int8_point", self.point_params(b, fmt))
        jobs["quality"] = ("int8_quality", dict(QUALITY))
        return jobs

    def expected_lines(self, label: str, kind: str, cached: Cached) -> list[str]:
        r = cached.result
        if kind == "info":
            return []
        if kind == "int8_point":
            return [f"{label}: TPOT {sig(r.tpot_ms)} ms, {r.bytes_per_step / 1e6:.1f} MB per "
                    f"step, {sig(r.achieved_gbs)} GB/s"]
        return [f"quality: loss {r.loss_fp32:.4f} float32, {r.loss_int8:.4f} int8, "
                f"{100 * r.agreement:.2f}% same next token"]

    def start(self, fresh: bool = False) -> None:
        self.machine, self.quality = None, None
        self.steps.clear()
        self.chart.clear()
        for pane in (self.table, self.verdict, self.why, self.quality_pane):
            pane.object = ""
        self.limits.object = "Measuring this machine's limits..."
        self.shown = {label: Run(kind, params) for label, (kind, params)
                      in self.default_jobs().items()}
        self.runner.run([(run.kind, run.params, self._handler(run))
                         for run in self.shown.values()], use_cache=not fresh)

    def _handler(self, run: Run):
        def on_event(event):
            if event.type != "result":
                return
            run.done(event.result, event)
            if run.kind == "info":
                self.show_machine(event.result)
            elif run.kind == "int8_point":
                self.show_step(step_of(event.result), bool(event.cached))
            else:
                self.show_quality(event.result, bool(event.cached))
        return on_event

    @param.depends("preset", watch=True)
    def _settings_changed(self) -> None:
        if self.started:
            self.start()

    # ---- results ---------------------------------------------------------------------------
    def pairs(self) -> dict[int, tuple[Step, Step]]:
        """(float32, int8) at each batch size where both have come."""
        return {b: (self.steps[b, "fp32"], self.steps[b, "int8"]) for b in BATCHES
                if (b, "fp32") in self.steps and (b, "int8") in self.steps}

    def show_machine(self, info: InfoResult) -> None:
        self.machine = info
        self.gpu_box.set_info(info.to_dict())
        self.limits.object = (show_limits(self.chart, info)
                              + ", measured by the engine as in lesson 5.")
        self._draw()

    def show_step(self, step: Step, cached: bool) -> None:
        self.steps[step.batch, step.fmt] = step
        self._draw()
        text = (f"{step.fmt} weights at batch {step.batch} "
                f"{'from the cache' if cached else 'measured'}: TPOT {sig(step.tpot_ms)} ms, "
                f"{sig(step.gbs)} GB/s")
        pair = self.pairs().get(step.batch)
        if pair is not None:
            text += f"; int8 took {pair[1].tpot_ms / pair[0].tpot_ms:.2f}x float32's time"
        self.say(text[0].upper() + text[1:] + ".")

    def show_quality(self, quality: Int8QualityResult, cached: bool) -> None:
        self.quality = quality
        self.quality_pane.object = quality_words(quality)
        self.say(f"Quality {'from the cache' if cached else 'measured'}: loss "
                 f"{quality.loss_fp32:.4f} with float32 weights, {quality.loss_int8:.4f} with "
                 f"int8; the same next token at {100 * quality.agreement:.2f}% of positions.")

    def _draw(self) -> None:
        bandwidth = self.machine.memory_bandwidth_gbs if self.machine else None
        self.table.object = table_html(self.steps, bandwidth)
        if self.machine is not None:
            self.chart.clear()
            for (b, fmt), s in sorted(self.steps.items()):
                self.chart.add_point(SERIES[fmt], f"{fmt}, batch {b}", s.intensity, s.gflops,
                                     s.tpot_ms)
        pairs = self.pairs()
        lines = []
        for b, (f, i) in pairs.items():
            lines.append(f"- **Batch {b}:** int8 took **{i.tpot_ms / f.tpot_ms:.2f}x** float32's "
                         f"time per token ({sig(f.tpot_ms)} ms against {sig(i.tpot_ms)} ms), "
                         f"reading {i.bytes / f.bytes:.2f} of its bytes.")
        if any(s.weights == "random" for s in self.steps.values()):
            lines.append(f"\nPreset {self.preset}: {RANDOM_WEIGHTS} (the time of a step does "
                         "not depend on what the weights are).")
        self.verdict.object = "\n".join(lines)
        if pairs and self.machine is not None:
            self.why.object = "\n\n".join(explain(pair, self.machine.memory_bandwidth_gbs)
                                          for pair in pairs.values())
        if 1 in pairs:
            self.prediction_box.reveal(*speed_outcome(*pairs[1]))
        question = best_batch_question(pairs)
        if question is not None:
            self.checkpoint.provide("best-batch", question)

    # ---- the data, to download ---------------------------------------------------------------
    def download_rows(self) -> list[dict]:
        bandwidth = self.machine.memory_bandwidth_gbs if self.machine else None
        return [{"batch": s.batch, "weights": s.fmt, "tpot_ms": s.tpot_ms, "p10_ms": s.p10_ms,
                 "p90_ms": s.p90_ms, "bytes_per_step": s.bytes, "weight_bytes": s.weight_bytes,
                 "achieved_gbs": s.gbs,
                 "bandwidth_share": s.gbs / bandwidth if bandwidth else None,
                 "intensity": s.intensity, "gflops": s.gflops, "check": s.check}
                for _, s in sorted(self.steps.items())]

    def download_header(self) -> dict:
        m, q = self.machine, self.quality
        return runs_header(
            self, self.shown,
            roofs=roofs(m),
            quality={} if q is None else q.to_dict(),
            columns="batch, weights (fp32 or int8), tpot_ms (median decode step), p10_ms and "
                    "p90_ms (the steps' spread), bytes_per_step (weights plus the mean KV cache "
                    "read), weight_bytes, achieved_gbs (bytes_per_step / TPOT), bandwidth_share "
                    "(achieved / the machine's measured bandwidth), intensity (FLOP per byte), "
                    "gflops (achieved), check (the disturbance check)")

    # ---- the page --------------------------------------------------------------------------
    def body(self) -> list:
        controls = pn.Row(
            pn.widgets.Select.from_param(self.param.preset, sizing_mode="stretch_width"),
            self.again, sizing_mode="stretch_width")
        return [html_pane(INTRO), self.prediction_box, html_pane(SETUP), controls, self.limits,
                self.runner.status, self.verdict, self.chart, self.table, self.download,
                html_pane("<h2>Why the bytes did or did not become speed</h2>"), self.why,
                html_pane(KERNEL), html_pane(QUALITY_SETUP), self.quality_pane,
                html_pane(QUOTE), self.gpu_box]
