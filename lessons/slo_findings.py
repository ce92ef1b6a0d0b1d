"""What the SLO lesson (lessons/slo_goodput.py) says of its measured numbers: which prediction
a sweep supports, the reader's own attainment question, the frontier chart's points, and the
"On a GPU" box's finding (the largest batch within the reader's TPOT limit on each machine).
"""

from __future__ import annotations

from engine.calc.gpu_scaling import (
    LLAMA_3_8B,
    Machine,
    decode_tokens_per_s,
    largest_batch_within,
)
from engine.calc.rate_sweep import sweep_trend
from engine.calc.slo_math import Judged, cost_per_million_tokens
from engine.calc.stats import Estimate
from engine.lab.results import RatePoint
from widgets.checkpoint import Question, numeric_question
from widgets.tables import sig

from .on_a_gpu import machine_table
from .words.slo_goodput import GPU_TEXT, TREND_CHOICES

GPU_CONTEXT = 1000  # tokens cached per sequence


def gpu_finding(machines: list[Machine], tpot_limit_ms: float | None, price: float | None) -> str:
    """Lesson 8's finding on each machine: the largest batch whose decode step can stay within
    the TPOT limit (Llama-3-8B, bf16), what it could produce at most, and its cost."""
    if not tpot_limit_ms or tpot_limit_ms <= 0:
        return "<p>Type a TPOT limit above to see what it allows on each machine.</p>"

    found: dict[str, int | None] = {}

    def batch(m: Machine) -> int | None:
        if m.name not in found:
            found[m.name] = largest_batch_within(LLAMA_3_8B, m, GPU_CONTEXT, tpot_limit_ms)
        return found[m.name]

    def tokens(m: Machine) -> float | None:
        b = batch(m)
        return None if b is None else decode_tokens_per_s(LLAMA_3_8B, m, GPU_CONTEXT, b)

    def cost(m: Machine) -> str:
        t = tokens(m)
        if t is None or price is None or price < 0:
            return "\u2013"
        return f"${cost_per_million_tokens(price, t):,.3f}"

    table = machine_table(machines, (
        (f"largest batch within TPOT {sig(tpot_limit_ms)} ms",
         lambda m: "none" if batch(m) is None else f"{batch(m):,}"),
        ("output tokens/s there, at most", lambda m: "\u2013" if tokens(m) is None
         else f"{tokens(m):,.0f}"),
        ("cost per million tokens at your price, at least", cost),
    ), f"{LLAMA_3_8B.name} in bf16, {GPU_CONTEXT:,} tokens cached per sequence")
    return GPU_TEXT + table


def sweep_outcome(judged: list[tuple[RatePoint, Judged]]) -> tuple[str, str] | None:
    """Which prediction choice a sweep supports: did goodput fall from its best by the top
    rate (10%), and did throughput still rise by half when the rate last doubled?"""
    trend = sweep_trend(judged)
    if trend is None:
        return None
    choice = TREND_CHOICES[(trend.goodput_falls, trend.throughput_rises)]
    return choice, (f"at {sig(trend.top_rate)} requests/s: throughput "
                    f"{sig(trend.top.throughput_tok_s)} tokens/s (x{trend.throughput_ratio:.2f} "
                    f"on the rate before), goodput {sig(trend.top.goodput_rps)} requests/s "
                    f"against a best of {sig(trend.best_goodput_rps)}")


def attainment_question(point: RatePoint, judged: Judged) -> Question | None:
    """The reader's own SLO attainment at one rate; the distractors are each limit alone."""
    if not judged.completed or not judged.met_each:
        return None
    n = judged.completed
    pct = 100 * judged.good / n
    each = dict(judged.met_each)
    why = (f"Your run at {sig(point.rate)} requests/s: {judged.good} of {n} requests met every "
           "limit; " + ", ".join(f"{k} alone {v} of {n}" for k, v in each.items()) + ".")
    wrong = [(f"{100 * v / n:.0f}%", why + f" That is the {k} limit alone; a request must meet "
                                           "every limit to count.") for k, v in each.items()]
    wrong.append((f"{100 - pct:.0f}%", why + " That is the share that missed."))
    return numeric_question(
        f"At {sig(point.rate)} requests/s in your sweep, what share of requests met every "
        "limit (the SLO attainment)?", (f"{pct:.0f}%", why), wrong)


def pareto_point(point: RatePoint, judged: Judged, est: Estimate,
                 total: Estimate | None = None) -> dict:
    """A rate on the frontier chart: the server's output tokens/s (total: its interval over the
    rate's runs) against tokens/s each user, 1000 / the median request's TPOT (its interval's
    ends swapped)."""
    per_user = 1000 / est.value if est.value else None
    row = {"setting": point.rate, "label": f"{sig(point.rate)} req/s",
           "per_user": per_user, "total": judged.throughput_tok_s, "n": est.n}
    if est.bounded and est.lo:
        row.update(per_user_lo=1000 / est.hi, per_user_hi=1000 / est.lo)
    if total is not None and total.bounded:
        row.update(total_lo=total.lo, total_hi=total.hi)
    return row
