"""Lesson 8: SLOs, goodput and cost. /app?lesson=slo-goodput

A request-rate sweep on the engine (`rate_sweep`: seeded Poisson workloads served at several
rates, each rate run `runs` times with other requests) gives each request's TTFT, TPOT and E2E
at each rate, and each run's totals: a rate's throughput and goodput are all its runs' tokens
(or requests) over all their time, with a 95% interval from how the runs differ
(engine.calc.stats.runs_estimate); the page judges them against the
per-request limits the reader types (TTFT, TPOT, optionally E2E: an SLO as vLLM's --goodput takes
one; engine.calc.slo_math, no new run needed), counts goodput and SLO attainment beside the run's
percentiles, draws throughput and goodput against rate (widgets.rate_curve), and prices a million
tokens from the measured throughput and a price per hour the reader types. "Interactive" and
"batch" are two settings of the same knobs: latency limits on or off, a small or a large batch.

URL: use, ttft_limit_ms, tpot_limit_ms, e2e_limit_s, price_per_hour, max_rate, points, requests,
runs, max_batch, source:
/app?lesson=slo-goodput&use=batch&price_per_hour=2.5&points=2&requests=8

With an OpenAI-compatible server configured by the teacher (engine.lab.endpoint), the source
choice sends the same sweep over HTTP to it (`endpoint_rate_sweep`, timed at the client), and the
figures are labelled with its model and host; its batch size is its own, so the slider goes.

The lesson's words (prose, questions, instructor notes, quoted sources) are in
lessons/words/slo_goodput.py; this module is its view.
"""

from __future__ import annotations

from dataclasses import dataclass

import panel as pn
import param

from engine.calc.gpu_scaling import LLAMA_3_8B, Machine, decode_step, kv_capacity, step_floor_ms
from engine.calc.rate_sweep import (
    MAX_RATE,
    OUTPUT_LEN,
    POINTS,
    PROMPT_LEN,
    REQUESTS,
    RUNS,
    default_sweep_params,
    point_estimates,
    pool_runs,
    run_figures,
    sweep_params,
    sweep_rates,
)
from engine.calc.slo_math import (
    CHAT,
    SLO,
    Judged,
    cost_per_million_tokens,
    judge,
)
from engine.calc.stats import Estimate, min_samples
from engine.lab.results import (
    CapacityLoad,
    CapacitySearchResult,
    EndpointRateSweepResult,
    RatePoint,
    RateSweepResult,
)
from widgets.checkpoint import Question, numeric_question
from widgets.data_download import DataDownload
from widgets.html import html_pane
from widgets.job_status import JobStatus
from widgets.pareto_chart import ParetoChart
from widgets.rate_curve import RateCurve
from widgets.tables import UNBOUNDED, html_table, interval_text, sig, table_pane, with_interval

from .base import LessonPage
from .data_record import result_header
from .endpoint_source import EndpointSource, endpoint_label
from .job_runner import JobRunner, event_record
from .number_input import number_problem
from .on_a_gpu import GpuBox, machine_table
from .teaching import Lookup
from .words.slo_goodput import (
    CAPACITY_TEXT,
    COST_TEXT,
    GPU_TEXT,
    INSTRUCTOR,
    INTRO,
    OBJECTIVES,
    PARETO_TEXT,
    PREDICTION,
    QUESTIONS,
    QUOTE,
    SWEEP_TEXT,
    TAKEAWAY,
    TARGETS_TEXT,
)


@dataclass(frozen=True)
class Use:
    """A use of the same engine: its per-request latency limits (none for batch) and its batch
    size."""

    label: str
    max_batch: int
    slo: SLO


USES = {"interactive": Use("interactive chat", 8, CHAT),
        "batch": Use("overnight batch", 32, SLO())}
MAX_SWEEP_S = 150.0  # a sweep expected to take longer is refused with a message


GPU_CONTEXT = 1000  # tokens cached per sequence


