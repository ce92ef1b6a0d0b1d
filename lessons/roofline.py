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

from engine.calc.gpu_scaling import (
    A100,
    H100,
    LLAMA_3_8B,
    Machine,
    compute_bound_prompt,
    decode_step,
    prefill_floor_ms,
    step_floor_ms,
)
from engine.calc.stats import estimate
from engine.calc.step_cost import decode_context, decode_cost
from engine.lab.registry import get_spec
from engine.lab.results import InfoResult, PrefillPointResult, PresetShape, SweepPointResult
from widgets.checkpoint import Choice, MeasuredQuestion, Question
from widgets.data_download import DataDownload
from widgets.floor_chart import FloorChart
from widgets.html import html_pane
from widgets.job_status import RANDOM_WEIGHTS
from widgets.prediction import PredictionQuestion
from widgets.roofline_chart import RooflineChart
from widgets.tables import sig

from .base import LessonPage
from .data_record import Run, runs_header, spread_cell
from .machine_limits import roofs, show_limits
from .on_a_gpu import GpuBox, machine_table
from .teaching import InstructorNotes, Lookup, check_takeaway

_SWEEP = get_spec("sweep_point").params  # decode steps at the sweep_point job's defaults
DECODE_PROMPT_LEN, DECODE_NEW_TOKENS = _SWEEP["prompt_len"].default, _SWEEP["new_tokens"].default
DECODE, PREFILL = "decode step", "prefill pass"

INTRO = """
<p>A model answers in two kinds of work. <strong>Prefill</strong> reads your whole prompt in one
pass: every weight matrix multiplies hundreds of token vectors at once. <strong>Decode</strong>
then makes one token per step: every weight matrix is read from memory again to multiply a
single vector per sequence.</p>
<p>The same weights, the same machine, yet the two run into different walls. To see which, we
need this machine's two limits: how fast it can move bytes from memory, and how fast it can
multiply.</p>
"""

LIMITS_TEXT = """
<p>Both limits are measured here by the engine, once per machine: <strong>memory
bandwidth</strong> by summing a 1 GiB array (every byte read once), <strong>compute
peak</strong> by multiplying two large square matrices.</p>
"""

# Prompt length below which a bf16 prefill is memory-bound on each datasheet GPU, to the nearest 50.
A100_PROMPT, H100_PROMPT = (round(compute_bound_prompt(LLAMA_3_8B, gpu) / 50) * 50
                             for gpu in (A100, H100))

ROOFLINE_TEXT = f"""
<h2>The roofline</h2>
<p>A step does some number of floating-point operations (FLOPs) and moves some number of bytes.
Their ratio, <a href="app?page=vocabulary#arithmetic-intensity">arithmetic intensity</a> =
FLOPs / bytes, decides which limit binds:</p>
<ul>
<li>a step can go no faster than <strong>bandwidth &times; intensity</strong> FLOP/s (the
slanted roof: memory is the bottleneck),</li>
<li>nor faster than the <strong>compute peak</strong> (the flat roof).</li>
</ul>
<p>The roofs meet at the <a href="app?page=vocabulary#ridge-point">ridge point</a>, peak /
bandwidth. For a decode step at batch B on a model of P parameters, each weight does about 2
FLOPs per sequence (a multiply and an add), and every weight is read once: <strong>intensity
&asymp; 2&middot;B&middot;P FLOPs / (P &times; bytes per weight + KV cache bytes)</strong>. In
32-bit floats that is about B/2: one sequence gets half a FLOP per byte, far left of the ridge.
The KV cache bytes are each sequence's own, so they grow with B and keep the intensity from
growing quite as fast as the batch. A prefill pass of L tokens reuses each weight L times, so
its intensity is about L/2 here: long prompts sit far to the right. A short prompt does not:
below the ridge it is memory-bound too. On a GPU, whose ridge is much further right (see the
box below), that takes in more prompts: in bf16 a prefill of L tokens does about L FLOPs per byte
of weights, so it stays memory-bound up to about {A100_PROMPT} tokens on an A100 and
{H100_PROMPT} on an H100 (their ridge points from the datasheets).</p>
<p>The points below are the engine's own steps: FLOPs and bytes counted from the preset's shape
(the formulas are in the engine's <code>step_cost</code> module), divided by the time the step
really took.</p>
"""

