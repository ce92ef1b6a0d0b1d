"""Lesson 5: Prefill versus decode, and the memory wall (roofline). /app?lesson=roofline

The machine's two limits come from the engine's `info` job (a memory-bandwidth and a matmul
micro-benchmark). Decode steps at several batch sizes (`sweep_point`, shared with lesson 4's
cache) and prefill passes at several prompt lengths (`prefill_point`) are placed under them:
x = FLOPs / bytes moved, y = FLOPs / measured time, both from the preset's shape
(engine.calc.step_cost). Beside it, each decode step's time against its bandwidth floor.

URL: preset, max_batch (decode batches 1, 2, 4, ... up to it), max_prompt (prompts of 16, 64,
256, ... tokens up to it): /app?lesson=roofline&preset=tiny&max_batch=4&max_prompt=64
"""

from __future__ import annotations

from dataclasses import dataclass

import panel as pn
import param

from engine.calc.step_cost import decode_context, decode_cost
from engine.lab.registry import get_spec
from engine.lab.results import InfoResult, PrefillPointResult, PresetShape, SweepPointResult
from widgets.checkpoint import Choice, Question
from widgets.data_download import DataDownload
from widgets.floor_chart import FloorChart
from widgets.job_status import RANDOM_WEIGHTS
from widgets.roofline_chart import RooflineChart
from widgets.tables import sig

from .base import LessonPage
from .data_record import Run, runs_header

_SWEEP = get_spec("sweep_point").params  # decode steps at the sweep_point job's defaults
DECODE_PROMPT_LEN, DECODE_NEW_TOKENS = _SWEEP["prompt_len"].default, _SWEEP["new_tokens"].default
DECODE, PREFILL = "decode step", "prefill pass"

INTRO = """
A model answers in two kinds of work. **Prefill** reads your whole prompt in one pass: every
weight matrix multiplies hundreds of token vectors at once. **Decode** then makes one token per
step: every weight matrix is read from memory again to multiply a single vector per sequence.

The same weights, the same machine, yet the two run into different walls. To see which, we need
this machine's two limits: how fast it can move bytes from memory, and how fast it can multiply.
"""

LIMITS_TEXT = """
Both limits are measured here by the engine, once per machine: **memory bandwidth** by summing a
1 GiB array (every byte read once), **compute peak** by multiplying two large square matrices.
"""

ROOFLINE_TEXT = """
### The roofline

A step does some number of floating-point operations (FLOPs) and moves some number of bytes.
Their ratio, **arithmetic intensity** = FLOPs / bytes, decides which limit binds:

- a step can go no faster than **bandwidth x intensity** FLOP/s (the slanted roof: memory is
  the bottleneck),
- nor faster than the **compute peak** (the flat roof).

For a decode step at batch B on a model of P parameters, each weight does about 2 FLOPs per
sequence (a multiply and an add), and every weight is read once:
**intensity ≈ 2·B·P FLOPs / (P × bytes per weight + KV cache bytes)**. In 32-bit floats that is
about B/2: one sequence gets half a FLOP per byte, far left of the ridge. A prefill pass of L
tokens reuses each weight L times, so its intensity is about L/2: far to the right.

The points below are the engine's own steps: FLOPs and bytes counted from the preset's shape
(the formulas are in the engine's `step_cost` module), divided by the time the step really took.
"""

FLOOR_TEXT = """
### The floor under every token

A decode step cannot finish before it has read its bytes, so
**TPOT ≥ bytes moved per step / memory bandwidth**. The dashed line is that floor for each batch
size, computed from the measured bandwidth; the solid line is the engine's measured time per
decode step. Batching adds little to the bytes (only each sequence's cached keys and values), so
the floor barely rises while the tokens per step multiply.
"""

CPU_NOTE = """
*On this CPU the presets run in 32-bit floats: it has no fast 16-bit (bf16) arithmetic, so a
16-bit model would be slower here, not faster. On a GPU the engine uses bf16 (2 bytes per
weight), which halves the bytes of every step.*
"""


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


