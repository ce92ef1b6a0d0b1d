"""Lesson 5: Prefill versus decode, and the memory wall (roofline). /app?lesson=roofline

The machine's limits come from the engine's `info` job (memory-bandwidth, matmul and cache-
bandwidth micro-benchmarks). Decode steps at several batch sizes (`sweep_point`) and prefill
passes at several prompt lengths (`prefill_point`) of the chosen preset (mini by default, several
times the last-level cache) are placed under them, and beside them the tiny preset's decode steps,
whose weights stay in the cache: x = FLOPs / bytes moved, y = FLOPs / measured time, both from
the preset's shape (engine.calc.step_cost). Beside it, each decode step's time against its
bandwidth floor, and tiny's against both floors (engine.calc.cache_fit). The words are
lessons.words.roofline.

URL: preset, max_batch (decode batches 1, 2, 4, ... up to it), max_prompt (prompts of 16, 64,
256, ... tokens up to it), curve_points (that many more prompts spread evenly up to the preset's
context, for the prefill curve's quadratic fit, engine.calc.prefill_fit; 0 for none):
/app?lesson=roofline&preset=tiny&max_batch=4&max_prompt=64&curve_points=0

Its words are in lessons/words/roofline.py and what it says of its numbers in
lessons/roofline_findings.py; this module is its view.
"""

from __future__ import annotations

from dataclasses import dataclass

import panel as pn
import param

from engine.calc.cache_fit import fits_in_cache, floors
from engine.calc.prefill_fit import fit_lengths, fit_quadratic
from engine.calc.stats import estimate
from engine.calc.step_cost import decode_context, decode_cost
from engine.config import get_preset
from engine.lab.registry import get_spec
from engine.lab.results import InfoResult, PrefillPointResult, PresetShape, SweepPointResult
from widgets.data_download import DataDownload
from widgets.floor_chart import FloorChart
from widgets.html import html_pane
from widgets.job_status import RANDOM_WEIGHTS
from widgets.prefill_curve import PrefillCurve
from widgets.roofline_chart import RooflineChart
from widgets.tables import sig

from .base import LessonPage
from .data_record import Run, runs_header, spread_cell
from .machine_limits import roofs, show_limits
from .on_a_gpu import GpuBox
from .roofline_findings import (
    MIN_FIT_POINTS,
    curve_summary,
    gpu_finding,
    peak_share_outcome,
    roof_question,
)
from .teaching import Lookup
from .words.roofline import (
    CACHE_TEXT,
    CPU_NOTE,
    FLOOR_TEXT,
    INSTRUCTOR,
    INTRO,
    LIMITS_TEXT,
    OBJECTIVES,
    PREDICTION,
    PREFILL_CURVE_TEXT,
    QUESTIONS,
    ROOFLINE_TEXT,
    TAKEAWAY,
)

_SWEEP = get_spec("sweep_point").params  # decode steps at the sweep_point job's defaults
DECODE_PROMPT_LEN, DECODE_NEW_TOKENS = _SWEEP["prompt_len"].default, _SWEEP["new_tokens"].default
DECODE, PREFILL, CACHED = "decode step", "prefill pass", "decode step, tiny (fits in cache)"
IN_CACHE = "tiny"  # the preset drawn beside the chosen one: small enough to stay in the cache
IN_CACHE_MAX_BATCH = 4  # its decode steps at batch 1, 2, 4: enough to place it, and cheap

@dataclass(frozen=True)
class DecodeStep:
    """A measured decode step placed on the roofline: its bytes and intensity counted from the
    preset's shape (engine.calc.step_cost), the GFLOP/s it achieved, its bandwidth floor."""

    point: SweepPointResult
    bytes: float
    intensity: float
    achieved_gflops: float
    floor_ms: float

    @property
    def tpot_ms(self) -> float:
        return self.point.tpot_ms


def powers(start: int, factor: int, limit: int) -> list[int]:
    """start, start x factor, ... up to limit, and limit itself if it is not one of them."""
    out = []
    value = start
    while value <= limit:
        out.append(value)
        value *= factor
    if not out or out[-1] != limit:
        out.append(limit)
    return out


