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
lessons/words/slo_goodput.py, what it says of its numbers in lessons/slo_findings.py, the
capacity search's part in lessons/capacity_search.py, its tables and sentences in
lessons/slo_tables.py, and its analysis (pooling a rate's runs, the operating points, the curves'
trend) in engine.calc.rate_sweep; this module is its view.
"""

from __future__ import annotations

import panel as pn
import param

from engine.calc.rate_sweep import (
    MAX_RATE,
    POINTS,
    REQUESTS,
    RUNS,
    OperatingPoints,
    curve_point,
    default_sweep_params,
    operating_points,
    point_estimates,
    pool_runs,
    run_figures,
    sweep_params,
    sweep_rates,
)
from engine.calc.slo_math import CHAT, SLO, Judged, judge
from engine.calc.stats import Estimate
from engine.lab.results import (
    EndpointRateSweepResult,
    RatePoint,
    RateSweepResult,
)
from widgets.data_download import DataDownload
from widgets.html import html_pane
from widgets.pareto_chart import ParetoChart
from widgets.rate_curve import RateCurve
from widgets.tables import sig, table_pane

from .base import LessonPage
from .capacity_search import CapacitySearch
from .data_record import result_header
from .endpoint_source import EndpointSource, endpoint_label
from .job_runner import event_record
from .number_input import number_problem
from .on_a_gpu import GpuBox
from .slo_findings import attainment_question, gpu_finding, pareto_point, sweep_outcome
from .slo_tables import USES, UseFigures, checks_html, cost_text, summary_text, uses_html
from .teaching import Cached
from .words.slo_goodput import (
    CAPACITY_TEXT,
    COST_TEXT,
    INSTRUCTOR,
    INTRO,
    OBJECTIVES,
    PARETO_TEXT,
    PREDICTION,
    QUESTIONS,
    QUOTE,
    SWEEP_COLUMNS,
    SWEEP_TEXT,
    TAKEAWAY,
    TARGETS_TEXT,
)

MAX_SWEEP_S = 150.0  # a sweep expected to take longer is refused with a message


class SLOGoodputLesson(EndpointSource, CapacitySearch, LessonPage):
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

    def default_jobs(self) -> dict[str, tuple[str, dict]]:
        return {use: ("rate_sweep", self.default_sweep_params(setting.max_batch))
                for use, setting in USES.items()}

    def expected_lines(self, label: str, kind: str, cached: Cached) -> list[str]:
        setting = USES[label]
        return [f"{setting.label}, {sig(point.rate)} requests/s: {sig(j.throughput_tok_s)} "
                f"tokens/s, goodput {sig(j.goodput_rps)} requests/s, SLO attainment "
                f"{100 * (j.attainment or 0):.0f}%; this rate lasted {j.duration_s or 0:.1f} s "
                "(all its runs)"
                for point in pool_runs(cached.result.points)
                for j in (judge(point.to_dict(), setting.slo),)]

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
        return operating_points(self.judged())

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
        self.checks.object = checks_html(judged, self.slo(), self.estimates, self.run_estimates,
                                         lambda rate: len(self.runs_of(rate)))

    def _refresh_summary(self, judged) -> None:
        self.goodput_summary.object = summary_text(judged, self.operating_points(), self.use)

    def _refresh_cost(self, problem: str) -> None:
        best = self.operating_points()
        if problem or best is None:
            self.cost.object = "" if best is None else \
                "*The cost appears once the price per hour makes sense.*"
            return
        self.cost.object = cost_text(best, self.price_per_hour, self.use)
        if self.use in self.by_use:
            self._refresh_uses()

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
            columns=SWEEP_COLUMNS)

    def _refresh_uses(self) -> None:
        if self.price_problem():
            return
        self.uses_table.object = uses_html(self.by_use, self.price_per_hour)

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
                *self.capacity_widgets(), html_pane(COST_TEXT), price, self.input_error, self.cost,
                self.uses_table, self.gpu_box]
