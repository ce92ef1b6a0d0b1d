"""What the batch-size lesson (lessons/knob.py) says of its measured points: a point with its
interval and spread, the last doubling and the gain against batch 1 in words, which prediction
the curve supports, the reader's own doubling question, the frontier chart's points, and the
"On a GPU" box's finding (where the knob bends for Llama-3-8B, and what ends the climb first).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.calc.batch_curve import (
    doubling_gains,
    first_small_doubling,
    growth_choice,
    kv_equals_weights_batch,
    weight_ridge_batch,
)
from engine.calc.gpu_scaling import (
    BF16_BYTES,
    LLAMA_3_8B,
    Machine,
    bend_batch,
    decode_step,
    kv_capacity,
    step_floor_ms,
)
from engine.calc.stats import Estimate, estimate
from engine.lab.results import SweepPointResult
from widgets.checkpoint import Question, numeric_question
from widgets.tables import sig

from .data_record import check_cell, check_text
from .on_a_gpu import machine_table
from .words.knob import SMALL_GAIN

GPU_MODEL = LLAMA_3_8B
SHORT_CONTEXT, LONG_CONTEXT = 200, 1000  # tokens cached per sequence


def gpu_finding(machines: list[Machine]) -> str:
    """Lesson 4's finding on each machine: where the knob bends for Llama-3-8B, and what ends
    the climb first."""
    def bend(m: Machine, context: int) -> str:
        b = bend_batch(GPU_MODEL, m, context)
        return "never" if b is None else f"{b:,}"

    def capacity(m: Machine) -> str:
        n = kv_capacity(GPU_MODEL, m, LONG_CONTEXT)
        return "\u2013" if n is None else f"{n:,}"

    half = kv_equals_weights_batch(GPU_MODEL.weight_bytes, GPU_MODEL.kv_bytes_per_token,
                                   LONG_CONTEXT)
    table = machine_table(machines, (
        ("the weight matrix multiplies reach the ridge at batch (any context)",
         lambda m: f"{weight_ridge_batch(m.ridge, BF16_BYTES):,}"),
        (f"the whole step reaches the ridge at batch ({SHORT_CONTEXT}-token contexts)",
         lambda m: bend(m, SHORT_CONTEXT)),
        (f"... ({LONG_CONTEXT:,}-token contexts)", lambda m: bend(m, LONG_CONTEXT)),
        (f"sequences of {LONG_CONTEXT:,} tokens whose KV fits beside the weights",
         capacity),
        ("time per step at batch 64, at least (ms)",
         lambda m: sig(step_floor_ms(decode_step(GPU_MODEL, 64, LONG_CONTEXT), m))),
    ), f"{GPU_MODEL.name} in bf16, {GPU_MODEL.kv_bytes_per_token:,} KV bytes per token")
    return (
        "<p>Where does the knob bend on a GPU? A decode step is two kinds of work. The weight "
        "matrix multiplies are shared by the batch: in bf16 they do about B FLOPs per byte at "
        "batch B (2 per weight per sequence, 2 bytes per weight), so they reach the ridge point "
        "at a batch of hundreds, whatever the context. Attention is not shared: every sequence "
        "reads its own cached keys and values at every step, a few FLOPs per byte at any batch, "
        "so it never reaches the ridge. With short contexts the weight read dominates and the "
        f"bend comes at hundreds; with {LONG_CONTEXT:,}-token contexts the cache reads equal "
        f"the weight read already at batch {half:,.0f} (weight bytes / (context x KV bytes per "
        "token)), where throughput has climbed half of the way to its ceiling: the curve "
        "flattens without the step ever becoming compute-bound, and the memory for the cache "
        "runs out before the arithmetic does. Batch sizes from the engine's step-cost "
        "formulas; KV capacity = (memory - weights) / (context x KV bytes per token) (JAX "
        "Scaling Book, \"All About Transformer Inference\", 2025).</p>" + table)


def doubling_question(points: dict[int, Point]) -> Question | None:
    """From the reader's curve (batch 1, 2, 4, ... as far as measured without a gap, at least
    to 8): the first doubling that gave less than 20% more total tokens/s. The key is theirs."""
    totals = {b: p.tokens_per_s for b, p in points.items()}
    gains = doubling_gains(totals)
    if not gains or max(gains) < 8:
        return None
    first = first_small_doubling(totals, SMALL_GAIN)
    top = max(gains)
    listed = "; ".join(f"{b // 2} to {b}: {100 * g:+.0f}%" for b, g in gains.items())
    why = f"Your curve: {listed}."
    none = f"None up to batch {top}"
    options = [f"{b // 2} to {b}" for b in gains] + [none]
    right = none if first is None else f"{first // 2} to {first}"
    index = options.index(right)
    shown = options[max(0, index - 2):index + 2]  # the answer and its neighbours
    if none not in shown:
        shown.append(none)
    return numeric_question(
        f"From your curve (batch 1 to {top}), which doubling first gave less than 20% more "
        "total tokens/s?", (right, why), [(o, why) for o in shown if o != right])


def growth_outcome(points: dict[int, Point]) -> tuple[str, str] | None:
    """Which prediction choice the batch-1 and batch-8 points support."""
    if 1 not in points or 8 not in points:
        return None
    choice, ratio = growth_choice(points[1].tokens_per_s, points[8].tokens_per_s)
    return choice, (f"{points[1].tokens_per_s:,.0f} tokens/s at batch 1, "
                    f"{points[8].tokens_per_s:,.0f} at batch 8: x{ratio:.1f}")


def ratio_text(new: float, old: float) -> str:
    return f"x{new / old:.2f} ({100 * (new / old - 1):+.0f}%)"


@dataclass(frozen=True)
class Point:
    """One measured batch size: total tokens/s, each user's ms per token, where it came from
    ("measured live (<time>)" or "cached (<time>)"), the median step's estimate: its 95%
    interval and the number of decode steps timed (None for a result cached without them),
    the p10 and p90 of those steps (how steady they were), and the disturbance check."""

    tokens_per_s: float
    tpot_ms: float
    origin: str = "measured live"
    cached: bool = False
    step: Estimate | None = None
    measured: str = ""  # "cached, measured <time>" or "fresh, measured <time>"
    check: str = ""  # its disturbance check in words
    verdict: str = "not checked"  # the same for the table: quiet, DISTURBED: why, not checked
    p10_ms: float | None = None
    p90_ms: float | None = None

    def tokens_per_s_range(self) -> tuple[float, float] | None:
        """Total tokens/s at the p90 and the p10 step (tokens/s goes as 1 / step time)."""
        if not (self.p10_ms and self.p90_ms):
            return None
        return (self.tokens_per_s * self.tpot_ms / self.p90_ms,
                self.tokens_per_s * self.tpot_ms / self.p10_ms)

    @property
    def n(self) -> int:
        return self.step.n if self.step else 0

    @property
    def spread(self) -> str:
        """'5.10-5.60' (ms), or a dash when the steps' spread is unknown."""
        if self.p10_ms is None or self.p90_ms is None:
            return "\u2013"
        return f"{self.p10_ms:.2f}\u2013{self.p90_ms:.2f}"

    def interval(self) -> tuple[float, float, float, float] | None:
        """(tokens/s low, high, ms low, high): tokens/s is batch / step, so its ends come from
        the step's ends swapped."""
        s = self.step
        if s is None or s.lo is None or not s.lo > 0:
            return None
        tokens = self.tokens_per_s * self.tpot_ms  # batch x 1000
        return tokens / s.hi, tokens / s.lo, s.lo, s.hi

    def ci_text(self, which: str) -> str:
        """The 95% interval of 'tokens' or 'ms' in words, '' when there is none."""
        iv = self.interval()
        if iv is None:
            return ""
        lo, hi = iv[:2] if which == "tokens" else iv[2:]
        return f"{lo:,.0f} to {hi:,.0f}" if which == "tokens" else f"{lo:.2f} to {hi:.2f}"


