"""Lesson 8: SLOs, goodput and cost. /app?lesson=slo-goodput

A request-rate sweep on the engine (`rate_sweep`: one seeded Poisson workload served at several
rates) gives each request's TTFT, TPOT and E2E at each rate; the page judges them against the
targets the reader types (engine.calc.slo_math, no new run needed), draws throughput and goodput
against rate (widgets.rate_curve), and prices a million tokens from the measured throughput and a
price per hour the reader types. "Interactive" and "batch" are two settings of the same knobs:
latency targets on or off, a small or a large batch.

URL: use, the five targets, price_per_hour, max_rate, points, requests, max_batch:
/app?lesson=slo-goodput&use=batch&price_per_hour=2.5&points=2&requests=8
"""

from __future__ import annotations

from dataclasses import dataclass

import panel as pn
import param

from engine.calc.slo_math import (
    INTERACTIVE_CHAT,
    INTERACTIVE_CHAT_SOURCE,
    Judged,
    Targets,
    cost_per_million_tokens,
    judge,
)
from engine.calc.stats import Estimate, estimate, min_samples
from engine.lab.results import CapacityLoad, CapacitySearchResult, RatePoint, RateSweepResult
from widgets.checkpoint import Choice, Question
from widgets.data_download import DataDownload
from widgets.job_status import JobStatus
from widgets.pareto_chart import ParetoChart
from widgets.rate_curve import RateCurve
from widgets.tables import html_table, sig, table_pane

from .base import LessonPage
from .data_record import result_header
from .job_runner import JobRunner, event_record
from .number_input import number_problem


@dataclass(frozen=True)
class Use:
    """A use of the same engine: its latency targets (none for batch) and its batch size."""

    label: str
    max_batch: int
    targets: Targets


USES = {"interactive": Use("interactive chat", 8, INTERACTIVE_CHAT),
        "batch": Use("overnight batch", 32, Targets())}
MAX_SWEEP_S = 150.0  # a sweep expected to take longer is refused with a message
PROMPT_LEN, OUTPUT_LEN = [32, 128], [16, 64]

INTRO = """
Before tuning anything, decide what "fast enough" means for the people using it. A chat user
watches the first token arrive and the text flow: they live on **TTFT** and **ITL**. An
overnight job that summarizes a million documents has no one watching: only **throughput**, and
so the cost of each token, matters. The same engine serves both; they want different settings.

Targets written down are **SLOs** (service level objectives). **Goodput** counts only the
requests that met every target, per second. Throughput can look splendid while goodput is zero:
a server that answers everything late has served nobody well.
"""

TARGETS_TEXT = """
### The targets

Goodput needs a yes or no for every request, so each request is held to the limits no single
request should pass: its TTFT within the P99 TTFT target, its TPOT (its average gap between
tokens) within the P50 ITL target, and its whole answer within the P99 E2E target. The table
under the chart also checks the five percentile targets themselves at each rate.
"""

QUOTE = (
    "> Starting targets for an interactive chat at moderate load: **P50 TTFT < 300 ms, "
    "P99 TTFT < 1.2 s, P50 ITL < 40 ms, P99 ITL < 120 ms, P99 E2E < 8 s** (for a 512-token "
    f"answer).\n\n*Quoted, not measured here: {INTERACTIVE_CHAT_SOURCE}. This engine's answers "
    "are shorter than 512 tokens, so the E2E target is easy to meet here.*")

SWEEP_TEXT = """
### Raising the request rate

The engine serves the same set of requests (prompts of 32 to 128 tokens, answers of 16 to 64)
at several arrival rates, with arrivals at random moments (a Poisson process) as real users
send them. At low rates every request is served at once; past the engine's capacity a queue
builds, TTFT grows without bound, and goodput falls away from throughput.
"""

PARETO_TEXT = """
### Throughput against each user's speed

The chart load-testing reports put first: up, the output tokens per second of the whole server;
right, the tokens per second each user gets (1000 divided by the median request's time per
output token, with its 95% interval). Each point is one offered rate. Raising the rate buys
throughput with each user's speed until the engine is full; past that, points stop moving up and
only move left. The line joins the rates no other rate beats on both axes.
"""

