"""The SLO lesson's tables and sentences (lessons/slo_goodput.py places them): each rate's
percentiles against the reader's limits, the note on their intervals, the summary of a sweep,
the cost of a million tokens, and the two uses side by side. Pure functions of the judged points
and their estimates, so the page only keeps them current.

A rate's figures come through three callables the page supplies, since it keeps them per
measured point: `estimates(point)` (each percentile with its interval, point_estimates),
`run_estimates(rate)` (the rate curve's figures from its runs, run_figures) and `runs(rate)`
(how many runs measured it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from engine.calc.rate_sweep import OperatingPoints
from engine.calc.slo_math import CHAT, SLO, Judged, cost_per_million_tokens
from engine.calc.stats import Estimate, min_samples
from engine.lab.results import RatePoint
from widgets.tables import UNBOUNDED, html_table, interval_text, sig, with_interval

from .words.slo_goodput import BATCH_SUMMARY, CHAT_SUMMARY, FEW_SAMPLES_NOTE, INTERVAL_NOTE

Estimates = Callable[[RatePoint], Mapping[str, Estimate]]
RunEstimates = Callable[[float], Mapping[str, Estimate]]
BATCH_COLUMNS = ("P50 TTFT", "P99 TTFT", "P50 TPOT", "P99 TPOT")


@dataclass(frozen=True)
class Use:
    """A use of the same engine: its per-request latency limits (none for batch) and its batch
    size."""

    label: str
    max_batch: int
    slo: SLO


USES = {"interactive": Use("interactive chat", 8, CHAT),
        "batch": Use("overnight batch", 32, SLO())}


@dataclass(frozen=True)
class UseFigures:
    """What one use measured in this session: its operating points, batch size and device."""

    best: OperatingPoints
    max_batch: int
    device: str


def checks_html(judged: Sequence[tuple[RatePoint, Judged]], slo: SLO, estimates: Estimates,
                run_estimates: RunEstimates, runs: Callable[[float], int]) -> str:
    """Each rate's percentiles against the limits (✓ within, ✗ over) and the share of requests
    within them; with no limits (batch use), each rate's percentiles alone."""
    if slo.empty:
        head = ["offered rate (req/s)", "P50 TTFT (ms)", "P99 TTFT (ms)", "P50 TPOT (ms)",
                "P99 TPOT (ms)", "requests", "runs"]
        rows = []
        for p, _j in judged:
            est = estimates(p)
            rows.append([sig(p.rate), *[with_interval(est[w].value, est[w]) for w in BATCH_COLUMNS],
                         f"{len(p.ttft_ms)}", f"{runs(p.rate)}"])
        return html_table(
            "No latency limits (batch use): every completed request counts", head, rows,
            numeric=[False] + [True] * 6) + interval_note(judged, estimates)
    head = ["offered rate (req/s)"]
    rows = []
    for p, j in judged:
        if len(head) == 1:
            head += [f"{what} (limit {sig(limit)} ms)" for what, _v, limit, _m in j.checks]
            head += ["requests"] + [f"within the {name} limit" for name, _n in j.met_each]
            head += ["SLO attainment (every limit)", "goodput (req/s)", "runs"]
        est = estimates(p)
        good = run_estimates(p.rate)["goodput_rps"]
        rows.append([sig(p.rate),
                     *[f"{with_interval(value, est.get(what))} {'✓' if met else '✗'}"
                       for what, value, _l, met in j.checks],
                     f"{len(p.ttft_ms)}",
                     *[f"{100 * n / j.completed:.0f}%" if j.completed else "\u2013"
                       for _name, n in j.met_each],
                     (f"{100 * j.attainment:.0f}% ({j.good} of {j.completed})"
                      if j.attainment is not None else "\u2013"),
                     interval_text(j.goodput_rps, *((good.lo, good.hi) if good.bounded
                                                    else (None, None))),
                     f"{good.n}"])
    return html_table(
        "Each rate: the percentiles against the limits (✓ within, ✗ over), and the share "
        "of requests within them", head, rows,
        numeric=[False] + [True] * (len(head) - 1)) + interval_note(judged, estimates)


def interval_note(judged: Sequence[tuple[RatePoint, Judged]], estimates: Estimates) -> str:
    """What the brackets and the dagger mean, with the counts they depend on."""
    if not judged:
        return ""
    few = any(not e.bounded for p, _j in judged for e in estimates(p).values()
              if e.value is not None)
    text = INTERVAL_NOTE
    if few:
        text += " " + FEW_SAMPLES_NOTE.format(
            mark=UNBOUNDED, p99=min_samples(99), p50=min_samples(50))
    return f'<div class="site"><p class="interval-note">{text}</p></div>'


def summary_text(judged: Sequence[tuple[RatePoint, Judged]], best: OperatingPoints | None,
                 use: str) -> str:
    """The sweep in a sentence or two: the highest rate's figures, and for chat use the best
    goodput and the highest rate's attainment ('' before a point is judged)."""
    if not judged or best is None:
        return ""
    top_p, top_j = judged[-1]
    top = {"top_rate": sig(top_p.rate), "top_rps": sig(top_j.requests_per_s),
           "top_tok_s": sig(top_j.throughput_tok_s)}
    if use == "batch":
        return BATCH_SUMMARY.format(**top)
    return CHAT_SUMMARY.format(
        **top, best_rps=sig(best.goodput_rps), best_tok_s=sig(best.goodput_tok_s),
        best_rate=sig(best.goodput_rate), good=top_j.good, completed=top_j.completed,
        attainment=f"{100 * (top_j.attainment or 0):.0f}")


def cost_text(best: OperatingPoints, price: float, use: str) -> str:
    """The cost of a million tokens at `price` per hour, counting every token (the throughput)
    and, for chat use, only the tokens within the SLO (goodput), worked out in the open."""
    lines = []
    for what, tps, rate in (
            ("every token (batch use: the throughput)", best.throughput_tok_s,
             best.throughput_rate),
            ("only tokens within the SLO (chat use: goodput)", best.goodput_tok_s,
             best.goodput_rate)):
        if use == "batch" and "goodput" in what:
            continue
        if not tps:
            lines.append(f"- Counting {what}: no request met the SLO at any rate "
                         "measured, so no token was good enough to price.")
            continue
        cost = cost_per_million_tokens(price, tps)
        lines.append(f"- Counting {what}, at {sig(rate)} requests/s: ({price:g} / 3600) × "
                     f"(1,000,000 / {sig(tps)}) = **${cost:,.2f} per million tokens**")
    return "\n".join(lines)


def uses_html(by_use: Mapping[str, UseFigures], price: float) -> str:
    """The uses measured in this session side by side: the tokens per second that count (all
    of them for batch, goodput for chat) and what a million of them cost."""
    rows = []
    for use, fig in by_use.items():
        tps = fig.best.throughput_tok_s if use == "batch" else fig.best.goodput_tok_s
        cost = cost_per_million_tokens(price, tps) if tps else None
        rows.append([USES[use].label, f"{fig.max_batch}",
                     "none" if use == "batch" else "chat limits", sig(tps),
                     f"${cost:,.2f}" if cost is not None else "-"])
    return html_table(
        "Two settings of the same knobs, as measured in this session "
        "(switch the use above to measure the other)",
        ["use", "max batch", "latency limits", "tokens/s that count", "per million tokens"],
        rows, numeric=[False, True, False, True, True])