FLOOR_TEXT = """
<h2>The floor under every token</h2>
<p>A decode step cannot finish before it has read its bytes, so <strong>TPOT &ge; bytes moved
per step / memory bandwidth</strong>. The dashed line is that floor for each batch size,
computed from the measured bandwidth; the solid line is the engine's measured time per decode
step (the median of its timed steps; the whiskers, that median's 95% interval, and the table
beside gives how many steps were timed). Batching adds few bytes (each sequence's own cached keys and values), so the floor rises
slowly while the tokens per step multiply.</p>
"""

CPU_NOTE = """
<p><em>On this CPU the presets run in 32-bit floats: it has no fast 16-bit (bf16) arithmetic,
so a 16-bit model would be slower here, not faster. On a GPU the engine uses bf16 (2 bytes per
weight), which halves the bytes of every step.</em></p>
"""

OBJECTIVES = (
    "place a step on this machine's roofline from its FLOPs, its bytes and its time",
    "say why decode at a small batch is memory-bound and a long prefill compute-bound",
    "work out the least time a decode step can take from the bytes it reads",
)

PREDICTION = PredictionQuestion(
    "A decode step at batch 1: what share of this machine's measured compute peak will it "
    "reach?",
    ("Under 10%", "10% to 50%", "Over 50%"))

TAKEAWAY = check_takeaway((
    "Every step is held by one of two limits, memory bandwidth or the compute peak; its "
    "arithmetic intensity (FLOPs per byte) says which.",
    "Decode at a small batch does a FLOP or two per byte of weights read: far left of the "
    "ridge, memory-bound, its time floored by bytes / bandwidth.",
    "Long prefills, and decode at large enough batches, move right toward the compute roof; "
    "short prompts stay memory-bound on a GPU.",
))

INSTRUCTOR = InstructorNotes(
    minutes=20,
    timing="The page measures the machine once, then decode at 6 batch sizes and prefill at 4 "
           "prompt lengths of the small preset, a dozen jobs in a row when nothing is cached; "
           "warm it before class and it shows them at once.",
    misconceptions=(
        "\"More FLOP/s makes batch-1 decode faster\": memory bandwidth does; the arithmetic "
        "units mostly wait.",
        "\"Decode is slow because attention is quadratic\": at short contexts the weight "
        "read dominates each step.",
        "\"Prefill is always compute-bound\": a short prompt sits left of the ridge, "
        "especially on a GPU.",
    ),
    prompts=(
        "Where would a batch-1 step of an 8B model in bf16 sit on an H100's roofline?",
        "Why does the measured TPOT sit above the bandwidth floor, and by how much here?",
        "What would 8-bit weights do to a decode point's intensity and to its floor?",
    ),
)

QUESTIONS = (
    Question("Why does serving one request at a time waste the machine during decode?", (
        Choice("Each step reads every weight to do about two FLOPs with it", True,
               "Half a FLOP per byte (in 32-bit floats) sits far left of the ridge point: the "
               "step is bound by bandwidth, and the compute peak goes unused."),
        Choice("One sequence needs more arithmetic units than the chip has", False,
               "It uses a small share of them; the point sits far below the flat roof."),
        Choice("One sequence's KV cache is larger than all of the weights", False,
               "For short sequences the cache is small beside the weights; the weights are what "
               "every step reads."))),
    Question("Going from batch 1 to batch 8, where does a decode step move on the roofline?", (
        Choice("Right and up: about 8 times the FLOPs for a few more bytes", True,
               "The weights are read once for all eight sequences, so intensity and achieved "
               "FLOP/s both rise until the step meets a roof."),
        Choice("Left and down: eight sequences mean more bytes per FLOP", False,
               "Only each sequence's cached keys and values are extra bytes; the weights, the "
               "bulk, are shared."),
        Choice("Straight up: the same intensity, done eight times as fast", False,
               "Intensity is FLOPs per byte; batching multiplies the FLOPs while the bytes "
               "barely grow, so the point moves right."))),
    Question("2 GB of weights, 1 TB/s of memory bandwidth: what is the least TPOT at batch 1?", (
        Choice("About 2 ms: each step reads all 2 GB at 1 TB/s", True,
               "TPOT >= bytes per step / bandwidth = 2 GB / 1000 GB/s = 2 ms, before counting "
               "the KV cache."),
        Choice("About 0.002 ms: the chip does trillions of FLOPs a second", False,
               "Fast arithmetic does not help: the step waits for the bytes."),
        Choice("About 20 ms: the weights are read once per layer and token", False,
               "Each weight belongs to one layer and is read once per step: 2 GB per step in "
               "all."))),
    Question("Which of these is compute-bound on this machine?", (
        Choice("A prefill pass over a prompt of a thousand tokens", True,
               "Each weight multiplies every prompt token, so the intensity is in the hundreds "
               "of FLOPs per byte, right of the ridge point."),
        Choice("A decode step for a single sequence", False,
               "It does about half a FLOP per byte: memory-bound."),
        Choice("Both: they multiply the same weights, so they sit at the same place", False,
               "Their intensities differ by a factor of hundreds; the chart shows them on "
               "either side of the ridge."))),
    MeasuredQuestion("roof", "Once the decode steps above are measured, a question on your "
                             "own chart appears here."),
)


