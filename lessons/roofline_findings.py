"""What the roofline lesson (lessons/roofline.py) says of its measurements: which prediction a
batch-1 step supports, the reader's own question on which roof holds their step, the prefill
curve's fit in words, and the "On a GPU" box's finding.
"""

from __future__ import annotations

from engine.calc.gpu_scaling import (
    LLAMA_3_8B,
    Machine,
    decode_step,
    prefill_floor_ms,
    step_floor_ms,
)
from engine.calc.prefill_fit import QuadraticFit, attention_crossover
from engine.lab.results import PresetShape
from widgets.checkpoint import Choice, Question
from widgets.tables import sig

from .on_a_gpu import machine_table

MIN_FIT_POINTS = 4  # a, b, c and one degree of freedom for their intervals

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


def _interval(c, scale: float, unit: str) -> str:
    if c.low is None:
        return f"{sig(c.value * scale)} {unit}"
    return f"{sig(c.value * scale)} {unit} [{sig(c.low * scale)}, {sig(c.high * scale)}]"


def curve_summary(fit: QuadraticFit | None, points: list[tuple[int, float]],
                  shape: PresetShape | None) -> str:
    """The fit in words: its terms with their 95% intervals, the attention term's share at the
    longest prompt, the measured crossover b / c, and the FLOP count's crossover L*."""
    if fit is None:
        return (f"{len(points)} of at least {MIN_FIT_POINTS} prompt lengths measured; the fit "
                "comes with the fourth.")
    top = max(n for n, _ in points)
    lines = [f"- **Fit over {fit.points} prompt lengths** (95% intervals): a = "
             f"{_interval(fit.a, 1, 'ms')}, b = {_interval(fit.b, 1000, 'µs per token')}, "
             f"c = {_interval(fit.c, 1e6, 'ns per token²')}; R² = {fit.r_squared:.3f}.",
             f"- **At {top:,} tokens** the attention term c×L² is "
             f"{fit.quadratic_share(top):.0%} of the fitted time, the weight term b×L "
             f"{fit.linear_part(top) / fit.predict(top):.0%}."]
    if fit.c.low is not None and fit.c.low <= 0:
        lines.append("- The attention term's interval includes 0: at these lengths its time "
                     "is not told apart from the noise.")
    cross = fit.crossover
    if cross is not None:
        where = "within" if cross <= top else "beyond"
        lines.append(f"- **Measured crossover:** the two fitted terms are equal at L = b / c = "
                     f"{cross:,.0f} tokens, {where} the lengths measured.")
    if shape is not None:
        flops = attention_crossover(shape.params - shape.vocab * shape.hidden, shape.heads,
                                    shape.head_dim, shape.layers)
        lines.append(f"- **Counted in FLOPs** (engine.calc.step_cost), {shape.name}'s attention "
                     f"work equals its weights' at L* = {flops:,.0f} tokens.")
    return "\n".join(lines)