CURVE_POINTS = 6  # prefill lengths spread up to the context, beside the roofline's own


def job_label(kind: str, params: dict, preset: str | None = None) -> str:
    """A job of the page named as its charts name its point ("decode, batch 4"; "tiny decode,
    batch 4" for a preset other than the page's)."""
    if kind == "sweep_point":
        other = params.get("preset") not in (None, preset)
        return f"{params['preset'] + ' ' if other else ''}decode, batch {params['batch_size']}"
    if kind == "prefill_point":
        return f"prefill, {params['prompt_len']:,} tokens"
    return "machine limits"


class RooflineLesson(LessonPage):
    """Lesson 5: decode steps and prefill passes under this machine's two roofs."""

    slug = "roofline"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS

    preset = param.Selector(default="mini", objects=["mini", "small", "tiny"],
                            label="Model preset",
                            doc="mini: 130 MB of weights, several times a server CPU's last-level "
                                "cache (random weights: timing only); small: about GPT-2-small "
                                "size (random weights: timing only); tiny: the course's trained "
                                "model, small enough to stay in the cache.")
    max_batch = param.Integer(default=32, bounds=(1, 64), label="Largest decode batch",
                              doc="Decode steps are measured at batch 1, 2, 4, ... up to this.")
    max_prompt = param.Integer(default=1024, bounds=(16, 1024), label="Longest prompt (tokens)",
                               doc="Prefill passes are measured at 16, 64, 256, ... tokens up to "
                                   "this.")

    curve_points = param.Integer(default=CURVE_POINTS, bounds=(0, 8),
                                 label="Prefill lengths up to the context",
                                 doc="Extra prefill passes spread evenly up to the preset's "
                                     "context, for the quadratic fit (0: none).")

    def __init__(self, **params):
        super().__init__(**params)
        self.machine: InfoResult | None = None
        self.pending: list[SweepPointResult | PrefillPointResult] = []  # before the machine's info
        self.decode_results: dict[int, DecodeStep] = {}
        self.cached_results: dict[int, DecodeStep] = {}  # tiny's, beside another preset
        self.prefill_results: dict[int, PrefillPointResult] = {}
        self.chart = RooflineChart(series=[DECODE, PREFILL, CACHED])
        self.gpu_box = GpuBox(gpu_finding)  # this machine's row comes with the info job
        self.floor = FloorChart(x_label="batch size", y_label="time per decode step (ms)",
                                measured_label="measured TPOT",
                                floor_label="floor: bytes per step / bandwidth")
        self.limits = pn.pane.Markdown("Measuring this machine's limits...",
                                       sizing_mode="stretch_width", css_classes=["limits"])
        self.roof_summary = pn.pane.Markdown("", sizing_mode="stretch_width",
                                        css_classes=["roofline-summary"])
        self.floor_summary = pn.pane.Markdown("", sizing_mode="stretch_width",
                                              css_classes=["floor-summary"])
        self.cache_summary = pn.pane.Markdown("", sizing_mode="stretch_width",
                                              css_classes=["cache-summary"])
        self.shown: dict[str, Run] = {}  # every job the charts are drawn from, by its label
        self.download = DataDownload("roofline-points", self.chart.rows, self.download_header,
                                     "The roofline's points")
        self.floor_download = DataDownload("decode-step-floor", self.floor.rows,
                                           self.download_header, "The floor chart's points")
        self.curve = PrefillCurve()
        self.curve_summary = pn.pane.Markdown("", sizing_mode="stretch_width",
                                              css_classes=["prefill-curve-summary"])
        self.again = pn.widgets.Button(label="Measure again (not from the cache)")
        self.again.on_click(lambda _e: self.start(fresh=True))

    # ---- what to measure ---------------------------------------------------------------------------
    def batch_sizes(self) -> list[int]:
        return powers(1, 2, self.max_batch)

    def prompt_lens(self) -> list[int]:
        return powers(16, 4, self.max_prompt)

    def curve_lens(self) -> list[int]:
        """The prefill curve's extra lengths, up to the preset's context (the roofline's own
        prompt lengths are fitted too)."""
        if not self.curve_points:
            return []
        lengths = fit_lengths(get_preset(self.preset).context, self.curve_points)
        return [n for n in lengths if n not in self.prompt_lens()]

    def in_cache_batches(self) -> list[int]:
        """tiny's decode batches drawn beside another preset ([] when tiny is the preset)."""
        if self.preset == IN_CACHE:
            return []
        return [b for b in self.batch_sizes() if b <= IN_CACHE_MAX_BATCH]

    def job_params(self) -> list[tuple[str, dict]]:
        """(kind, params) of every job the current settings show, info first."""
        def decode(preset: str, b: int) -> tuple[str, dict]:
            return ("sweep_point", {"preset": preset, "batch_size": b,
                                    "prompt_len": DECODE_PROMPT_LEN,
                                    "new_tokens": DECODE_NEW_TOKENS})
        jobs: list[tuple[str, dict]] = [("info", {})]
        jobs += [decode(self.preset, b) for b in self.batch_sizes()]
        jobs += [("prefill_point", {"preset": self.preset, "prompt_len": n})
                 for n in self.prompt_lens() + self.curve_lens()]
        jobs += [decode(IN_CACHE, b) for b in self.in_cache_batches()]
        return jobs

    @classmethod
    def expected_numbers(cls, lookup: Lookup) -> list[str]:
        jobs = cls.warm_jobs()
        info = lookup(*jobs[0])
        lines = []
        if info is not None:
            i = info.result
            lines.append(f"This machine: {sig(i.memory_bandwidth_gbs)} GB/s, "
                         f"{sig(i.matmul_gflops)} GFLOP/s, ridge {sig(i.ridge_flop_per_byte)} "
                         "FLOP/byte")
        for kind, params in jobs[1:]:
            cached = lookup(kind, params)
            if cached is None:
                continue
            r = cached.result
            if kind == "sweep_point":
                lines.append(f"{r.preset} decode, batch {r.batch_size}: {r.tpot_ms:.2f} ms per "
                             "step")
            else:
                lines.append(f"prefill, {r.prompt_len:,} tokens: {sig(r.ms)} ms, "
                             f"{sig(r.achieved_gflops)} GFLOP/s")
        return lines

    @classmethod
    def warm_jobs(cls) -> list[tuple[str, dict]]:
        return cls().job_params()

    # ---- running -------------------------------------------------------------------------------------
    def start(self, fresh: bool = False) -> None:
        """Measure (or fetch from the cache) every point of the current settings."""
        self.pending = []
        self.decode_results.clear()
        self.cached_results.clear()
        self.prefill_results.clear()
        self.chart.clear()
        self.curve.set_points([])
        self.curve.set_fit(None)
        self.curve_summary.object = ""
        self.floor.clear()
        self.roof_summary.object = ""
        self.floor_summary.object = ""
        self.cache_summary.object = ""
        handlers = {"info": self.show_info, "sweep_point": self.show_decode,
                    "prefill_point": self.show_prefill}
        label = lambda kind, params: job_label(kind, params, self.preset)  # noqa: E731
        self.shown = {label(kind, params): Run(kind, params)
                      for kind, params in self.job_params()}
        jobs = [(kind, params, self._handler(handlers[kind], self.shown[label(kind, params)]))
                for kind, params in self.job_params()]
        self.runner.run(jobs, use_cache=not fresh)

    @staticmethod
    def _handler(show, run: Run):
        def on_event(event):
            if event.type == "result":
                run.done(event.result, event)
                show(event.result)
        return on_event

    @param.depends("preset", "max_batch", "max_prompt", "curve_points", watch=True)
    def _settings_changed(self) -> None:
        if self.started:
            self.start()

    # ---- results -------------------------------------------------------------------------------------
    def show_info(self, info: InfoResult) -> None:
        self.machine = info
        self.gpu_box.set_info(info.to_dict())
        shape = self.shape()
        line = show_limits(self.chart, info)
        self.chart.cache_gbs = info.cache_bandwidth_gbs
        if info.cache_bandwidth_gbs:
            llc = (f" ({info.llc_bytes / 2**20:.0f} MiB)" if info.llc_bytes else "")
            line += (f", last-level cache{llc} read bandwidth "
                     f"**{sig(info.cache_bandwidth_gbs)} GB/s**")
        self.limits.object = (
            line + ". "
            f"The ridge point, where the two roofs meet, is {sig(info.matmul_gflops)} / "
            f"{sig(info.memory_bandwidth_gbs)} = **{sig(info.ridge_flop_per_byte)} FLOP "
            "per byte**: a step doing fewer FLOPs per byte than that waits on memory."
            + (f"\n\nPreset **{self.preset}**: {shape.params / 1e6:.1f} M parameters in "
               f"{shape.dtype}, {shape.weight_bytes / 1e6:.1f} MB of weights"
               f"{' (' + RANDOM_WEIGHTS + ')' if shape.weights == 'random' else ''}."
               if shape else ""))
        pending, self.pending = self.pending, []
        for point in pending:
            (self.show_decode if isinstance(point, SweepPointResult) else self.show_prefill)(point)

    def shape(self, preset: str | None = None) -> PresetShape | None:
        """A preset's shape (the page's by default) from the machine's info (None before it
        has come)."""
        if self.machine is None:
            return None
        name = preset or self.preset
        return next((p for p in self.machine.presets if p.name == name), None)

    def show_decode(self, point: SweepPointResult) -> None:
        if self.machine is None:
            self.pending.append(point)
            return
        shape = {**self.shape(point.preset).to_dict(), "weight_bytes": point.weight_bytes}
        cost = decode_cost(shape, point.batch_size,
                           decode_context(point.prompt_len, point.new_tokens))
        step = DecodeStep(point, cost.bytes, cost.intensity,
                          cost.achieved_gflops(point.tpot_ms / 1000),
                          cost.floor_ms(self.machine.memory_bandwidth_gbs))
        steps = estimate(point.step_ms, 50) if point.step_ms else None  # the median's interval
        if point.preset != self.preset:
            self.cached_results[point.batch_size] = step
            self.chart.add_point(CACHED, f"{point.preset} decode, batch {point.batch_size}",
                                 step.intensity, step.achieved_gflops, point.tpot_ms, steps)
            self._summarize_cache()
            self.say(f"{point.preset} decode, batch {point.batch_size}, measured: "
                     f"{sig(point.tpot_ms)} ms per step, {sig(step.achieved_gflops)} GFLOP/s.")
            return
        self.decode_results[point.batch_size] = step
        self.chart.add_point(DECODE, f"decode, batch {point.batch_size}", step.intensity,
                             step.achieved_gflops, point.tpot_ms, steps)
        self.floor.add(point.batch_size, point.tpot_ms, step.floor_ms, steps)
        self._summarize()
        self.say(f"Decode, batch {point.batch_size}, measured: {sig(point.tpot_ms)} ms per step, "
                 f"{sig(step.achieved_gflops)} GFLOP/s, {sig(step.intensity)} FLOP per byte.")

    def show_prefill(self, point: PrefillPointResult) -> None:
        if self.machine is None:
            self.pending.append(point)
            return
        self.prefill_results[point.prompt_len] = point
        self.chart.add_point(PREFILL, f"prefill, {point.prompt_len:,} tokens",
                             point.intensity, point.achieved_gflops, point.ms,
                             estimate(point.ms_all, 50) if point.ms_all else None)
        self._summarize()
        self._fit_curve()
        self.say(f"Prefill of {point.prompt_len:,} tokens measured: {sig(point.ms)} ms, "
                 f"{sig(point.achieved_gflops)} GFLOP/s, {sig(point.intensity)} FLOP per byte.")

    def _fit_curve(self) -> None:
        """The prefill passes against their length, fitted once four lengths are in."""
        points = sorted((n, r.ms) for n, r in self.prefill_results.items())
        self.curve.set_points(points)
        fit = fit_quadratic(*zip(*points)) if len(points) >= MIN_FIT_POINTS else None
        self.curve.set_fit(fit)
        self.curve_summary.object = curve_summary(fit, points, self.shape())

    def _summarize(self) -> None:
        self._judge()
        self._summarize_cache()
        lines = []
        bw = self.machine.memory_bandwidth_gbs
        if self.decode_results:
            b = min(self.decode_results)
            r = self.decode_results[b]
            lines.append(
                f"- **Decode, batch {b}:** {sig(r.intensity)} FLOP/byte, "
                f"{sig(r.achieved_gflops)} GFLOP/s achieved; the memory roof there is "
                f"{sig(self.chart.roof_at(r.intensity))} GFLOP/s, the compute peak "
                f"{sig(self.machine.matmul_gflops)}. Most of the arithmetic units wait.")
            top = max(self.decode_results)
            if top != b:
                t = self.decode_results[top]
                lines.append(
                    f"- **Decode, batch {top}:** {sig(t.intensity)} FLOP/byte and "
                    f"{sig(t.achieved_gflops)} GFLOP/s: {t.achieved_gflops / r.achieved_gflops:.1f}x "
                    f"the work per second of batch {b}, for a step {t.tpot_ms / r.tpot_ms:.1f}x "
                    "as long.")
        if self.prefill_results:
            n = max(self.prefill_results)
            p = self.prefill_results[n]
            line = (f"- **Prefill, {n:,} tokens:** {sig(p.intensity)} FLOP/byte, "
                    f"{sig(p.achieved_gflops)} GFLOP/s achieved in {sig(p.ms)} ms")
            if self.decode_results:
                d = self.decode_results[min(self.decode_results)]
                line += (f": {p.achieved_gflops / d.achieved_gflops:.0f}x the FLOP/s of a "
                         f"batch-{min(self.decode_results)} decode step on the same weights")
            lines.append(line + ".")
        disturbed = self.disturbed_points()
        if disturbed:
            lines.append(f"- **Disturbed:** {', '.join(disturbed)}: other work took the engine's "
                         "core while it measured (the status line says how long), so these dots "
                         "may sit below where the engine alone would put them. Press Measure "
                         "again when the machine is quiet.")
        self.roof_summary.object = "\n".join(lines)
        if self.decode_results:
            b = min(self.decode_results)
            r = self.decode_results[b]
            weights = r.point.weight_bytes
            kv = r.bytes - weights
            self.floor_summary.object = (
                f"At batch {b} a decode step reads {weights / 1e6:.1f} MB of weights plus "
                f"{kv / 1e6:.2f} MB of cached keys and values = {r.bytes / 1e6:.1f} MB. "
                f"At {sig(bw)} GB/s that takes at least {r.bytes / 1e6:.1f} MB / {sig(bw)} GB/s "
                f"= **{sig(r.floor_ms)} ms**; the engine took **{sig(r.tpot_ms)} ms** "
                f"(the median of its timed steps, p10 to p90 {spread_cell(r.point)} ms; "
                f"{r.tpot_ms / r.floor_ms:.1f}x the floor). The rest is time the "
                "engine spends on other things than streaming weights: attention, small "
                "matrices that do not reach full speed, Python between the layers.")

    def _summarize_cache(self) -> None:
        """tiny's batch-1 step against both floors, beside the page's preset at batch 1."""
        if not self.cached_results or self.machine is None:
            return
        b = min(self.cached_results)
        r = self.cached_results[b]
        m = self.machine
        f = floors(r.bytes, r.tpot_ms, m.memory_bandwidth_gbs, m.cache_bandwidth_gbs)
        weights = r.point.weight_bytes
        fits = fits_in_cache(weights, m.llc_bytes)
        where = ("" if fits is None else
                 f" against a last-level cache of {m.llc_bytes / 1e6:.1f} MB: "
                 f"{'it fits' if fits else 'it does not fit'}")
        cache = ("" if f.cache_floor_ms is None else
                 f"; read at the cache's {sig(m.cache_bandwidth_gbs)} GB/s, "
                 f"**{sig(f.cache_floor_ms)} ms**")
        verdict = ("below the memory floor: its weights did not come from memory"
                   if f.beats_memory_floor else
                   "above the memory floor: on this machine now, its fixed per-step costs "
                   "outweigh what the cache saves")
        lines = [f"{r.point.preset} at batch {b}: {weights / 1e6:.1f} MB of weights{where}. "
                 f"Its step reads {r.bytes / 1e6:.1f} MB; read from memory at "
                 f"{sig(m.memory_bandwidth_gbs)} GB/s that is at least "
                 f"**{sig(f.memory_floor_ms)} ms**{cache}. The engine took "
                 f"**{sig(r.tpot_ms)} ms** ({f.over_memory_floor:.2f}x the memory floor): "
                 f"{verdict}."]
        if 1 in self.decode_results and b == 1:
            d = self.decode_results[1]
            lines.append(f"{self.preset} at batch 1 took {sig(d.tpot_ms)} ms, "
                         f"{d.tpot_ms / d.floor_ms:.2f}x its memory floor of "
                         f"{sig(d.floor_ms)} ms.")
        self.cache_summary.object = " ".join(lines)

    # ---- the data, to download ------------------------------------------------------------------------
    def download_header(self) -> dict:
        return runs_header(
            self, self.shown, roofs=roofs(self.machine),
            columns="roofline points: kind (decode step or prefill pass), label, intensity "
                    "(FLOP per byte moved), gflops (achieved GFLOP/s), ms (the step's time), "
                    "roof_share (achieved / the roof at that intensity). Floor points: x (batch "
                    "size), measured (ms per decode step), floor (bytes per step / the measured "
                    "bandwidth, ms), ratio (measured / floor). roofs: the machine's measured "
                    "limits")

    def disturbed_points(self) -> list[str]:
        """The points measured while other work took the engine's core, in words."""
        decode = [f"decode batch {b}" for b, r in sorted(self.decode_results.items())
                  if r.point.disturbed]
        decode += [f"{IN_CACHE} decode batch {b}" for b, r in sorted(self.cached_results.items())
                   if r.point.disturbed]
        prefill = [f"prefill {n:,} tokens" for n, p in sorted(self.prefill_results.items())
                   if p.disturbed]
        return decode + prefill

    # ---- the page ------------------------------------------------------------------------------------
    def controls(self) -> pn.viewable.Viewable:
        return pn.Row(
            pn.widgets.Select.from_param(self.param.preset, sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.max_batch, throttled=True,
                                            sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.max_prompt, step=16, throttled=True,
                                            sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.curve_points, throttled=True,
                                            sizing_mode="stretch_width"),
            self.again, sizing_mode="stretch_width")

    def _judge(self) -> None:
        """The prediction and the question on the reader's chart, from the smallest batch."""
        if not self.decode_results:
            return
        b = min(self.decode_results)
        r = self.decode_results[b]
        if b == 1:
            self.prediction_box.reveal(*peak_share_outcome(r.achieved_gflops,
                                                           self.machine.matmul_gflops))
        self.checkpoint.provide("roof", roof_question(r.intensity,
                                                      self.machine.ridge_flop_per_byte, b))

    def body(self) -> list:
        return [html_pane(INTRO), self.prediction_box,
                html_pane("<h2>This machine's two limits</h2>" + LIMITS_TEXT), self.limits,
                self.controls(), self.runner.status, html_pane(ROOFLINE_TEXT), self.chart,
                self.download, self.roof_summary, html_pane(FLOOR_TEXT), self.floor,
                self.floor_download, self.floor_summary, html_pane(PREFILL_CURVE_TEXT),
                self.curve, self.curve_summary, html_pane(CACHE_TEXT),
                self.cache_summary, html_pane(CPU_NOTE), self.gpu_box]