GPU_MODEL = LLAMA_3_8B
GPU_CONTEXT = 1000  # tokens cached


def gpu_finding(machines: list[Machine]) -> str:
    """Lesson 5's finding on each machine: how far left of the ridge batch-1 decode sits."""
    one = decode_step(GPU_MODEL, 1, GPU_CONTEXT)
    table = machine_table(machines, (
        ("batch-1 decode, share of the peak it can use at most",
         lambda m: f"{100 * min(1.0, one.intensity / m.ridge):.2g}%"),
        ("prefill of 1,000 tokens, at least (ms)",
         lambda m: sig(prefill_floor_ms(GPU_MODEL, m, 1000))),
        ("TPOT at batch 1, at least (ms)", lambda m: sig(step_floor_ms(one, m))),
    ), f"{GPU_MODEL.name} in bf16, {GPU_CONTEXT:,} tokens cached")
    return (
        f"<p>In bf16 a batch-1 decode step of {GPU_MODEL.name} does {sig(one.intensity)} FLOP "
        "per byte (here the presets run in 32-bit floats: half a FLOP per byte). A GPU's ridge "
        "sits much further right than this machine's, so the same step uses an even smaller "
        "share of a GPU's arithmetic: at most intensity / ridge of its peak. Memory bandwidth, "
        "not FLOP/s, sets its speed; prefill over a long prompt is where a GPU's peak "
        "pays.</p>" + table)


def roof_question(intensity: float, ridge: float, batch: int) -> Question:
    """Which limit held the reader's own decode step (the key is from their measurement)."""
    side = "left" if intensity < ridge else "right"
    why = (f"Your decode step at batch {batch}: {sig(intensity)} FLOP/byte; this machine's ridge "
           f"is {sig(ridge)} FLOP/byte, so the step sits {side} of it.")
    memory = Choice("Memory bandwidth: it sits left of the ridge", side == "left", why)
    compute = Choice("The compute peak: it sits right of the ridge", side == "right", why)
    neither = Choice("Neither: at that batch both limits are gone", False,
                     why + " A step always sits under one of the two roofs.")
    return Question(f"Your decode step at batch {batch} ({sig(intensity)} FLOP/byte): which "
                    "limit holds it on this machine?", (memory, compute, neither))


def peak_share_outcome(achieved_gflops: float, peak_gflops: float) -> tuple[str, str]:
    """Which prediction choice a batch-1 decode step supports."""
    share = achieved_gflops / peak_gflops
    choice = "Under 10%" if share < 0.1 else "10% to 50%" if share <= 0.5 else "Over 50%"
    return choice, (f"{sig(achieved_gflops)} GFLOP/s of a {sig(peak_gflops)} GFLOP/s peak: "
                    f"{100 * share:.0f}%")


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
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS

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
                lines.append(f"decode, batch {r.batch_size}: {r.tpot_ms:.2f} ms per step")
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
        self.gpu_box.set_info(info.to_dict())
        shape = self.shape()
        self.limits.object = (
            show_limits(self.chart, info) + ". "
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
        steps = estimate(point.step_ms, 50) if point.step_ms else None  # the median's interval
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
        self.say(f"Prefill of {point.prompt_len:,} tokens measured: {sig(point.ms)} ms, "
                 f"{sig(point.achieved_gflops)} GFLOP/s, {sig(point.intensity)} FLOP per byte.")

    def _summarize(self) -> None:
        self._judge()
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
                self.floor_download, self.floor_summary, html_pane(CPU_NOTE), self.gpu_box]