def gpu_finding(machines: list[Machine], tpot_limit_ms: float | None, price: float | None) -> str:
    """Lesson 8's finding on each machine: the largest batch whose decode step can stay within
    the TPOT limit (Llama-3-8B, bf16), what it could produce at most, and its cost."""
    if not tpot_limit_ms or tpot_limit_ms <= 0:
        return "<p>Type a TPOT limit above to see what it allows on each machine.</p>"

    found: dict[str, int | None] = {}

    def batch(m: Machine) -> int | None:
        if m.name not in found:
            best = None
            for b in range(1, (kv_capacity(LLAMA_3_8B, m, GPU_CONTEXT) or 4096) + 1):
                if step_floor_ms(decode_step(LLAMA_3_8B, b, GPU_CONTEXT), m) > tpot_limit_ms:
                    break
                best = b
            found[m.name] = best
        return found[m.name]

    def tokens(m: Machine) -> float | None:
        b = batch(m)
        return None if b is None else b * 1000 / step_floor_ms(
            decode_step(LLAMA_3_8B, b, GPU_CONTEXT), m)

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
    if len(judged) < 2 or any(j.duration_s is None for _p, j in judged):
        return None
    (_p0, before), (top_p, top) = judged[-2], judged[-1]
    best_good = max(j.goodput_rps or 0 for _p, j in judged)
    falls = (top.goodput_rps or 0) < 0.9 * best_good
    rising = (top.throughput_tok_s or 0) >= 1.5 * (before.throughput_tok_s or 0)
    choice = {(True, False): "Throughput levels off while goodput falls",
              (False, True): "Both keep rising with the rate",
              (True, True): "Goodput falls while throughput still rises",
              (False, False): "Both level off together"}[(falls, rising)]
    return choice, (f"at {sig(top_p.rate)} requests/s: throughput {sig(top.throughput_tok_s)} "
                    f"tokens/s (x{(top.throughput_tok_s or 0) / (before.throughput_tok_s or 1):.2f} "
                    f"on the rate before), goodput {sig(top.goodput_rps)} requests/s against a "
                    f"best of {sig(best_good)}")


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


def capacity_ttft(load: CapacityLoad) -> str:
    """A load's P95 TTFT with its 95% interval, † when its requests cannot bound a P95 (a load
    whose record carries no request count shows the figure alone)."""
    if load.requests is None:
        return sig(load.ttft_p95_ms)
    return with_interval(load.ttft_p95_ms, Estimate(
        "P95", load.ttft_p95_ms, load.ttft_ci_lo, load.ttft_ci_hi, load.requests,
        bool(load.ttft_bounded)))



def curve_point(rate: float, figures: dict[str, Estimate]) -> dict:
    """A rate on the rate curve: each figure, its interval when its runs bound one, and the
    number of runs."""
    row: dict = {"rate": rate, "runs": None}
    for field, est in figures.items():
        row[field] = est.value
        row["runs"] = est.n
        if est.bounded:
            row.update({f"{field}_lo": est.lo, f"{field}_hi": est.hi})
    return row


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



