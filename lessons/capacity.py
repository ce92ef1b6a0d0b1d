"""Lesson 12: Planning a deployment. /app?lesson=capacity

The capstone: the reader types a demand (arrival rate, prompt and output lengths), latency
targets and a price, and the page plans a deployment of this machine from the reader's own
measurements: batch points measured as lesson 4 measures them (`sweep_point`, here on the
trained tiny model that also serves the plan's load test) give each batch size's TTFT and TPOT;
the plan (engine.calc.deployment) picks the batch that meets the targets and serves the most
requests per second, and Little's law gives the replicas and the cost per million tokens. Then it checks the
plan: a `load_test` at the planned rate per replica, with the planned batch, on this machine, and
the share of requests that met both targets. The "On a GPU" box plans the same demand for
Llama-3-8B on an A100 and an H100 from their datasheets, with tensor parallelism against
replicas. Worked problems end the page, with an answer key computed by the same formulas.

URL: rate, prompt_len, output_len, ttft_target_ms, tpot_target_ms, price_per_hour,
gpu_price_per_hour: /app?lesson=capacity&rate=10&output_len=16

The lesson's words (prose, questions, instructor notes, quoted sources) are in
lessons/words/capacity.py, what it says of its plan and measurements in
lessons/capacity_findings.py, and its analysis (the plan, a sweep's measured rate, a load
test's check) in engine.calc.deployment; this module is its view.
"""

from __future__ import annotations

import html

import panel as pn
import param

from engine.calc.batch_ladder import LADDER
from engine.calc.deployment import (
    CHECK_REQUESTS,
    CHECK_SECONDS,
    FILL,
    Demand,
    Plan,
    e2e_ms,
    measured_rate,
    plan,
    replica_rps,
)
from engine.calc.rate_sweep import default_sweep_params
from engine.calc.slo_math import CHAT, CHAT_SOURCES, Targets
from engine.lab.results import LoadTestResult, SweepPointResult
from widgets.data_download import DataDownload
from widgets.html import html_pane
from widgets.tables import sig, table_pane

from .base import LessonPage
from .capacity_findings import (
    PRESET,
    check_verdict,
    gpu_finding,
    lesson_8_text,
    outcome,
    plan_text,
    points_from,
    points_table,
    replica_question,
)
from .data_record import Run, runs_header
from .on_a_gpu import GpuBox
from .teaching import Cached, Lookup, service_lookup
from .words.capacity import (
    CHECK_TEXT,
    INSTRUCTOR,
    INTRO,
    METHOD,
    OBJECTIVES,
    PREDICTION,
    QUESTIONS,
    TAKEAWAY,
    problems_html,
)