CAPACITY_TEXT = """
### How many users does this machine hold?

The sweep above is **open-loop** load: requests arrive at a rate, whether or not earlier ones are
answered, as from a large public audience. A team sizing a service also asks the **closed-loop**
question: N users, each sending their next request as soon as their last answer ends, so N
requests are always in the system (a chat product with N people typing, or N clients of a batch
pipeline). The search below raises N, doubling, until a load misses your targets, then halves the
gap down to one user. Each load is run three times with different requests and judged on the
median of the three, so one noisy run does not move the answer.
"""

COST_TEXT = """
### What a million tokens cost

A machine costs the same per hour whether it is busy or not, so the price of a token is the price
of the time it took: **cost per million tokens = (price per hour / 3600) × (1,000,000 / tokens
per second)**. Which tokens per second? For the batch job, every token counts: use the
throughput. For the chat, only tokens of requests that met the targets count: use goodput.
"""


@dataclass(frozen=True)
class OperatingPoints:
    """The best goodput and the best throughput among the measured rates, and where."""

    goodput_rate: float
    goodput_tok_s: float | None
    goodput_rps: float | None
    throughput_rate: float
    throughput_tok_s: float | None


@dataclass(frozen=True)
class UseFigures:
    """What one use measured in this session: its operating points, batch size and device."""

    best: OperatingPoints
    max_batch: int
    device: str


UNBOUNDED = "†"  # marks a percentile from too few samples to bound it (engine.calc.stats)


def point_estimates(point: RatePoint) -> dict[str, Estimate]:
    """The percentiles a rate is judged on, each with its sample count and, where the per-request
    figures are at hand (TTFT, E2E), its 95% bootstrap interval. ITL percentiles come summarized
    from the engine: their count is the token gaps of the completed requests, with no interval."""
    gaps = sum(max(0, n - 1) for n in point.output_len)
    itl = {q: Estimate(f"P{q}", v, None, None, gaps, gaps >= min_samples(q))
           for q, v in ((50, point.itl_p50_ms), (99, point.itl_p99_ms))}
    return {"P50 TTFT": estimate(point.ttft_ms, 50), "P99 TTFT": estimate(point.ttft_ms, 99),
            "P50 ITL": itl[50], "P99 ITL": itl[99], "P99 E2E": estimate(point.e2e_ms, 99),
            "P50 TPOT": estimate(point.tpot_ms, 50)}


def pareto_point(point: RatePoint, judged: Judged, est: Estimate) -> dict:
    """A rate on the frontier chart: the server's output tokens/s (one run: no interval) against
    tokens/s each user, 1000 / the median request's TPOT (its interval's ends swapped)."""
    per_user = 1000 / est.value if est.value else None
    row = {"setting": point.rate, "label": f"{sig(point.rate)} req/s",
           "per_user": per_user, "total": judged.throughput_tok_s, "n": est.n}
    if est.bounded and est.lo:
        row.update(per_user_lo=1000 / est.hi, per_user_hi=1000 / est.lo)
    return row


def with_interval(value: float | None, est: Estimate | None) -> str:
    """'412 [380-450]' (the 95% interval), or '412 †' for a percentile too few samples bound."""
    if value is None or est is None:
        return sig(value)
    if not est.bounded:
        return f"{sig(value)} {UNBOUNDED}"
    if est.lo is None:
        return sig(value)
    return f"{sig(value)} [{sig(est.lo)}–{sig(est.hi)}]"


def sweep_rates(max_rate: float, points: int) -> list[float]:
    """points rates, doubling up to max_rate: max_rate / 2^(points - 1), ..., max_rate."""
    return [round(max_rate / 2 ** (points - 1 - i), 4) for i in range(points)]