class SLOGoodputLesson(EndpointSource, LessonPage):
    """Lesson 8: the SLO first, then throughput, goodput, attainment and the cost of a token."""

    slug = "slo-goodput"
    job_noun = "rate sweeps"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS

    use = param.Selector(default="interactive", objects=list(USES), label="Use",
                         doc="interactive: chat limits, batch of 8; batch: no latency limits, "
                             "batch of 32.")
    ttft_limit_ms = param.Number(default=CHAT.ttft_ms, allow_None=True,
                                 label="TTFT limit per request (ms)")
    tpot_limit_ms = param.Number(default=CHAT.tpot_ms, allow_None=True,
                                 label="TPOT limit per request (ms)")
    e2e_limit_s = param.Number(default=None, allow_None=True,
                               label="E2E limit per request (s, optional)")
    price_per_hour = param.Number(default=1.0, allow_None=True,
                                  label="Price of the machine per hour ($)",
                                  doc="What this machine costs you per hour; a placeholder, "
                                      "not a quoted price.")
    max_rate = param.Number(default=MAX_RATE, bounds=(0.1, 256.0),
                            label="Highest request rate (/s)")
    points = param.Integer(default=POINTS, bounds=(2, 8), label="Rates measured")
    requests = param.Integer(default=REQUESTS, bounds=(4, 64), label="Requests per run")
    runs = param.Integer(default=RUNS, bounds=(1, 5), label="Runs per rate",
                         doc="Each rate is run this many times, each run with other requests; "
                             "the points' intervals come from how the runs differ.")
    max_batch = param.Integer(default=8, bounds=(1, 64), label="Max batch")
    cap_ttft_ms = param.Number(default=1000.0, bounds=(1.0, 600_000.0),
                               label="Capacity: P95 TTFT at most (ms)")
    cap_tok_s = param.Number(default=20.0, bounds=(0.0, 100_000.0),
                             label="Capacity: tokens/s each user at least")
    max_users = param.Integer(default=32, bounds=(1, 64), label="Capacity: most users to try")

    def __init__(self, **params):
        super().__init__(**params)
        self.sweep: RateSweepResult | EndpointRateSweepResult | None = None
        self.sweep_event = None  # the sweep's result event: cached or fresh, when, where
        self.points_seen: list[RatePoint] = []
        self.by_use: dict[str, UseFigures] = {}  # use -> its figures, as measured this session
        self.curve = RateCurve()
        self.input_error = pn.pane.Alert("", alert_type="warning", visible=False,
                                         sizing_mode="stretch_width")
        self.checks = table_pane(css_classes=["slo-checks"])
        self._estimates: dict[int, tuple[RatePoint, dict[str, Estimate]]] = {}  # by id(point)
        self._pooled: tuple[tuple[int, ...], list[RatePoint]] = ((), [])  # runs seen, pooled
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
        self.measured_at = pn.pane.Markdown("", sizing_mode="stretch_width",
                                            css_classes=["measured-at"])
        self._batch_slider = pn.widgets.IntSlider.from_param(
            self.param.max_batch, throttled=True, sizing_mode="stretch_width",
            visible=not self.measures_endpoint)
        self.again = pn.widgets.Button(label="Measure again (not from the cache)")
        self.again.on_click(lambda _e: self.start(fresh=True))
        self.gpu_box = GpuBox(lambda machines: gpu_finding(
            machines, self.tpot_limit_ms if self.use == "interactive" else None,
            self.price_per_hour))
        number = lambda p, step: pn.widgets.FloatInput.from_param(  # noqa: E731
            p, step=step, sizing_mode="stretch_width")
        self._target_widgets = pn.Row(
            number(self.param.ttft_limit_ms, 50), number(self.param.tpot_limit_ms, 10),
            number(self.param.e2e_limit_s, 1), sizing_mode="stretch_width",
            visible=self.use == "interactive")
        self._refresh()

    # ---- inputs ---------------------------------------------------------------------------------------
    def slo(self) -> SLO:
        """The per-request limits the reader set (none for batch use)."""
        if self.use == "batch":
            return SLO()
        e2e = None if self.e2e_limit_s is None else 1000 * self.e2e_limit_s
        return SLO(self.ttft_limit_ms, self.tpot_limit_ms, e2e)

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
        for name in ("ttft_limit_ms", "tpot_limit_ms", "e2e_limit_s"):
            problem = number_problem(  # empty is allowed: no such limit
                getattr(self, name), lo=0, above=True,
                low=f"{self.param[name].label} is {{value:g}}: a limit must be more than 0 "
                    "(leave it empty to drop it).")
            if problem:
                return problem
        return ""

    def expected_seconds(self) -> float:
        """About how long the sweep's arrivals last (requests / rate, summed over the runs)."""
        return self.runs * sum(self.requests / r for r in sweep_rates(self.max_rate, self.points))

    # ---- jobs -----------------------------------------------------------------------------------------
    def sweep_params(self) -> dict:
        return sweep_params(self.max_rate, self.points, self.requests, self.runs, self.max_batch)

    @classmethod
    def default_sweep_params(cls, max_batch: int) -> dict:
        """This lesson's sweep at its default rates, requests and runs and at a batch limit:
        the job lesson 12 looks up in the cache to use this lesson's measurement of a replica."""
        return default_sweep_params(max_batch)

    def sweep_job(self) -> tuple[str, dict]:
        """The built-in engine's sweep, or the same sweep sent to the teacher's endpoint."""
        if self.measures_endpoint:
            params = {k: v for k, v in self.sweep_params().items() if k != "max_batch"}
            return "endpoint_rate_sweep", {**params, "url": self.endpoint.url,
                                           "model": self.endpoint.model}
        return "rate_sweep", self.sweep_params()

    @classmethod
    def expected_numbers(cls, lookup: Lookup) -> list[str]:
        lines = []
        for (kind, params), setting in zip(cls.warm_jobs(), USES.values(), strict=True):
            cached = lookup(kind, params)
            if cached is None:
                continue
            for point in pool_runs(cached.result.points):
                j = judge(point.to_dict(), setting.slo)
                lines.append(
                    f"{setting.label}, {sig(point.rate)} requests/s: "
                    f"{sig(j.throughput_tok_s)} tokens/s, goodput {sig(j.goodput_rps)} "
                    f"requests/s, SLO attainment {100 * (j.attainment or 0):.0f}%; this rate "
                    f"lasted {j.duration_s or 0:.1f} s (all its runs)")
        return lines

    @classmethod
    def warm_jobs(cls) -> list[tuple[str, dict]]:
        return [("rate_sweep", cls.default_sweep_params(use.max_batch)) for use in USES.values()]

    def start(self, fresh: bool = False) -> None:
        self.gpu_box.fetch(self.jobs)
        self.sweep = None
        self.points_seen = []
        self.curve.set_points([])
        if self.expected_seconds() > MAX_SWEEP_S:
            self.runner.cancel()
            self.runner.status.error.message = (
                f"This sweep would take about {self.expected_seconds():.0f} s of arrivals alone "
                f"(more than {MAX_SWEEP_S:.0f} s): raise the highest rate, measure fewer rates, "
                "run each fewer times, or send fewer requests per run.")
            self._refresh()
            return
        use = self.use

        def on_event(event):
            if event.type == "step" and event.data.get("kind") == "rate_point":
                self.points_seen.append(event_record(RatePoint, event.data))
                self._refresh()
            elif event.type == "result":
                self.show_sweep(event.result, use, event)

        kind, params = self.sweep_job()
        self.runner.run([(kind, params, on_event)], use_cache=not fresh)
        self._refresh()

    @param.depends("max_rate", "points", "requests", "runs", "max_batch", "source", watch=True)
    def _sweep_changed(self) -> None:
        self._batch_slider.visible = not self.measures_endpoint
        if self.started:
            self.start()

    @param.depends("use", watch=True)
    def _use_changed(self) -> None:
        """Switching use moves the knobs: the latency limits (on or off) and the batch size."""
        setting = USES[self.use]
        if self.use == "interactive":
            slo = setting.slo
            self.param.update(ttft_limit_ms=slo.ttft_ms, tpot_limit_ms=slo.tpot_ms,
                              e2e_limit_s=None if slo.e2e_ms is None else slo.e2e_ms / 1000)
        self._target_widgets.visible = self.use == "interactive"
        args = pn.state.session_args if pn.state.curdoc is not None else {}
        if self.started or "max_batch" not in args:  # a link's own max_batch wins at first
            self.max_batch = setting.max_batch  # re-measures if it changed
        self._refresh()

    @param.depends("ttft_limit_ms", "tpot_limit_ms", "e2e_limit_s", "price_per_hour",
                   watch=True)
    def _inputs_changed(self) -> None:
        self._refresh()
        self.gpu_box.refresh()

    # ---- results --------------------------------------------------------------------------------------
    def show_sweep(self, sweep: RateSweepResult | EndpointRateSweepResult, use: str, event=None) -> None:
        self.sweep, self.sweep_event = sweep, event
        self.points_seen = list(sweep.points)
        self._refresh()
        if self.goodput_summary.object:
            self.say(self.goodput_summary.object)
        best = self.operating_points()
        if isinstance(sweep, EndpointRateSweepResult):  # its batch size is the server's own
            return
        if best is not None and use == self.use:
            self.by_use[use] = UseFigures(best, sweep.max_batch, sweep.device)
            self._refresh_uses()

    def judged(self) -> list[tuple[RatePoint, Judged]]:
        """Each rate's runs pooled (pool_runs), judged against the SLO."""
        slo = self.slo()
        return [(p, judge(p.to_dict(), slo)) for p in self.pooled()]

    def pooled(self) -> list[RatePoint]:
        """pool_runs of the runs seen, once per set of runs (the points' estimates are kept by
        point, and bootstrapping them again on every keystroke would be slow)."""
        runs = tuple(id(p) for p in self.points_seen)
        if self._pooled[0] != runs:
            self._pooled = (runs, pool_runs(self.points_seen))
        return self._pooled[1]

    def runs_of(self, rate: float) -> list[RatePoint]:
        return [p for p in self.points_seen if p.rate == rate]

    def estimates(self, point: RatePoint) -> dict[str, Estimate]:
        """point_estimates, once per measured point (the limits change, the samples do not)."""
        kept = self._estimates.get(id(point))
        if kept is None or kept[0] is not point:
            kept = (point, point_estimates(point))
            self._estimates = {k: v for k, v in self._estimates.items()
                               if any(v[0] is p for p in self.pooled())}
            self._estimates[id(point)] = kept
        return kept[1]

    def run_estimates(self, rate: float) -> dict[str, Estimate]:
        """Each figure of the rate curve at this rate from its runs (runs_estimate)."""
        return run_figures(self.runs_of(rate), self.slo())

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
        self.curve.set_points([curve_point(p.rate, self.run_estimates(p.rate)) for p, _j in judged])
        self._refresh_checks(judged)
        self.pareto.set_points([pareto_point(p, j, self.estimates(p)["P50 TPOT"],
                                             self.run_estimates(p.rate)["throughput_tok_s"])
                                for p, j in judged])
        self._refresh_summary(judged)
        self._refresh_cost(problem)
        if judged and self.use == "interactive" and not problem:
            outcome = sweep_outcome(judged) if self.sweep is not None else None
            if outcome is not None:
                self.prediction_box.reveal(*outcome)
            question = attainment_question(*judged[-1])
            if question is not None:
                self.checkpoint.provide("attainment", question)
        self._refresh_measured_at()

    def _refresh_measured_at(self) -> None:
        """Which server the figures are from, when it is the teacher's endpoint."""
        sweep = self.sweep
        if not isinstance(sweep, EndpointRateSweepResult):
            self.measured_at.object = ""
            return
        failed = sum(p.failed or 0 for p in sweep.points)
        self.measured_at.object = (
            f"Measured over HTTP: **{endpoint_label(sweep.base_url, sweep.model)}**, timed at "
            "this app's server (the client, so the network is included)"
            + (f"; {failed} request(s) failed and are left out." if failed else "."))

    def _refresh_checks(self, judged) -> None:
        slo = self.slo()
        if slo.empty:
            head = ["offered rate (req/s)", "P50 TTFT (ms)", "P99 TTFT (ms)", "P50 TPOT (ms)",
                    "P99 TPOT (ms)", "requests", "runs"]
            rows = []
            for p, _j in judged:
                est = self.estimates(p)
                rows.append([sig(p.rate), *[with_interval(est[w].value, est[w]) for w in (
                    "P50 TTFT", "P99 TTFT", "P50 TPOT", "P99 TPOT")], f"{len(p.ttft_ms)}",
                    f"{len(self.runs_of(p.rate))}"])
            self.checks.object = html_table(
                "No latency limits (batch use): every completed request counts", head, rows,
                numeric=[False] + [True] * 6) + self._interval_note(judged)
            return
        head = ["offered rate (req/s)"]
        rows = []
        for p, j in judged:
            if len(head) == 1:
                head += [f"{what} (limit {sig(limit)} ms)" for what, _v, limit, _m in j.checks]
                head += ["requests"] + [f"within the {name} limit" for name, _n in j.met_each]
                head += ["SLO attainment (every limit)", "goodput (req/s)", "runs"]
            est = self.estimates(p)
            good = self.run_estimates(p.rate)["goodput_rps"]
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
        self.checks.object = html_table(
            "Each rate: the percentiles against the limits (✓ within, ✗ over), and the share "
            "of requests within them", head, rows,
            numeric=[False] + [True] * (len(head) - 1)) + self._interval_note(judged)

    def _interval_note(self, judged) -> str:
        """What the brackets and the dagger mean, with the counts they depend on."""
        if not judged:
            return ""
        few = any(not e.bounded for p, _j in judged for e in self.estimates(p).values()
                  if e.value is not None)
        text = ("In brackets: the 95% confidence interval of a percentile (a bootstrap over the "
                "requests at that rate, all its runs together, counted beside them) and of "
                "goodput (from how the rate's runs differ, counted beside it; one run gives "
                "none). The engine was warmed up before the first rate; its warm-up steps are "
                "in no figure.")
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
            text = (f"With no latency limits, goodput is throughput: at the highest rate "
                    f"measured ({sig(top_p.rate)} requests/s) the engine completed "
                    f"{sig(top_j.requests_per_s)} requests/s, {sig(top_j.throughput_tok_s)} "
                    "output tokens/s.")
        else:
            text = (f"Best goodput: **{sig(best.goodput_rps)} requests/s** "
                    f"({sig(best.goodput_tok_s)} tokens/s of answers within the SLO) at "
                    f"an offered {sig(best.goodput_rate)} requests/s. At "
                    f"{sig(top_p.rate)} requests/s the engine still completed "
                    f"{sig(top_j.requests_per_s)} requests/s, but only {top_j.good} of "
                    f"{top_j.completed} requests met every limit: an SLO attainment of "
                    f"{100 * (top_j.attainment or 0):.0f}%.")
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
                ("only tokens within the SLO (chat use: goodput)", best.goodput_tok_s,
                 best.goodput_rate)):
            if self.use == "batch" and "goodput" in what:
                continue
            if not tps:
                lines.append(f"- Counting {what}: no request met the SLO at any rate "
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
                "per_doubling": 4,
                "prompt_len": PROMPT_LEN, "output_len": OUTPUT_LEN,
                "max_batch": int(self.max_batch)}

    def search_capacity(self) -> None:
        self.capacity, self.capacity_event, self.cap_loads = None, None, []
        self.verdict.object = "*Searching: a load near the targets runs up to three times...*"
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
        again = (f", {result.disturbed_reruns} of them again after a disturbed run"
                 if result.disturbed_reruns else "")
        self.verdict.object = (f"**{result.verdict}** (closed-loop load, batches of up to "
                               f"{result.max_batch}; {result.trials_run} runs in all{again}.)")
        self._refresh_capacity()

    def _refresh_capacity(self) -> None:
        loads = sorted(self.cap_loads, key=lambda load: load.users)
        self.cap_table.object = html_table(
            "Each load the search measured, judged on the requests of all its runs: P95 TTFT "
            f"and tokens/s each user (1000 / the median request's TPOT), each with its 95% "
            f"interval [low–high]; {UNBOUNDED} too few requests to bound a P95 (needs "
            f"{min_samples(95)})",
            ["users", "P95 TTFT (ms)", "tokens/s each user", "median queue wait (ms)",
             "preemptions", "runs", "requests", "met both targets"],
            [[f"{load.users}", capacity_ttft(load),
              interval_text(load.per_user_tok_s, load.per_user_ci_lo, load.per_user_ci_hi),
              sig(load.queue_ms), f"{load.preemptions}", f"{len(load.trials)}",
              "-" if load.requests is None else f"{load.requests}",
              "yes" if load.met else "no"] for load in loads],
            numeric=[False, True, True, True, True, True, True, False]) if loads else ""

    def capacity_rows(self) -> list[dict]:
        """Every run of every load (each run's own figures), with its load's pooled figures."""
        pooled = ("ttft_p95_ms", "ttft_ci_lo", "ttft_ci_hi", "requests", "ttft_bounded",
                  "per_user_tok_s", "per_user_ci_lo", "per_user_ci_hi")
        return [{"users": load.users, "run": i + 1, **t.to_dict(),
                 **{f"load_{k}": getattr(load, k) for k in pooled}, "load_met_targets": load.met}
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
        by_rate = {p.rate: p for p in self.pooled()}  # all runs of a rate
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
        slo = self.slo()
        kind, params = self.sweep_job()
        return result_header(
            self, kind, params, self.sweep, self.sweep_event, "sweep",
            use=USES[self.use].label,
            slo_limits_ms={k: v for k, v in vars(slo).items() if v is not None} or "none",
            columns="rate: offered requests/s; completed_rps, goodput_rps: requests/s completed "
                    "and within every limit of the SLO; *_tok_s: output tokens/s; each of those "
                    "all the rate's runs' requests or tokens over all their seconds, with its "
                    "95% interval over the runs (*_lo, *_hi; none from one run); runs: how many; "
                    "requests: all the runs' requests; pNN_*_ms: a "
                    "percentile with its 95% bootstrap interval (*_ci_lo, *_ci_hi), the "
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
                         "none" if use == "batch" else "chat limits", sig(tps),
                         f"${cost:,.2f}" if cost is not None else "-"])
        self.uses_table.object = html_table(
            "Two settings of the same knobs, as measured in this session "
            "(switch the use above to measure the other)",
            ["use", "max batch", "latency limits", "tokens/s that count", "per million tokens"],
            rows, numeric=[False, True, False, True, True])

    # ---- the page -------------------------------------------------------------------------------------
    def body(self) -> list:
        sweep_controls = pn.Row(
            pn.widgets.Select.from_param(self.param.use, sizing_mode="stretch_width"),
            pn.widgets.FloatInput.from_param(self.param.max_rate, step=1,
                                             sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.points, throttled=True,
                                            sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.requests, throttled=True,
                                            sizing_mode="stretch_width"),
            self._batch_slider, sizing_mode="stretch_width")
        price = pn.widgets.FloatInput.from_param(self.param.price_per_hour, step=0.1,
                                                 sizing_mode="stretch_width")
        return [html_pane(INTRO), html_pane(TARGETS_TEXT), html_pane(QUOTE),
                self._target_widgets, self.prediction_box, html_pane(SWEEP_TEXT),
                *self.source_widgets(), sweep_controls, self.again, self.runner.status,
                self.measured_at, self.curve, self.goodput_summary,
                self.checks, self.download, html_pane(PARETO_TEXT), self.pareto,
                self.pareto_download, html_pane(CAPACITY_TEXT),
                pn.Row(pn.widgets.FloatInput.from_param(self.param.cap_ttft_ms, step=100,
                                                        sizing_mode="stretch_width"),
                       pn.widgets.FloatInput.from_param(self.param.cap_tok_s, step=5,
                                                        sizing_mode="stretch_width"),
                       pn.widgets.IntSlider.from_param(self.param.max_users, throttled=True,
                                                       sizing_mode="stretch_width"),
                       sizing_mode="stretch_width"),
                self.find, self.capacity_runner.status, self.verdict, self.cap_table,
                self.cap_download, html_pane(COST_TEXT), price, self.input_error, self.cost,
                self.uses_table, self.gpu_box]
