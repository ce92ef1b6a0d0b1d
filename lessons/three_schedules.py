"""Lesson 3: Three schedules (static, dynamic, continuous batching). /app?lesson=three-schedules

One seeded arrival trace (same requests, same arrival times) served in real time by the engine
under the chosen policy (the `serve_run` job): open loop (Poisson arrivals at a rate) or closed
loop (concurrent users, each sending again when answered: the "fixed" workload). Lanes
(widgets.request_lanes) draw each request's queued and running time live as the run happens,
then exactly from the trace; a table compares
the policies measured so far for these settings: mean wait and run, P95 TTFT, throughput, and
how full the batch slots were.

URL: policy, max_batch, timeout_ms, load (open or closed), rate, users, requests
(/app?lesson=three-schedules&policy=dynamic, /app?lesson=three-schedules&load=closed&users=6).
"""

from __future__ import annotations

import html
import statistics
from dataclasses import dataclass

import panel as pn
import param

from engine.calc.gpu_scaling import LLAMA_3_8B, Machine, decode_step, step_floor_ms
from engine.calc.stats import Estimate, estimate, min_samples
from engine.lab.results import ServeRunResult, StepRecord
from widgets.checkpoint import Choice, Question
from widgets.data_download import DataDownload
from widgets.html import html_pane, site_html
from widgets.job_status import provenance
from widgets.readouts import table_html
from widgets.request_lanes import RequestLanes
from widgets.tables import UNBOUNDED, sig, with_interval

from .base import LessonPage
from .data_record import Run, check_cell, result_header, spread_cell
from .job_runner import event_record
from .load_model import CLOSED, LOADS, OPEN
from .on_a_gpu import GpuBox, machine_table
from .teaching import Cached, which_is_larger
from .trace_reading import fmt_ms, request_latencies
from .words.three_schedules import (
    GPU_TEXT,
    INSTRUCTOR,
    INTRO,
    OBJECTIVES,
    PREDICTION,
    PROSE,
    QUESTIONS,
    TAKEAWAY,
)

POLICIES = ("static", "dynamic", "continuous")
WORKLOAD = {"workload": "poisson", "prompt_len": [16, 128], "output_len": [8, 96], "seed": 0,
            "chunk_size": 128, "stream_tokens": False}

@dataclass(frozen=True)
class PolicySummary:
    """One policy's run in the comparison table; origin: "cached" or "measured live"."""

    policy: str
    wait_ms: float | None
    run_ms: float | None
    e2e_ms: float | None
    ttft_p95_ms: float | None
    throughput: float | None
    slot_use: float | None
    origin: str = "measured live"
    steps_spread: str = "\u2013"  # its engine steps' p10-p90 (ms)
    check: str = "not checked"  # data_record.check_cell: quiet, DISTURBED: why, not checked
    # wait, run, e2e (means) and ttft (P95): each figure's 95% interval over the run's requests
    estimates: dict[str, Estimate] | None = None

    def cell(self, key: str, value: float | None) -> str:
        """A table cell: the figure with its 95% interval, † for a P95 too few requests bound."""
        return with_interval(value, (self.estimates or {}).get(key))


def wait_outcome(summary: PolicySummary) -> tuple[str, str] | None:
    """Which prediction choice a static run supports: mean wait against mean run (25%)."""
    wait, run = summary.wait_ms, summary.run_ms
    if wait is None or not run:
        return None
    waits, same, runs = PREDICTION.choices
    choice = which_is_larger(wait, run, 0.25, (waits, runs, same))
    return choice, f"mean wait {fmt_ms(wait)} ms, mean run {fmt_ms(run)} ms"


def p95_question(summaries: dict[str, PolicySummary]) -> Question | None:
    """Which policy gave the lowest P95 TTFT in the reader's own table (the key is theirs)."""
    if len(summaries) < len(POLICIES) or any(
            summaries[p].ttft_p95_ms is None for p in POLICIES):
        return None
    best = min(POLICIES, key=lambda p: summaries[p].ttft_p95_ms)
    figures = ", ".join(f"{p} {fmt_ms(summaries[p].ttft_p95_ms)} ms" for p in POLICIES)
    return Question(
        "In your table, which policy gave the lowest P95 TTFT for this trace?",
        tuple(Choice(p, p == best, f"Your runs: {figures}." + (
            " Refilling slots at every step keeps the queue short." if p == best == "continuous"
            else "")) for p in POLICIES))