class CapacityLesson(LessonPage):
    """Lesson 12: plan replicas, batch and cost from this machine's measurements, then check."""

    slug = "capacity"
    job_noun = "measurements"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS

    rate = param.Number(default=50.0, bounds=(0.1, 1000.0), label="Arrival rate (requests/s)")
    prompt_len = param.Integer(default=64, bounds=(8, 512), label="Prompt (tokens)")
    output_len = param.Integer(default=32, bounds=(4, 128), label="Output (tokens)")
    ttft_target_ms = param.Number(default=CHAT.ttft_ms, bounds=(1.0, 60_000.0),
                                  label="TTFT target (ms)")
    tpot_target_ms = param.Number(default=CHAT.tpot_ms, bounds=(0.1, 10_000.0),
                                  label="TPOT target (ms)")
    price_per_hour = param.Number(default=1.0, bounds=(0.0, 10_000.0),
                                  label="Price of this machine per hour ($)",
                                  doc="A placeholder, not a quoted price: type yours.")
    gpu_price_per_hour = param.Number(default=4.0, bounds=(0.0, 10_000.0),
                                      label="Price of one GPU per hour ($)",
                                      doc="A placeholder, not a quoted price: type yours.")

    def __init__(self, **params):
        super().__init__(**params)
        self.results: dict[int, SweepPointResult] = {}
        self.sweep: dict[str, Run] = {}
        self.check_run: Run | None = None
        self.current: Plan | None = None
        self.points = table_pane()
        self.plan_pane = pn.pane.Markdown("", sizing_mode="stretch_width",
                                          css_classes=["capacity-plan"])
        self.check_pane = pn.pane.Markdown("", sizing_mode="stretch_width",
                                           css_classes=["capacity-check"])
        self.download = DataDownload("capacity-batch-points", self.download_rows,
                                     self.download_header, "The batch points and the plan")
        self.gpu_box = GpuBox(lambda machines: gpu_finding(
            machines, self.demand(), self.targets(), self.gpu_price_per_hour))

    # ---- inputs ----------------------------------------------------------------------------
    def demand(self) -> Demand:
        return Demand(float(self.rate), int(self.prompt_len), int(self.output_len))

    def targets(self) -> Targets:
        return Targets(float(self.ttft_target_ms), float(self.tpot_target_ms))

    def point_params(self, batch: int) -> dict:
        """Lesson 4's knob job at the same settings, so its cached points serve here too."""
        return {"preset": PRESET, "batch_size": batch, "prompt_len": int(self.prompt_len),
                "new_tokens": int(self.output_len)}

    def check_params(self, p: Plan) -> dict:
        """One replica's share of the demand, served for real at the planned batch."""
        rate = p.per_replica_rate
        lo, hi = CHECK_REQUESTS
        requests = max(lo, min(hi, round(rate * CHECK_SECONDS)))
        lengths = {"short_prompt": [p.demand.prompt_len] * 2,
                   "short_output": [p.demand.output_len] * 2}
        return {"preset": PRESET, "rate": round(rate, 3), "requests": requests,
                "long_share": 0.0, **lengths, "users": 0, "max_batch": p.batch}

    @classmethod
    def warm_jobs(cls) -> list[tuple[str, dict]]:
        page = cls()
        return [("sweep_point", page.point_params(b)) for b in LADDER]

    @classmethod
    def expected_numbers(cls, lookup: Lookup) -> list[str]:
        page = cls()
        found = {}
        for kind, params in cls.warm_jobs():
            cached = lookup(kind, params)
            if cached is not None:
                found[params["batch_size"]] = cached.result
        if not found:
            return []
        p = plan(points_from(found), page.demand(), page.targets())
        if not p.feasible:
            return [f"at the defaults: no plan ({p.why})"]
        return [f"at the defaults: batch {p.batch}, {p.replicas} replica(s), one replica "
                f"{sig(p.replica_rps)} requests/s (from {len(found)} cached batch points)"]

    # ---- jobs ------------------------------------------------------------------------------
    def start(self) -> None:
        self.gpu_box.fetch(self.jobs)
        self.measure_points()

    def measure_points(self) -> None:
        self.results.clear()
        self.check_run, self.current = None, None
        self.points.object = self.plan_pane.object = self.check_pane.object = ""
        self.sweep = {f"batch {b}": Run("sweep_point", self.point_params(b)) for b in LADDER}
        self.runner.run([(run.kind, run.params, self._point_handler(b))
                         for b, run in zip(LADDER, self.sweep.values(), strict=True)])

    def _point_handler(self, batch: int):
        def on_event(event):
            if event.type == "result":
                self.sweep[f"batch {batch}"].done(event.result, event)
                self.results[batch] = event.result
                if len(self.results) == len(LADDER):
                    self.replan(check=True)
        return on_event

    def _on_check(self, event) -> None:
        if event.type == "result" and self.check_run is not None:
            self.check_run.done(event.result, event)
            self.show_check(event.result)

    @param.depends("prompt_len", "output_len", watch=True)
    def _lengths_changed(self) -> None:
        self.gpu_box.refresh()
        if self.started:
            self.measure_points()

    @param.depends("rate", "ttft_target_ms", "tpot_target_ms", watch=True)
    def _demand_changed(self) -> None:
        self.gpu_box.refresh()
        if self.started and len(self.results) == len(LADDER):
            self.replan(check=True)

    @param.depends("price_per_hour", "gpu_price_per_hour", watch=True)
    def _price_changed(self) -> None:
        self.gpu_box.refresh()
        if self.current is not None:
            self.replan(check=False)

    # ---- results ---------------------------------------------------------------------------
    def lesson_8_sweeps(self) -> dict[int, Cached]:
        """Lesson 8's rate sweeps (at its default rates) this machine has measured, by batch
        limit, for the ladder's batches: read from the measurement cache, nothing run."""
        lookup = service_lookup(self.jobs.service)
        found = {b: lookup("rate_sweep", default_sweep_params(b))
                 for b in LADDER}
        return {b: cached for b, cached in found.items() if cached is not None}

    def replan(self, check: bool) -> None:
        """Plan from the measured points and lesson 8's sweeps where the reader ran them; with
        `check`, run the load test that checks it."""
        sweeps = self.lesson_8_sweeps()
        targets = self.targets()
        measured = {b: m for b, c in sweeps.items()
                    if (m := measured_rate(c.result, targets)) is not None}
        p = plan(points_from(self.results), self.demand(), targets, measured=measured)
        self.current = p
        self.points.object = points_table(points_from(self.results), p.demand, p.targets,
                                          p.batch)
        kv = self.results[p.batch].kv_bytes if p.feasible else None
        self.plan_pane.object = plan_text(p, float(self.price_per_hour), kv,
                                          lesson_8_text(p, sweeps) if p.feasible else "")
        self.prediction_box.reveal(outcome(p, points_from(self.results)), (
            f"{p.replicas} replica(s) at batch {p.batch}, one replica completing "
            f"{sig(p.replica_rps)} requests/s" if p.feasible else p.why))
        question = replica_question(p)
        if question is not None:
            self.checkpoint.provide("replica", question)
        if not check:
            return
        if not p.feasible:
            self.check_run = None
            self.check_pane.object = "*No load test: there is no plan to check.*"
            self.runner.cancel()
            return
        self.say(f"Plan: {p.replicas} replicas at batch {p.batch}; checking it with a load test.")
        self.runner.cancel()  # a check of the previous settings, if it still runs
        self.check_run = Run("load_test", self.check_params(p))
        self.check_pane.object = (f"*Checking: {self.check_run.params['requests']} requests at "
                                  f"{sig(p.per_replica_rate)} requests/s on one replica ...*")
        self.runner.add("load_test", self.check_run.params, self._on_check)

    def show_check(self, run: LoadTestResult) -> None:
        if self.current is None:
            return
        _, text = check_verdict(run, self.current.targets)
        self.check_pane.object = text
        self.say(text.replace("**", ""))

    def download_rows(self) -> list[dict]:
        """The batch points table, with what the plan made of each."""
        if not self.results:
            return []
        d, t = self.demand(), self.targets()
        chosen = self.current.batch if self.current else None
        rows = []
        for pt in points_from(self.results):
            e2e = e2e_ms(pt.ttft_ms, pt.tpot_ms, d.output_len)
            rows.append({"batch": pt.batch, "ttft_ms": pt.ttft_ms, "tpot_ms": pt.tpot_ms,
                         "e2e_ms": e2e, "replica_rps": replica_rps(pt.batch, e2e),
                         "within_targets": pt.ttft_ms <= t.ttft_ms and pt.tpot_ms <= t.tpot_ms,
                         "planned": pt.batch == chosen})
        return rows

    def download_header(self) -> dict:
        runs = dict(self.sweep)
        if self.check_run is not None:
            runs["check"] = self.check_run
        d, t = self.demand(), self.targets()
        return runs_header(
            self, runs,
            columns="batch: requests decoded at once; ttft_ms: prefill of that many prompts at "
                    "once; tpot_ms: median decode step; e2e_ms = ttft_ms + (output - 1) x "
                    "tpot_ms; replica_rps = batch / e2e (Little's law); within_targets: TTFT "
                    "and TPOT within the targets; planned: the batch the plan picked",
            demand=f"{d.rate_rps:g} requests/s of {d.prompt_len} + {d.output_len} tokens",
            targets=f"TTFT {t.ttft_ms:g} ms, TPOT {t.tpot_ms:g} ms", fill=FILL,
            lesson_8=self.lesson_8_summary())

    def lesson_8_summary(self) -> str:
        """What the plan took from lesson 8's rate sweep, for the download's header."""
        p = self.current
        if p is None or not p.feasible:
            return "no plan"
        m = p.measured
        if m is None:
            return (f"no rate of lesson 8's sweep at batch limit {p.batch} met the targets, or "
                    "the sweep is not measured: replicas from lesson 4's points alone")
        return (f"rate sweep at batch limit {m.batch}: up to {m.rate_rps:g} requests/s within "
                f"the targets, {m.output_tok_s:.4g} output tokens/s there; "
                f"{p.replicas_from_load} replicas by it, {p.replicas_from_points} by Little's law")

    # ---- the page --------------------------------------------------------------------------
    def body(self) -> list:
        def number(name: str, step: float):
            widget = (pn.widgets.IntInput if isinstance(self.param[name], param.Integer)
                      else pn.widgets.FloatInput)
            return widget.from_param(self.param[name], step=step, sizing_mode="stretch_width")

        demand = pn.Row(number("rate", 1.0), number("prompt_len", 8), number("output_len", 4),
                        sizing_mode="stretch_width")
        targets = pn.Row(number("ttft_target_ms", 10.0), number("tpot_target_ms", 1.0),
                         number("price_per_hour", 0.1), sizing_mode="stretch_width")
        quote = ('<blockquote class="quoted"><p><strong>Quoted, not measured here.</strong> The '
                 "default targets are a chat's, from two published examples:</p><ul>"
                 + "".join(f"<li>{what}: {html.escape(source)}.</li>"
                           for what, source in CHAT_SOURCES) + "</ul></blockquote>")
        return [html_pane(INTRO), self.prediction_box, html_pane(METHOD), demand, targets,
                html_pane(quote), self.runner.status, self.plan_pane, self.points,
                self.download, html_pane(CHECK_TEXT), self.check_pane,
                number("gpu_price_per_hour", 0.1), self.gpu_box, html_pane(problems_html())]