def job_label(kind: str, params: dict) -> str:
    """A job of the page named as its charts name its point ("decode, batch 4")."""
    if kind == "sweep_point":
        return f"decode, batch {params['batch_size']}"
    if kind == "prefill_point":
        return f"prefill, {params['prompt_len']:,} tokens"
    return "machine limits"


class RooflineLesson(LessonPage):
    """Lesson 5: decode steps and prefill passes under this machine's two roofs."""

    slug = "roofline"

    preset = param.Selector(default="small", objects=["tiny", "small"], label="Model preset",
                            doc="small: about GPT-2-small size (random weights: timing only); "
                                "tiny: the course's trained model.")
    max_batch = param.Integer(default=32, bounds=(1, 64), label="Largest decode batch",
                              doc="Decode steps are measured at batch 1, 2, 4, ... up to this.")
    max_prompt = param.Integer(default=1024, bounds=(16, 1024), label="Longest prompt (tokens)",
                               doc="Prefill passes are measured at 16, 64, 256, ... tokens up to "
                                   "this.")

    def __init__(self, **params):
        super().__init__(**params)
        self.machine: InfoResult | None = None
        self.pending: list[SweepPointResult | PrefillPointResult] = []  # before the machine's info
        self.decode_results: dict[int, DecodeStep] = {}
        self.prefill_results: dict[int, PrefillPointResult] = {}
        self.chart = RooflineChart(series=[DECODE, PREFILL])
        self.floor = FloorChart(x_label="batch size", y_label="time per decode step (ms)",
                                measured_label="measured TPOT",
                                floor_label="floor: bytes per step / bandwidth")
        self.limits = pn.pane.Markdown("Measuring this machine's limits...",
                                       sizing_mode="stretch_width", css_classes=["limits"])
        self.roof_summary = pn.pane.Markdown("", sizing_mode="stretch_width",
                                        css_classes=["roofline-summary"])
        self.floor_summary = pn.pane.Markdown("", sizing_mode="stretch_width",
                                              css_classes=["floor-summary"])
        self.shown: dict[str, Run] = {}  # every job the charts are drawn from, by its label
        self.download = DataDownload("roofline-points", self.chart.rows, self.download_header,
                                     "The roofline's points")
        self.floor_download = DataDownload("decode-step-floor", self.floor.rows,
                                           self.download_header, "The floor chart's points")
        self.again = pn.widgets.Button(label="Measure again (not from the cache)")
        self.again.on_click(lambda _e: self.start(fresh=True))

    # ---- what to measure ---------------------------------------------------------------------------
    def batch_sizes(self) -> list[int]:
        return powers(1, 2, self.max_batch)

    def prompt_lens(self) -> list[int]:
        return powers(16, 4, self.max_prompt)

    def job_params(self) -> list[tuple[str, dict]]:
        """(kind, params) of every job the current settings show, info first."""
        jobs: list[tuple[str, dict]] = [("info", {})]
        jobs += [("sweep_point", {"preset": self.preset, "batch_size": b,
                                  "prompt_len": DECODE_PROMPT_LEN,
                                  "new_tokens": DECODE_NEW_TOKENS})
                 for b in self.batch_sizes()]
        jobs += [("prefill_point", {"preset": self.preset, "prompt_len": n})
                 for n in self.prompt_lens()]
        return jobs

    @classmethod
    def warm_jobs(cls) -> list[tuple[str, dict]]:
        return cls().job_params()

    # ---- running -------------------------------------------------------------------------------------
    def start(self, fresh: bool = False) -> None:
        """Measure (or fetch from the cache) every point of the current settings."""
        self.pending = []
        self.decode_results.clear()
        self.prefill_results.clear()
        self.chart.clear()
        self.floor.clear()
        self.roof_summary.object = ""
        self.floor_summary.object = ""
        handlers = {"info": self.show_info, "sweep_point": self.show_decode,
                    "prefill_point": self.show_prefill}
        self.shown = {job_label(kind, params): Run(kind, params)
                      for kind, params in self.job_params()}
        jobs = [(kind, params, self._handler(handlers[kind], self.shown[job_label(kind, params)]))
                for kind, params in self.job_params()]
        self.runner.run(jobs, use_cache=not fresh)

    @staticmethod
    def _handler(show, run: Run):
        def on_event(event):
            if event.type == "result":
                run.done(event.result, event)
                show(event.result)
        return on_event

    @param.depends("preset", "max_batch", "max_prompt", watch=True)
    def _settings_changed(self) -> None:
        if self.started:
            self.start()

    # ---- results -------------------------------------------------------------------------------------
    def show_info(self, info: InfoResult) -> None:
        self.machine = info
        self.chart.set_limits(info.memory_bandwidth_gbs, info.matmul_gflops)
        shape = self.shape()
        self.limits.object = (
            f"**This machine** ({info.device_name}, {info.threads} threads): memory "
            f"bandwidth **{sig(info.memory_bandwidth_gbs)} GB/s**, compute peak "
            f"**{sig(info.matmul_gflops)} GFLOP/s** ({info.matmul_dtype} matrix multiply). "
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

    def shape(self) -> PresetShape | None:
        """The preset's shape from the machine's info (None before it has come)."""
        if self.machine is None:
            return None
        return next((p for p in self.machine.presets if p.name == self.preset), None)

    def show_decode(self, point: SweepPointResult) -> None:
        if self.machine is None:
            self.pending.append(point)
            return
        shape = {**self.shape().to_dict(), "weight_bytes": point.weight_bytes}
        cost = decode_cost(shape, point.batch_size,
                           decode_context(point.prompt_len, point.new_tokens))
        step = DecodeStep(point, cost.bytes, cost.intensity,
                          cost.achieved_gflops(point.tpot_ms / 1000),
                          cost.floor_ms(self.machine.memory_bandwidth_gbs))
        self.decode_results[point.batch_size] = step
        self.chart.add_point(DECODE, f"decode, batch {point.batch_size}", step.intensity,
                             step.achieved_gflops, point.tpot_ms)
        self.floor.add(point.batch_size, point.tpot_ms, step.floor_ms)
        self._summarize()
        self.say(f"Decode, batch {point.batch_size}, measured: {sig(point.tpot_ms)} ms per step, "
                 f"{sig(step.achieved_gflops)} GFLOP/s, {sig(step.intensity)} FLOP per byte.")

    def show_prefill(self, point: PrefillPointResult) -> None:
        if self.machine is None:
            self.pending.append(point)
            return
        self.prefill_results[point.prompt_len] = point
        self.chart.add_point(PREFILL, f"prefill, {point.prompt_len:,} tokens",
                             point.intensity, point.achieved_gflops, point.ms)
        self._summarize()
        self.say(f"Prefill of {point.prompt_len:,} tokens measured: {sig(point.ms)} ms, "
                 f"{sig(point.achieved_gflops)} GFLOP/s, {sig(point.intensity)} FLOP per byte.")

    def _summarize(self) -> None:
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
                f"({r.tpot_ms / r.floor_ms:.1f}x the floor). The rest is time the "
                "engine spends on other things than streaming weights: attention, small "
                "matrices that do not reach full speed, Python between the layers.")

    # ---- the data, to download ------------------------------------------------------------------------
    def download_header(self) -> dict:
        m = self.machine
        return runs_header(
            self, self.shown,
            roofs={} if m is None else {"memory_bandwidth_gbs": m.memory_bandwidth_gbs,
                                        "matmul_gflops": m.matmul_gflops,
                                        "ridge_flop_per_byte": m.ridge_flop_per_byte},
            columns="roofline points: kind (decode step or prefill pass), label, intensity "
                    "(FLOP per byte moved), gflops (achieved GFLOP/s), ms (the step's time), "
                    "roof_share (achieved / the roof at that intensity). Floor points: x (batch "
                    "size), measured (ms per decode step), floor (bytes per step / the measured "
                    "bandwidth, ms), ratio (measured / floor). roofs: the machine's measured "
                    "limits")

    # ---- the page ------------------------------------------------------------------------------------
    def controls(self) -> pn.viewable.Viewable:
        return pn.Row(
            pn.widgets.Select.from_param(self.param.preset, sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.max_batch, throttled=True,
                                            sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.max_prompt, step=16, throttled=True,
                                            sizing_mode="stretch_width"),
            self.again, sizing_mode="stretch_width")

    def body(self) -> list:
        md = lambda text: pn.pane.Markdown(text, sizing_mode="stretch_width")  # noqa: E731
        return [md(INTRO), md(LIMITS_TEXT), self.limits, self.controls(), self.runner.status,
                md(ROOFLINE_TEXT), self.chart, self.download, self.roof_summary, md(FLOOR_TEXT), self.floor,
                self.floor_download, self.floor_summary, md(CPU_NOTE)]

    def questions(self) -> list:
        return [
            Question("Why does serving one request at a time waste the machine during decode?", (
                Choice("Each step reads every weight from memory to do about two operations per "
                       "weight, so the arithmetic units mostly wait for memory.", True,
                       "Half a FLOP per byte (in 32-bit floats) sits far left of the ridge "
                       "point: the step is bound by bandwidth, and the compute peak is unused."),
                Choice("The processor runs out of arithmetic units for one sequence.", False,
                       "It has far more than one sequence needs; the point sits far below the "
                       "flat roof."),
                Choice("The KV cache of one sequence is larger than the weights.", False,
                       "For short sequences the cache is small beside the weights; the weights "
                       "are what every step reads."))),
            Question("Going from batch 1 to batch 8, where does a decode step move on the "
                     "roofline?", (
                Choice("Right and up: about 8 times the FLOPs for nearly the same bytes.", True,
                       "The weights are read once for all eight sequences, so intensity and "
                       "achieved FLOP/s both rise until the step meets a roof."),
                Choice("Left and down: more sequences mean more bytes per FLOP.", False,
                       "Only each sequence's cached keys and values are extra bytes; the weights, "
                       "the bulk, are shared."),
                Choice("Nowhere: batching changes the time, not the intensity.", False,
                       "Intensity is FLOPs per byte; batching multiplies the FLOPs while the "
                       "bytes barely grow."))),
            Question("A model has 2 GB of weights and runs on a GPU with 1 TB/s of memory "
                     "bandwidth. What is the least TPOT it can reach at batch 1?", (
                Choice("About 2 ms: every step reads 2 GB at 1 TB/s.", True,
                       "TPOT >= bytes per step / bandwidth = 2 GB / 1000 GB/s = 2 ms, before "
                       "counting the KV cache."),
                Choice("About 0.002 ms, because a GPU is fast.", False,
                       "Speed of arithmetic does not help: the step waits for the bytes."),
                Choice("It depends only on the GPU's FLOP/s.", False,
                       "At batch 1 decode is bound by memory bandwidth, not by FLOP/s."))),
            Question("Which of the two is compute-bound on this machine?", (
                Choice("A prefill pass over a long prompt.", True,
                       "Each weight multiplies every prompt token, so the intensity is in the "
                       "hundreds of FLOPs per byte, right of the ridge point."),
                Choice("A decode step at batch 1.", False,
                       "It does about half a FLOP per byte: memory-bound."),
                Choice("Both equally.", False,
                       "Their intensities differ by a factor of hundreds; the chart shows them "
                       "on either side of the ridge."))),
        ]