def policy_summary(run: ServeRunResult, origin: str = "measured live") -> PolicySummary:
    """Mean wait, mean run, mean wait + run (E2E), P95 TTFT, throughput and slot use of a run."""
    rows = request_latencies(run)
    m = run.metrics
    runs = [r.finish_ms - r.admitted_ms for r in rows]
    return PolicySummary(
        policy=run.policy,
        wait_ms=statistics.mean(r.queue_ms for r in rows) if rows else None,
        run_ms=statistics.mean(runs) if rows else None,
        e2e_ms=m.e2e_ms.mean, ttft_p95_ms=m.ttft_ms.p95, throughput=m.throughput_tok_s,
        slot_use=m.slot_use, origin=origin, steps_spread=spread_cell(run),
        check=check_cell(run),
        estimates={"wait": estimate([r.queue_ms for r in rows]), "run": estimate(runs),
                   "e2e": estimate([r.e2e_ms for r in rows]),
                   "ttft": estimate([r.ttft_ms for r in rows], 95)})


def run_load(run: ServeRunResult) -> tuple[str, float | int]:
    """How a run's requests came: (CLOSED, users) or (OPEN, arrival rate)."""
    w = run.workload
    return (CLOSED, int(w.concurrency)) if w.kind == "fixed" else (OPEN, float(w.rate))


def lanes_rows(run: ServeRunResult) -> list[dict]:
    """The run's requests as widgets.request_lanes wants them (ms from the run's start)."""
    return [{"id": r.id, "arrival_ms": r.arrival_ms, "admitted_ms": r.admitted_ms,
             "first_token_ms": r.first_token_ms, "finish_ms": r.finish_ms}
            for r in request_latencies(run)]


GPU_MODEL = LLAMA_3_8B
GPU_CONTEXT = 500  # tokens cached per sequence
GPU_BATCHES = (1, 4, 16)


def gpu_finding(machines: list[Machine]) -> str:
    """Lesson 3's finding on each machine: the decode step's floor and the tokens per second
    it allows at a few batch sizes (what an empty slot forgoes)."""
    def step(m: Machine, b: int) -> float:
        return step_floor_ms(decode_step(GPU_MODEL, b, GPU_CONTEXT), m)

    columns = [(f"step at batch {b} (ms)", lambda m, b=b: sig(step(m, b))) for b in GPU_BATCHES]
    columns += [(f"tokens/s at batch {b}", lambda m, b=b: f"{1000 * b / step(m, b):,.0f}")
                for b in GPU_BATCHES]
    return GPU_TEXT + machine_table(
        machines, columns, f"{GPU_MODEL.name} in bf16, {GPU_CONTEXT} tokens cached each: "
                           "decode-step floors")