def point_of(result: SweepPointResult, origin: str = "measured live",
             cached: bool = False) -> Point:
    """A lesson point from a sweep_point result: the median decode step bounded by a bootstrap
    over the timed steps (engine.calc.stats), their p10 and p90, and the disturbance check."""
    step = estimate(result.step_ms, 50) if result.step_ms else None
    return Point(result.tokens_per_s, result.tpot_ms, origin, cached, step,
                 check=check_text(result), verdict=check_cell(result), p10_ms=result.step_ms_p10,
                 p90_ms=result.step_ms_p90)


def pareto_point(batch: int, p: Point, what: str = "batch") -> dict:
    """A batch size on the frontier chart: tokens/s each user is 1000 / ms per token, so its
    interval's ends come from the step's ends swapped."""
    iv = p.interval()
    return {"setting": batch, "label": f"{what} {batch}", "per_user": 1000 / p.tpot_ms,
            "total": p.tokens_per_s, "n": p.n,
            **({"per_user_lo": 1000 / iv[3], "per_user_hi": 1000 / iv[2], "total_lo": iv[0],
                "total_hi": iv[1]} if iv else {})}


DOWNLOAD_COLUMNS = ("batch", "tokens_per_s", "tokens_lo", "tokens_hi", "ms_per_token", "ms_lo",
                    "ms_hi", "n", "origin", "cached")  # the curve's columns a reader needs


def warmup_steps(result: SweepPointResult) -> int:
    """Decode steps run but not timed: a point decodes new_tokens - 1 steps, times the rest."""
    return max(0, result.new_tokens - 1 - result.decode_steps_timed)


def doubling(points: dict[int, Point], batch: int, what: str = "batch") -> str:
    """The marginal gain of the last doubling, from batch // 2 to batch, in words."""
    if batch < 2:
        return "Batch 1 is where the curve starts: no doubling yet."
    half = batch // 2
    if batch not in points or half not in points:
        return f"Measuring {what} {half} and {batch} to compare them..."
    a, b = points[half], points[batch]
    words = (f"Last doubling, {what} {half} to {batch}: total tokens/s "
             f"{ratio_text(b.tokens_per_s, a.tokens_per_s)}, each user's time per token "
             f"{ratio_text(b.tpot_ms, a.tpot_ms)}.")
    ra, rb = a.tokens_per_s_range(), b.tokens_per_s_range()
    if b.tokens_per_s < a.tokens_per_s and ra and rb and rb[1] >= ra[0]:
        words += (" The fall is within the two points' own spread (their decode steps' p10 to "
                  "p90): the throughput has levelled off, not dropped.")
    return words


def against_one(points: dict[int, Point], batch: int, what: str = "batch") -> str:
    if batch < 2 or 1 not in points or batch not in points:
        return ""
    a, b = points[1], points[batch]
    return (f"Against {what} 1: {b.tokens_per_s / a.tokens_per_s:.1f} times the throughput "
            f"for {b.tpot_ms / a.tpot_ms:.1f} times the time per token.")