class SLOGoodputLesson(LessonPage):
    """Lesson 8: targets first, then throughput, goodput and the cost of a token."""

    slug = "slo-goodput"
    job_noun = "rate sweeps"

    use = param.Selector(default="interactive", objects=list(USES), label="Use",
                         doc="interactive: chat targets, batch of 8; batch: no latency "
                             "targets, batch of 32.")
    ttft_p50_ms = param.Number(default=INTERACTIVE_CHAT.ttft_p50_ms, allow_None=True,
                               label="P50 TTFT target (ms)")
    ttft_p99_ms = param.Number(default=INTERACTIVE_CHAT.ttft_p99_ms, allow_None=True,
                               label="P99 TTFT target (ms)")
    itl_p50_ms = param.Number(default=INTERACTIVE_CHAT.itl_p50_ms, allow_None=True,
                              label="P50 ITL target (ms)")
    itl_p99_ms = param.Number(default=INTERACTIVE_CHAT.itl_p99_ms, allow_None=True,
                              label="P99 ITL target (ms)")
    e2e_p99_s = param.Number(default=INTERACTIVE_CHAT.e2e_p99_ms / 1000, allow_None=True,
                             label="P99 E2E target (s)")
    price_per_hour = param.Number(default=1.0, allow_None=True,
                                  label="Price of the machine per hour ($)",
                                  doc="What this machine costs you per hour; a placeholder, "
                                      "not a quoted price.")
    max_rate = param.Number(default=128.0, bounds=(0.1, 256.0),
                            label="Highest request rate (/s)")
    points = param.Integer(default=5, bounds=(2, 8), label="Rates measured")
    requests = param.Integer(default=32, bounds=(4, 64), label="Requests per rate")
    max_batch = param.Integer(default=8, bounds=(1, 64), label="Max batch")
    cap_ttft_ms = param.Number(default=1000.0, bounds=(1.0, 600_000.0),
                               label="Capacity: P95 TTFT at most (ms)")
    cap_tok_s = param.Number(default=20.0, bounds=(0.0, 100_000.0),
                             label="Capacity: tokens/s each user at least")
    max_users = param.Integer(default=32, bounds=(1, 64), label="Capacity: most users to try")

    def __init__(self, **params):
        super().__init__(**params)
        self.sweep: RateSweepResult | None = None
        self.sweep_event = None  # the sweep's result event: cached or fresh, when, where
        self.points_seen: list[RatePoint] = []
        self.by_use: dict[str, UseFigures] = {}  # use -> its figures, as measured this session
        self.curve = RateCurve()
        self.input_error = pn.pane.Alert("", alert_type="warning", visible=False,
                                         sizing_mode="stretch_width")
        self.checks = table_pane(css_classes=["slo-checks"])
        self._estimates: dict[int, tuple[RatePoint, dict[str, Estimate]]] = {}  # by id(point)
        self.goodput_summary = pn.pane.Markdown("", sizing_mode="stretch_width",
                                                css_classes=["goodput-summary"])
        # disable_math: dollar signs are prices here, not LaTeX
        self.cost = pn.pane.Markdown("", sizing_mode="stretch_width", css_classes=["cost"],
                                     disable_math=True)
        self.uses_table = table_pane(css_classes=["uses-table"])
        self.download = DataDownload("rate-sweep", self.download_rows, self.download_header,
                                     "The chart's points, with each rate's percentiles")
        self.capacity_runner = JobRunner(self, JobStatus("capacity searches"))
        self.capacity: CapacitySearchResult | None = None
        self.capacity_event = None
        self.cap_loads: list[CapacityLoad] = []
        self.find = pn.widgets.Button(label="Find how many users this machine holds",
                                      color="primary")
        self.find.on_click(lambda _e: self.search_capacity())
        self.verdict = pn.pane.Markdown("", sizing_mode="stretch_width", css_classes=["verdict"])
        self.cap_table = table_pane(css_classes=["capacity-table"])
        self.cap_download = DataDownload("capacity-search", self.capacity_rows,
                                         self.capacity_header, "The loads the search measured")
        self.pareto = ParetoChart(setting="request rate")
        self.pareto_download = DataDownload("rate-sweep-pareto", self.pareto.points,
                                            self.download_header, "The frontier chart's points")
        self.again = pn.widgets.Button(label="Measure again (not from the cache)")
        self.again.on_click(lambda _e: self.start(fresh=True))
        number = lambda p, step: pn.widgets.FloatInput.from_param(  # noqa: E731
            p, step=step, sizing_mode="stretch_width")
        self._target_widgets = pn.Row(
            number(self.param.ttft_p50_ms, 50), number(self.param.ttft_p99_ms, 100),
            number(self.param.itl_p50_ms, 5), number(self.param.itl_p99_ms, 10),
            number(self.param.e2e_p99_s, 1), sizing_mode="stretch_width",
            visible=self.use == "interactive")
        self._refresh()

    # ---- inputs ---------------------------------------------------------------------------------------
    def targets(self) -> Targets:
        if self.use == "batch":
            return Targets()
        e2e = None if self.e2e_p99_s is None else 1000 * self.e2e_p99_s
        return Targets(self.ttft_p50_ms, self.ttft_p99_ms, self.itl_p50_ms, self.itl_p99_ms, e2e)

    def price_problem(self) -> str:
        return number_problem(
            self.price_per_hour, lo=0,
            empty="Type a price per hour (for example 1.50) to see what a million tokens cost.",
            low="A price of {value:g} $ per hour is negative: type what the machine costs, 0 or "
                "more.")

    def input_problem(self) -> str:
        """A message for typed values that make no sense ('' when all is well)."""
        problem = self.price_problem()
        if problem or self.use != "interactive":
            return problem
        for name in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "e2e_p99_s"):
            problem = number_problem(  # empty is allowed: no such target
                getattr(self, name), lo=0, above=True,
                low=f"{self.param[name].label} is {{value:g}}: a target must be more than 0 "
                    "(leave it empty to drop it).")
            if problem:
                return problem
        return ""

    def expected_seconds(self) -> float:
        """About how long the sweep's arrivals last (requests / rate, summed)."""
        return sum(self.requests / r for r in sweep_rates(self.max_rate, self.points))

    # ---- jobs -----------------------------------------------------------------------------------------
    def sweep_params(self) -> dict:
        return {"rates": sweep_rates(self.max_rate, self.points), "requests": self.requests,
                "prompt_len": PROMPT_LEN, "output_len": OUTPUT_LEN, "max_batch": self.max_batch}

    @classmethod
    def warm_jobs(cls) -> list[tuple[str, dict]]:
        jobs = []
        for use, setting in USES.items():
            jobs.append(("rate_sweep", cls(use=use, max_batch=setting.max_batch).sweep_params()))
        return jobs

    def start(self, fresh: bool = False) -> None:
        self.sweep = None
        self.points_seen = []
        self.curve.set_points([])
        if self.expected_seconds() > MAX_SWEEP_S:
            self.runner.cancel()
            self.runner.status.error.message = (
                f"This sweep would take about {self.expected_seconds():.0f} s of arrivals alone "
                f"(more than {MAX_SWEEP_S:.0f} s): raise the highest rate, measure fewer rates, "
                "or send fewer requests per rate.")
            self._refresh()
            return
        use = self.use

        def on_event(event):
            if event.type == "step" and event.data.get("kind") == "rate_point":
                self.points_seen.append(event_record(RatePoint, event.data))
                self._refresh()
            elif event.type == "result":
                self.show_sweep(event.result, use, event)

        self.runner.run([("rate_sweep", self.sweep_params(), on_event)], use_cache=not fresh)
        self._refresh()

    @param.depends("max_rate", "points", "requests", "max_batch", watch=True)
    def _sweep_changed(self) -> None:
        if self.started:
            self.start()

    @param.depends("use", watch=True)
    def _use_changed(self) -> None:
        """Switching use moves the knobs: the targets (on or off) and the batch size."""
        setting = USES[self.use]
        if self.use == "interactive":
            t = setting.targets
            self.param.update(ttft_p50_ms=t.ttft_p50_ms, ttft_p99_ms=t.ttft_p99_ms,
                              itl_p50_ms=t.itl_p50_ms, itl_p99_ms=t.itl_p99_ms,
                              e2e_p99_s=t.e2e_p99_ms / 1000)
        self._target_widgets.visible = self.use == "interactive"
        args = pn.state.session_args if pn.state.curdoc is not None else {}
        if self.started or "max_batch" not in args:  # a link's own max_batch wins at first
            self.max_batch = setting.max_batch  # re-measures if it changed
        self._refresh()

    @param.depends("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "e2e_p99_s",
                   "price_per_hour", watch=True)
    def _inputs_changed(self) -> None:
        self._refresh()

    # ---- results --------------------------------------------------------------------------------------
    def show_sweep(self, sweep: RateSweepResult, use: str, event=None) -> None:
        self.sweep, self.sweep_event = sweep, event
        self.points_seen = list(sweep.points)
        self._refresh()
        if self.goodput_summary.object:
            self.say(self.goodput_summary.object)
        best = self.operating_points()
        if best is not None and use == self.use:
            self.by_use[use] = UseFigures(best, sweep.max_batch, sweep.device)
            self._refresh_uses()

    def judged(self) -> list[tuple[RatePoint, Judged]]:
        targets = self.targets()
        return [(p, judge(p.to_dict(), targets))
                for p in sorted(self.points_seen, key=lambda p: p.rate)]

    def estimates(self, point: RatePoint) -> dict[str, Estimate]:
        """point_estimates, once per measured point (the targets change, the samples do not)."""
        kept = self._estimates.get(id(point))
        if kept is None or kept[0] is not point:
            kept = (point, point_estimates(point))
            self._estimates = {k: v for k, v in self._estimates.items()
                               if any(v[0] is p for p in self.points_seen)}
            self._estimates[id(point)] = kept
        return kept[1]

    def operating_points(self) -> OperatingPoints | None:
        """The best goodput and the best throughput among the measured rates."""
        judged = [(p, j) for p, j in self.judged() if j.duration_s]
        if not judged:
            return None
        good = max(judged, key=lambda pj: pj[1].goodput_tok_s or 0)
        fast = max(judged, key=lambda pj: pj[1].throughput_tok_s or 0)
        return OperatingPoints(
            goodput_rate=good[0].rate, goodput_tok_s=good[1].goodput_tok_s,
            goodput_rps=good[1].goodput_rps, throughput_rate=fast[0].rate,
            throughput_tok_s=fast[1].throughput_tok_s)

    def _refresh(self) -> None:
        problem = self.input_problem()
        self.input_error.param.update(object=problem, visible=bool(problem))
        judged = self.judged()
        self.curve.set_points([{"rate": p.rate, "completed_rps": j.requests_per_s,
                                "goodput_rps": j.goodput_rps,
                                "throughput_tok_s": j.throughput_tok_s,
                                "goodput_tok_s": j.goodput_tok_s} for p, j in judged])
        self._refresh_checks(judged)
        self.pareto.set_points([pareto_point(p, j, self.estimates(p)["P50 TPOT"])
                                for p, j in judged])
        self._refresh_summary(judged)
        self._refresh_cost(problem)

    def _refresh_checks(self, judged) -> None:
        targets = self.targets()
        counts = lambda p: [f"{len(p.ttft_ms)}", f"{self.estimates(p)['P50 ITL'].n}"]  # noqa: E731
        if targets.empty:
            head = ["offered rate (req/s)", "P50 TTFT (ms)", "P99 TTFT (ms)", "P50 ITL (ms)",
                    "P99 ITL (ms)", "requests", "token gaps"]
            rows = []
            for p, _j in judged:
                est = self.estimates(p)
                rows.append([sig(p.rate), *[with_interval(est[w].value, est[w]) for w in (
                    "P50 TTFT", "P99 TTFT", "P50 ITL", "P99 ITL")], *counts(p)])
            self.checks.object = html_table(
                "No latency targets (batch use): every completed request counts", head, rows,
                numeric=[False] + [True] * 6) + self._interval_note(judged)
            return
        head = ["offered rate (req/s)"]
        rows = []
        for p, j in judged:
            if len(head) == 1:
                head += [f"{what} (target {sig(target)} ms)" for what, _v, target, _m in j.checks]
                head += ["requests", "token gaps", "requests within every limit",
                         "all targets met"]
            est = self.estimates(p)
            rows.append([sig(p.rate),
                         *[f"{with_interval(value, est.get(what))} {'✓' if met else '✗'}"
                           for what, value, _t, met in j.checks],
                         *counts(p), f"{j.good} of {j.completed}",
                         "yes" if j.all_targets_met else "no"])
        self.checks.object = html_table(
            "Each rate against the targets (✓ met, ✗ missed)", head, rows,
            numeric=[False] + [True] * (len(head) - 1)) + self._interval_note(judged)

    def _interval_note(self, judged) -> str:
        """What the brackets and the dagger mean, with the counts they depend on."""
        if not judged:
            return ""
        few = any(not e.bounded for p, _j in judged for e in self.estimates(p).values()
                  if e.value is not None)
        text = ("In brackets: the 95% confidence interval of a TTFT or E2E percentile (a "
                "bootstrap over the requests at that rate; ITL percentiles come summarized from "
                "the engine, over the token gaps counted beside them). The engine was warmed up "
                "before the first rate; its warm-up steps are in no figure.")
        if few:
            text += (f" {UNBOUNDED} A percentile from too few samples to bound it: a P99 needs "
                     f"at least {min_samples(99)} samples, a P50 {min_samples(50)}. It is the "
                     "slowest few requests measured, not a P99 to quote; send more requests per "
                     "rate to bound it.")
        return f'<div class="site"><p class="interval-note">{text}</p></div>'

    def _refresh_summary(self, judged) -> None:
        if not judged:
            self.goodput_summary.object = ""
            return
        best = self.operating_points()
        if best is None:
            self.goodput_summary.object = ""
            return
        top_p, top_j = judged[-1]
        if self.use == "batch":
            text = (f"With no latency targets, goodput is throughput: at the highest rate "
                    f"measured ({sig(top_p.rate)} requests/s) the engine completed "
                    f"{sig(top_j.requests_per_s)} requests/s, {sig(top_j.throughput_tok_s)} "
                    "output tokens/s.")
        else:
            text = (f"Best goodput: **{sig(best.goodput_rps)} requests/s** "
                    f"({sig(best.goodput_tok_s)} tokens/s of answers within the targets) at "
                    f"an offered {sig(best.goodput_rate)} requests/s. At "
                    f"{sig(top_p.rate)} requests/s the engine still completed "
                    f"{sig(top_j.requests_per_s)} requests/s, but only {top_j.good} of "
                    f"{top_j.completed} requests met every limit.")
        self.goodput_summary.object = text

    def _refresh_cost(self, problem: str) -> None:
        best = self.operating_points()
        if problem or best is None:
            self.cost.object = "" if best is None else \
                "*The cost appears once the price per hour makes sense.*"
            return
        price = self.price_per_hour
        lines = []
        for what, tps, rate in (
                ("every token (batch use: the throughput)", best.throughput_tok_s,
                 best.throughput_rate),
                ("only tokens within the targets (chat use: goodput)", best.goodput_tok_s,
                 best.goodput_rate)):
            if self.use == "batch" and "goodput" in what:
                continue
            if not tps:
                lines.append(f"- Counting {what}: no request met the targets at any rate "
                             "measured, so no token was good enough to price.")
                continue
            cost = cost_per_million_tokens(price, tps)
            lines.append(f"- Counting {what}, at {sig(rate)} requests/s: ({price:g} / 3600) × "
                         f"(1,000,000 / {sig(tps)}) = **${cost:,.2f} per million tokens**")
        self.cost.object = "\n".join(lines)
        if self.use in self.by_use:
            self._refresh_uses()

    # ---- the capacity search (closed loop) ------------------------------------------------------------
    def capacity_params(self) -> dict:
        return {"ttft_p95_ms": float(self.cap_ttft_ms), "per_user_tok_s": float(self.cap_tok_s),
                "max_users": int(self.max_users), "repeats": 3, "requests_per_user": 2,
                "prompt_len": PROMPT_LEN, "output_len": OUTPUT_LEN,
                "max_batch": int(self.max_batch)}

    def search_capacity(self) -> None:
        self.capacity, self.capacity_event, self.cap_loads = None, None, []
        self.verdict.object = "*Searching: each load runs three times...*"
        self._refresh_capacity()

        def on_event(event):
            if event.type == "step" and event.data.get("kind") == "capacity_load":
                self.cap_loads.append(event_record(CapacityLoad, event.data))
                self._refresh_capacity()
            elif event.type == "result":
                self.show_capacity(event.result, event)

        self.capacity_runner.submit("capacity_search", self.capacity_params(), on_event)

    def show_capacity(self, result: CapacitySearchResult, event=None) -> None:
        self.capacity, self.capacity_event = result, event
        self.cap_loads = list(result.loads)
        self.verdict.object = (f"**{result.verdict}** (closed-loop load, batches of up to "
                               f"{result.max_batch}; {result.trials_run} runs in all.)")
        self._refresh_capacity()

    def _refresh_capacity(self) -> None:
        loads = sorted(self.cap_loads, key=lambda load: load.users)
        self.cap_table.object = html_table(
            "Each load the search measured (the median of its runs)",
            ["users", "P95 TTFT (ms)", "tokens/s each user", "median queue wait (ms)",
             "preemptions", "runs", "met both targets"],
            [[f"{load.users}", sig(load.ttft_p95_ms), sig(load.per_user_tok_s),
              sig(load.queue_ms), f"{load.preemptions}", f"{len(load.trials)}",
              "yes" if load.met else "no"] for load in loads],
            numeric=[False, True, True, True, True, True, False]) if loads else ""

    def capacity_rows(self) -> list[dict]:
        """Every run of every load, as the table's medians were taken from."""
        return [{"users": load.users, "run": i + 1, **t.to_dict(), "load_met_targets": load.met}
                for load in sorted(self.cap_loads, key=lambda load: load.users)
                for i, t in enumerate(load.trials)]

    def capacity_header(self) -> dict:
        result = self.capacity
        return result_header(self, "capacity_search", self.capacity_params(), result,
                             self.capacity_event, "search",
                             verdict=result.verdict if result else "")

    # ---- the data, to download ------------------------------------------------------------------------
    def download_rows(self) -> list[dict]:
        """The chart's points as drawn (rate order), each with the percentiles it was judged on:
        value, 95% interval, sample count and whether that count bounds it."""
        by_rate = {p.rate: p for p in self.points_seen}
        rows = []
        for drawn in self.curve.points():
            row = dict(drawn)
            point = by_rate.get(drawn["rate"])
            if point is not None:
                row["requests"] = len(point.ttft_ms)
                for what, est in self.estimates(point).items():
                    key = what.lower().replace(" ", "_")  # "P99 TTFT" -> p99_ttft
                    row.update({f"{key}_ms": est.value, f"{key}_ci_lo": est.lo,
                                f"{key}_ci_hi": est.hi, f"{key}_n": est.n,
                                f"{key}_bounded": est.bounded})
            rows.append(row)
        return rows

    def download_header(self) -> dict:
        targets = self.targets()
        return result_header(
            self, "rate_sweep", self.sweep_params(), self.sweep, self.sweep_event, "sweep",
            use=USES[self.use].label,
            targets_ms={k: v for k, v in vars(targets).items() if v is not None} or "none",
            columns="rate: offered requests/s; completed_rps, goodput_rps: requests/s completed "
                    "and within every target; *_tok_s: output tokens/s; pNN_*_ms: a percentile "
                    "with its 95% bootstrap interval (*_ci_lo, *_ci_hi; ITL has none), the "
                    "samples it rests on (*_n) and whether they are enough to bound it "
                    "(*_bounded; a P99 needs 100)")

    def _refresh_uses(self) -> None:
        if self.price_problem():
            return
        rows = []
        for use, fig in self.by_use.items():
            tps = fig.best.throughput_tok_s if use == "batch" else fig.best.goodput_tok_s
            cost = cost_per_million_tokens(self.price_per_hour, tps) if tps else None
            rows.append([USES[use].label, f"{fig.max_batch}",
                         "none" if use == "batch" else "chat targets", sig(tps),
                         f"${cost:,.2f}" if cost is not None else "-"])
        self.uses_table.object = html_table(
            "Two settings of the same knobs, as measured in this session "
            "(switch the use above to measure the other)",
            ["use", "max batch", "latency targets", "tokens/s that count", "per million tokens"],
            rows, numeric=[False, True, False, True, True])

    # ---- the page -------------------------------------------------------------------------------------
    def body(self) -> list:
        md = lambda text: pn.pane.Markdown(text, sizing_mode="stretch_width",  # noqa: E731
                                           disable_math=True)
        sweep_controls = pn.Row(
            pn.widgets.Select.from_param(self.param.use, sizing_mode="stretch_width"),
            pn.widgets.FloatInput.from_param(self.param.max_rate, step=1,
                                             sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.points, throttled=True,
                                            sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.requests, throttled=True,
                                            sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.max_batch, throttled=True,
                                            sizing_mode="stretch_width"),
            sizing_mode="stretch_width")
        price = pn.widgets.FloatInput.from_param(self.param.price_per_hour, step=0.1,
                                                 sizing_mode="stretch_width")
        return [md(INTRO), md(TARGETS_TEXT), md(QUOTE), self._target_widgets, md(SWEEP_TEXT),
                sweep_controls, self.again, self.runner.status, self.curve, self.goodput_summary,
                self.checks, self.download, md(PARETO_TEXT), self.pareto,
                self.pareto_download, md(CAPACITY_TEXT),
                pn.Row(pn.widgets.FloatInput.from_param(self.param.cap_ttft_ms, step=100,
                                                        sizing_mode="stretch_width"),
                       pn.widgets.FloatInput.from_param(self.param.cap_tok_s, step=5,
                                                        sizing_mode="stretch_width"),
                       pn.widgets.IntSlider.from_param(self.param.max_users, throttled=True,
                                                       sizing_mode="stretch_width"),
                       sizing_mode="stretch_width"),
                self.find, self.capacity_runner.status, self.verdict, self.cap_table,
                self.cap_download, md(COST_TEXT), price, self.input_error, self.cost,
                self.uses_table]

    def questions(self) -> list:
        return [
            Question("Past a certain request rate, throughput holds steady but goodput falls. "
                     "Why?", (
                Choice("Requests queue: each is still served, but its TTFT grows past the "
                       "target, so it no longer counts.", True,
                       "The engine keeps producing tokens at its capacity; the extra requests "
                       "only wait longer."),
                Choice("The engine starts producing wrong tokens.", False,
                       "The tokens are the same; they come too late."),
                Choice("Goodput is measured in different units.", False,
                       "Both are compared in requests/s (and in tokens/s) on the chart."))),
            Question("An overnight job summarizes documents; nobody reads the answers until "
                     "morning. What should you tune for?", (
                Choice("Throughput, and so the cost per token: latency targets do not matter.",
                       True, "With no one waiting, the cheapest settings (large batches, full "
                             "queues) are the right ones."),
                Choice("P99 TTFT.", False, "No one sees the first token arrive."),
                Choice("ITL, so the text flows smoothly.", False,
                       "No one watches the text flow."))),
            Question("A machine costs $2 per hour and produces 500 tokens per second. What does "
                     "a million tokens cost?", (
                Choice("About $1.11.", True,
                       "(2 / 3600) × (1,000,000 / 500) = 0.000556 × 2000 = $1.11."),
                Choice("About $0.28.", False, "Check the formula: price per second × seconds "
                                              "per million tokens."),
                Choice("About $4.00.", False, "A million tokens take 2000 s = 0.56 h at "
                                              "500 tokens/s."))),
            Question("Why set the targets before tuning the batch size?", (
                Choice("The best batch size depends on them: a larger batch makes tokens "
                       "cheaper but each user's ITL longer.", True,
                       "Without a target there is no way to say which point of the curve is "
                       "right."),
                Choice("Because the engine needs them to run.", False,
                       "The engine runs the same either way; the targets judge the result."),
                Choice("Because targets make the engine faster.", False,
                       "Targets measure; they do not speed anything up."))),
        ]