class ThreeSchedulesLesson(LessonPage):
    """Lesson 3: one arrival trace under static, dynamic and continuous batching."""

    slug = "three-schedules"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS

    policy = param.Selector(default="static", objects=list(POLICIES), label="Policy")
    max_batch = param.Integer(default=4, bounds=(1, 16), label="Batch slots (max batch)")
    timeout_ms = param.Number(default=100.0, bounds=(0.0, 1000.0), step=10.0,
                              label="Dynamic timeout (ms)")
    load = param.Selector(default=OPEN, objects=LOADS, label="Load")
    rate = param.Number(default=10.0, bounds=(1.0, 40.0), step=1.0,
                        label="Arrival rate (requests per second, open loop)")
    users = param.Integer(default=4, bounds=(1, 16), label="Concurrent users (closed loop)")
    requests = param.Integer(default=16, bounds=(4, 48), label="Requests")

    def __init__(self, **params):
        super().__init__(**params)
        self.lanes = RequestLanes(height=360)
        self.gpu_box = GpuBox(gpu_finding)
        self.runs: dict[tuple, PolicySummary] = {}  # (settings..., policy) -> its summary
        self.result: ServeRunResult | None = None
        self.shown: Run | None = None  # the run the lanes draw, for their download
        self._prefill_end: dict[int, float] = {}
        self.compare = pn.widgets.Button(label="Compare all three", color="default",
                                         width=180)
        self.compare.on_click(lambda _e: self.run_others())
        self.lane_text = html_pane("", css_classes=["lanes-summary"])
        self.table = html_pane("", css_classes=["policy-table"])
        self.measured_on = html_pane("", css_classes=["measurement-label"])
        self.download = DataDownload("request-lanes", self.lanes.times, self.download_header,
                                     "Each request's moments")
        self.param.watch(lambda _e: self.run(), ["policy"])
        self.param.watch(lambda _e: self._load_changed(), ["load"])

    @property
    def closed(self) -> bool:
        return self.load == CLOSED

    def settings(self) -> tuple:
        load = (CLOSED, int(self.users)) if self.closed else (OPEN, float(self.rate))
        return (*load, int(self.requests), int(self.max_batch), float(self.timeout_ms))

    def job_params(self, policy: str | None = None) -> dict:
        params = {**WORKLOAD, "policy": policy or self.policy, "rate": float(self.rate),
                  "requests": int(self.requests), "max_batch": int(self.max_batch),
                  "timeout_ms": float(self.timeout_ms)}
        if self.closed:  # the rate is not used: kept at its default, one cache entry per users
            params.update(workload="fixed", concurrency=int(self.users),
                          rate=self.param.rate.default)
        return params

    def load_words(self) -> str:
        """How the requests come, for the measurement label."""
        if self.closed:
            return (f"a closed loop of {self.users} concurrent users, each sending their next "
                    "request when their answer ends")
        return f"Poisson arrivals at {self.rate:g} per second"

    def body(self) -> list:
        policy = pn.widgets.RadioButtonGroup.from_param(self.param.policy, color="primary",
                                                        variant="outline")
        self._load_widgets = {
            OPEN: pn.widgets.FloatSlider.from_param(self.param.rate),
            CLOSED: pn.widgets.IntSlider.from_param(self.param.users)}
        sliders = [pn.widgets.IntSlider.from_param(self.param.max_batch),
                   pn.widgets.FloatSlider.from_param(self.param.timeout_ms),
                   *self._load_widgets.values(),
                   pn.widgets.IntSlider.from_param(self.param.requests)]
        for s in sliders:  # measure on release, not on every pixel of a drag
            s.sizing_mode = "stretch_width"
            s.param.watch(lambda _e: self.run(), "value_throttled")
        load = pn.widgets.RadioButtonGroup.from_param(self.param.load, sizing_mode="stretch_width")
        self._show_load()
        return [
            html_pane(INTRO), self.prediction_box,
            html_pane("<h2>One trace, three policies</h2>"),
            pn.Row(pn.Column(policy, load, *sliders, self.compare, width=330),
                   pn.Column(self.lanes, self.runner.status, self.lane_text,
                             sizing_mode="stretch_width"), sizing_mode="stretch_width"),
            self.measured_on, self.download, self.table,
            html_pane(PROSE), self.gpu_box,
        ]

    def _show_load(self) -> None:
        """The rate slider for open loop, the users slider for closed loop."""
        widgets = getattr(self, "_load_widgets", None)
        if widgets is not None:
            widgets[OPEN].visible = not self.closed
            widgets[CLOSED].visible = self.closed

    def _load_changed(self) -> None:
        self._show_load()
        self._show_table()
        self.run()

    # ---- running -----------------------------------------------------------------------------
    def start(self) -> None:
        self.gpu_box.fetch(self.jobs)
        self.run()

    def run(self) -> None:
        """Serve the trace under the chosen policy, drawing the lanes as it goes."""
        if not self.started:
            return  # runs start once the page has loaded (not while the URL is read)
        self.lanes.clear()
        self.lanes.expect(self.requests)
        self._prefill_end.clear()
        self.lane_text.object = site_html(f"<p>Serving the trace under <b>{self.policy}</b> "
                                          "batching...</p>")
        # a new policy or setting replaces this run: the runner drops its late events
        self.shown = Run("serve_run", self.job_params())
        self.runner.submit("serve_run", self.job_params(), self._on_event)

    def run_others(self) -> None:
        """Measure the policies this table still lacks, for the same trace and settings."""
        for policy in POLICIES:
            if (*self.settings(), policy) not in self.runs and policy != self.policy:
                self.runner.add("serve_run", self.job_params(policy), self._on_other)

    def _on_other(self, event) -> None:
        if event.type == "result":
            self._record(event.result, event)

    def _on_event(self, event) -> None:
        d = event.data
        if event.type == "request":
            rid, t = d["request_id"], 1000 * d["t_s"]
            if d["kind"] == "arrived":
                self.lanes.arrive(rid, t)
            elif d["kind"] == "admitted":
                self.lanes.admit(rid, t)
            elif d["kind"] == "finished":
                self.lanes.first_token(rid, self._prefill_end.get(rid, t))
                self.lanes.finish(rid, t)
        elif event.type == "step":
            step = event_record(StepRecord, d)
            end = 1000 * step.end_s
            for rid, _n in step.prefill_chunks:
                self._prefill_end[rid] = end
            for rid in step.decode_ids:  # decoding: its first token came with its prefill
                if rid in self._prefill_end:
                    self.lanes.first_token(rid, self._prefill_end[rid])
            self.lanes.advance(end)
            self.runner.status.job_progress(
                self.lanes.finished_count,
                self.requests, f"{self.policy}: requests finished")
        elif event.type == "result":
            self.show_result(event.result, event)

    def show_result(self, run: ServeRunResult, event=None) -> None:
        self.result = run
        self.shown = (self.shown or Run("serve_run", self.job_params())).done(run, event)
        self.lanes.show(lanes_rows(run))
        summary = self._record(run, event)
        if run.policy == "static" and run.config.max_batch == 4 and run_load(run)[0] == OPEN:
            outcome = wait_outcome(summary)  # what the prediction asked about
            if outcome is not None:
                self.prediction_box.reveal(*outcome)
        rows = request_latencies(run)
        worst = max(rows, key=lambda r: r.queue_ms) if rows else None
        text = (f"Under <b>{html.escape(run.policy)}</b> batching the {len(rows)} requests "
                f"waited {fmt_ms(summary.wait_ms)} ms on average and ran "
                f"{fmt_ms(summary.run_ms)} ms; P95 TTFT {fmt_ms(summary.ttft_p95_ms)} ms.")
        if worst is not None:
            text += (f" Request #{worst.id} waited longest: {fmt_ms(worst.queue_ms)} ms "
                     f"before it got a slot.")
        self.lane_text.object = site_html(f"<p>{text}</p>")
        self.say(text)
        self.measured_on.object = site_html(
            f"<p>Measured: {html.escape(provenance(run, event))}. {len(rows)} requests, "
            f"{self.load_words()} (seed 0: the same requests under every policy), prompts of "
            f"16 to 128 tokens, answers of 8 to 96 tokens, {run.config.max_batch} batch "
            "slots.</p>")

    def download_header(self) -> dict:
        shown = self.shown or Run("serve_run", self.job_params())
        return result_header(
            self, shown.kind, shown.params, shown.result, shown.event, "run",
            policy=shown.params["policy"],
            columns="request: its id; arrival_ms: when it arrived; admitted_ms: when it got a "
                    "batch slot (queued before); first_token_ms: its first token (prefill "
                    "before); finish_ms: its last token (decode before); all in ms since the "
                    "first arrival, empty where the run had not got there")

    def _record(self, run: ServeRunResult, event=None) -> PolicySummary:
        cached = event is not None and event.cached
        summary = policy_summary(run, "cached" if cached else "measured live")
        key = (*run_load(run), int(run.workload.requests), int(run.config.max_batch),
               float(run.config.timeout_ms), run.policy)
        self.runs[key] = summary
        self._show_table()
        question = p95_question({p: self.runs[(*key[:5], p)] for p in POLICIES
                                 if (*key[:5], p) in self.runs})
        if question is not None:
            self.checkpoint.provide("p95", question)
        return summary

    def _show_table(self) -> None:
        rows = []
        for policy in POLICIES:
            s = self.runs.get((*self.settings(), policy))
            if s is None:
                rows.append((policy, *["not run yet"] + ["\u2013"] * 9))
                continue
            n = s.estimates["ttft"].n if s.estimates else None
            rows.append((policy, s.cell("wait", s.wait_ms), s.cell("run", s.run_ms),
                         s.cell("e2e", s.e2e_ms), s.cell("ttft", s.ttft_p95_ms),
                         "\u2013" if n is None else f"{n}", f"{s.throughput:,.0f}",
                         f"{100 * (s.slot_use or 0):.0f}%", s.steps_spread, s.check, s.origin))
        self.table.object = site_html(table_html(
            ("policy", "mean wait (ms)", "mean run (ms)", "mean wait + run (ms)",
             "P95 TTFT (ms)", "requests", "throughput (tokens/s)", "batch slots in use",
             "engine steps p10\u2013p90 (ms)", "disturbance check", "source"),
            rows, caption="The same trace under each policy, these settings (press Compare all "
                          "three to fill the table); each figure with its 95% interval "
                          f"[low–high] over the requests, {UNBOUNDED} where too few requests "
                          f"bound a P95 (it needs {min_samples(95)})"))

    def default_jobs(self) -> dict[str, tuple[str, dict]]:
        return {p: ("serve_run", self.job_params(p)) for p in POLICIES}

    def expected_lines(self, label: str, kind: str, cached: Cached) -> list[str]:
        s = policy_summary(cached.result)
        return [f"{s.policy}: mean wait {fmt_ms(s.wait_ms)} ms, mean run {fmt_ms(s.run_ms)} ms, "
                f"P95 TTFT {fmt_ms(s.ttft_p95_ms)} ms, {s.throughput:,.0f} tokens/s; the run "
                f"lasted {cached.result.metrics.duration_s or 0:.1f} s"]
