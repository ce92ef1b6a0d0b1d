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
lessons/words/capacity.py; this module is its view.
"""

from __future__ import annotations

import html
import math

import panel as pn
import param

from engine.calc.batch_ladder import LADDER
from engine.calc.deployment import (
    ATTAINMENT,
    CHECK_REQUESTS,
    CHECK_SECONDS,
    FILL,
    NVLINK_SOURCES,
    BatchPoint,
    Demand,
    LoadPoint,
    MeasuredRate,
    Plan,
    e2e_ms,
    gpu_points,
    highest_rate_within,
    plan,
    replica_rps,
    tp_against_replicas,
)
from engine.calc.gpu_scaling import H100, LLAMA_3_8B, Machine
from engine.calc.kv_math import format_bytes
from engine.calc.rate_sweep import default_sweep_params, pool_runs
from engine.calc.slo_math import CHAT, CHAT_SOURCES, Targets
from engine.lab.results import LoadTestResult, RateSweepResult, SweepPointResult
from widgets.checkpoint import Question, numeric_question
from widgets.data_download import DataDownload
from widgets.html import html_pane
from widgets.tables import html_table, sig, table_pane

from .base import LessonPage
from .data_record import Run, runs_header
from .on_a_gpu import GpuBox, machine_table
from .teaching import Cached, Lookup, service_lookup
from .words.capacity import (
    BY_TPOT,
    BY_TTFT,
    CHECK_TEXT,
    GPU_TEXT,
    INSTRUCTOR,
    INTRO,
    METHOD,
    NEITHER,
    NONE,
    OBJECTIVES,
    PREDICTION,
    QUESTIONS,
    TAKEAWAY,
    TP_TEXT,
    problems_html,
)

PRESET = "tiny"


# ---- worked problems: the answer key is computed by the same formulas the page uses ----------



# ---- the plan in words and tables ----------------------------------------------------------------
def outcome(p: Plan, points: list[BatchPoint]) -> str:
    """The prediction's choice the plan supports: which target the next larger batch measured
    misses (neither, when the plan took the largest; none, when no batch meets both)."""
    if not p.feasible:
        return NONE
    larger = sorted((pt for pt in points if pt.batch > p.batch), key=lambda pt: pt.batch)
    if not larger:
        return NEITHER
    if larger[0].tpot_ms > p.targets.tpot_ms:
        return BY_TPOT
    if larger[0].ttft_ms > p.targets.ttft_ms:
        return BY_TTFT
    return NEITHER  # a larger batch met both, but completed fewer requests per second


def points_from(results: dict[int, SweepPointResult]) -> list[BatchPoint]:
    return [BatchPoint(b, r.ttft_ms, r.tpot_ms) for b, r in sorted(results.items())]


def points_table(points: list[BatchPoint], demand: Demand, targets: Targets,
                 chosen: int | None) -> str:
    rows = []
    for pt in points:
        e2e = e2e_ms(pt.ttft_ms, pt.tpot_ms, demand.output_len)
        within = pt.ttft_ms <= targets.ttft_ms and pt.tpot_ms <= targets.tpot_ms
        rows.append((f"{pt.batch}{' (the plan)' if pt.batch == chosen else ''}",
                     sig(pt.ttft_ms), sig(pt.tpot_ms), sig(e2e),
                     sig(replica_rps(pt.batch, e2e)), "yes" if within else "no"))
    return html_table(
        f"This machine's batch points ({PRESET} model, {demand.prompt_len}-token prompts, "
        f"{demand.output_len} output tokens), measured by the engine",
        ("batch", "TTFT (ms)", "TPOT (ms)", "E2E (ms)", "one replica (requests/s)",
         "within both targets"), rows, (False, True, True, True, True, False),
        css_class="plain capacity-points")


def plan_text(p: Plan, price: float, kv_bytes: int | None = None, lesson_8: str = "") -> str:
    """The plan in words, every figure with the formula that gave it, then where each number
    came from; `kv_bytes`: the KV cache the planned batch held, as measured (lesson 6's
    blocks); `lesson_8`: what lesson 8's rate sweep says of this replica (lesson_8_text)."""
    d, t = p.demand, p.targets
    if not p.feasible:
        return f"**No plan on this machine:** {p.why}."
    cost = p.cost_per_million(price)
    by_load = (f"; lesson 8's load test of this replica asks for {p.replicas_from_load} (below)"
               + (", so the plan takes that" if p.set_by_load else "")
               if p.replicas_from_load else "")
    kv = (f"- The KV cache: the planned batch held {format_bytes(kv_bytes)} of KV cache at its "
          "last step, in whole blocks, as lesson 6 counts them: each replica needs that much "
          "memory beside the weights.\n" if kv_bytes else "")
    return (
        f"**The plan: {p.replicas} replica{'s' if p.replicas != 1 else ''} of this machine at "
        f"batch {p.batch}.** Each request takes E2E = {sig(p.point.ttft_ms)} + "
        f"{d.output_len - 1} x {sig(p.point.tpot_ms)} = {sig(p.e2e_ms)} ms, so one replica "
        f"completes {p.batch} / {sig(p.e2e_ms / 1000)} s = {sig(p.replica_rps)} requests/s "
        f"(Little's law); {sig(d.rate_rps)} requests/s at {p.fill:.0%} fill need "
        f"ceil({sig(d.rate_rps)} / ({p.fill:g} x {sig(p.replica_rps)})) = "
        f"{p.replicas_from_points}{by_load}. By Little's law about "
        f"{sig(p.in_flight)} requests are in flight at once ({sig(d.rate_rps)} /s x "
        f"{sig(p.e2e_ms / 1000)} s); each replica is asked for {sig(p.per_replica_rate)} "
        f"requests/s, {p.utilisation:.0%} of what Little's law says it completes. At "
        f"${price:g} an hour per replica and {sig(d.output_tok_s)} output tokens/s, a million "
        f"tokens cost **${sig(cost)}**.\n\n"
        "**Where each number came from**\n\n"
        f"- TTFT {sig(p.point.ttft_ms)} ms and TPOT {sig(p.point.tpot_ms)} ms at batch "
        f"{p.batch}: batch points measured as in lesson 4 ({PRESET} model, {d.prompt_len}-token prompts, "
        f"{d.output_len} output tokens), in the table below.\n"
        + kv +
        f"- The targets, TTFT {t.ttft_ms:g} ms and TPOT {t.tpot_ms:g} ms: yours (the "
        "defaults are the chat example lesson 8 quotes).\n"
        f"- One replica under random arrivals: {lesson_8}")


def sweep_points(sweep: RateSweepResult) -> list[LoadPoint]:
    """Lesson 8's sweep, one point per rate with its runs' requests together."""
    return [LoadPoint(pt.rate, pt.ttft_ms, pt.tpot_ms, pt.throughput_tok_s)
            for pt in pool_runs(sweep.points)]


def measured_rate(sweep: RateSweepResult, targets: Targets) -> MeasuredRate | None:
    """What lesson 8's sweep measured one replica carrying within the targets, or None."""
    best = highest_rate_within(sweep_points(sweep), targets)
    return MeasuredRate(best.rate_rps, best.output_tok_s, sweep.max_batch) if best else None


def lesson_8_text(p: Plan, sweeps: dict[int, Cached]) -> str:
    """What lesson 8's rate sweep at the planned batch limit says of the plan's replica, or,
    where the reader has not run it, that the plan rests on lesson 4 alone and how to add it."""
    d, t = p.demand, p.targets
    cached = sweeps.get(p.batch)
    # an HTML link, not Markdown's: the static export rewrites href="app?..." into its files
    link = (f'<a href="app?lesson=slo-goodput&max_batch={p.batch}">lesson 8 with a max batch '
            f"of {p.batch}</a>")
    if cached is None:
        others = sorted(sweeps)
        measured = (f" (it has measured batch limits {', '.join(map(str, others))}: other "
                    "replicas than this plan's)" if others else "")
        return (f"*not measured.* Lesson 8's rate sweep at a batch limit of {p.batch} is not "
                f"among this machine's measurements{measured}, so the replicas rest on lesson "
                "4's points and Little's law alone, and the load test below is the only "
                f"measurement of this replica under load. To add lesson 8's: run {link} at its "
                "default rates, then come back to this page.")
    sweep = cached.result
    points = sweep_points(sweep)
    rates = ", ".join(sig(pt.rate_rps) for pt in points)
    (p_lo, p_hi), (o_lo, o_hi) = sweep.workload.prompt_len, sweep.workload.output_len
    mix = (f"its requests, prompts of {p_lo}-{p_hi} tokens and answers of {o_lo}-{o_hi}, "
           f"arriving at random at {rates} requests/s")
    head = f"lesson 8's rate sweep at a batch limit of {p.batch}, the plan's batch ({mix}; " \
           f"measured {cached.measured_at})"
    m = p.measured
    if m is None:
        lowest = points[0]
        return (f"{head}: even at its lowest rate, {sig(lowest.rate_rps)} requests/s, only "
                f"{lowest.met_share(t):.0%} of requests met your targets (the bar is "
                f"{ATTAINMENT:.0%}). It gives no rate to plan with, and it warns that this "
                "replica may miss the targets under load: the check below tells.")
    rps = m.demand_rps(d)
    top = (" (the highest it tried, so the replica may carry more)"
           if m.rate_rps >= points[-1].rate_rps else "")
    return (f"{head}: at least {ATTAINMENT:.0%} of requests met your targets at rates up to "
            f"**{sig(m.rate_rps)} requests/s**{top}, where the replica delivered "
            f"{sig(m.output_tok_s)} output tokens/s. In requests of {d.output_len} output "
            f"tokens that is {sig(m.output_tok_s)} / {d.output_len} = {sig(rps)} requests/s a "
            f"replica, so ceil({sig(d.rate_rps)} / {sig(rps)}) = {p.replicas_from_load} "
            f"replicas, against {p.replicas_from_points} from Little's law: the plan takes "
            f"{p.replicas}.")


def request_latencies(run: LoadTestResult) -> list[tuple[float, float | None]]:
    """Each finished request's (TTFT, TPOT) in ms from its trace."""
    out = []
    for r in run.requests:
        if r.first_token_s is None or r.finish_s is None or r.arrival_s is None:
            continue
        ttft = 1000 * (r.first_token_s - r.arrival_s)
        tpot = (1000 * (r.finish_s - r.first_token_s) / (r.output_len - 1)
                if r.output_len > 1 else None)
        out.append((ttft, tpot))
    return out


def check_verdict(run: LoadTestResult, targets: Targets) -> tuple[bool, str]:
    """Whether the load test met the plan's bar (ATTAINMENT of requests within both targets),
    and the sentence that says so with the run's P95s."""
    slo = targets.slo()
    lat = request_latencies(run)
    good = sum(slo.met(a, b) for a, b in lat)
    share = good / len(lat) if lat else 0.0
    m = run.metrics
    held = bool(lat) and share >= ATTAINMENT
    verdict = "**The plan holds**" if held else "**The plan does not hold**"
    return held, (
        f"{verdict}: at {sig(run.workload.rate)} requests/s on one replica (batch limit "
        f"{run.config.max_batch}), {good} of {len(lat)} requests ({100 * share:.0f}%) met both "
        f"targets (the bar: {ATTAINMENT:.0%}). P95 TTFT {sig(m.ttft_ms.p95)} ms against "
        f"{targets.ttft_ms:g}; P95 TPOT {sig(m.tpot_ms.p95)} ms against {targets.tpot_ms:g}; "
        f"median queue wait {sig(m.queue_ms.p50)} ms.")


def replica_question(p: Plan) -> Question | None:
    """How many requests/s one replica completes, from the reader's plan (Little's law)."""
    if not p.feasible:
        return None
    e2e_s = p.e2e_ms / 1000
    why = (f"Little's law: your replica holds {p.batch} requests, each for {sig(e2e_s)} s, so it "
           f"completes {p.batch} / {sig(e2e_s)} = {sig(p.replica_rps)} per second.")
    return numeric_question(
        f"Your plan runs batch {p.batch}, and a request takes {sig(p.e2e_ms)} ms end to end. "
        "How many requests per second does one replica complete?",
        (f"{sig(p.replica_rps)} requests/s", why),
        [(f"{sig(1 / e2e_s)} requests/s", "That is one request at a time: a replica holds "
                                          f"{p.batch} at once."),
         (f"{sig(p.batch * e2e_s)} requests/s", "That multiplies by the time; Little's law "
                                                "divides the requests held by it."),
         (f"{sig(1000 * p.batch / p.point.tpot_ms)} requests/s",
          "That is output tokens per second (batch / TPOT), not whole requests.")])


# ---- on a GPU ----------------------------------------------------------------------------------
def gpu_finding(machines: list[Machine], demand: Demand, targets: Targets,
                price: float) -> str:
    """The same demand and targets served by Llama-3-8B on each datasheet GPU, as floors, and
    tensor parallelism against replicas on the H100."""
    model = LLAMA_3_8B
    gpus = [m for m in machines if not m.measured and m.memory_gb]
    plans = {m.name: plan(gpu_points(model, m, demand) or [BatchPoint(1, math.inf, math.inf)],
                          demand, targets) for m in gpus}

    def cell(m: Machine, fn) -> str:
        p = plans.get(m.name)
        return fn(p) if p is not None and p.feasible else "-"

    table = machine_table(gpus, (
        ("batch", lambda m: cell(m, lambda p: str(p.batch))),
        ("TPOT floor (ms)", lambda m: cell(m, lambda p: sig(p.point.tpot_ms))),
        ("one replica (requests/s)", lambda m: cell(m, lambda p: sig(p.replica_rps))),
        ("replicas", lambda m: cell(m, lambda p: str(p.replicas))),
        (f"$ per million tokens at ${price:g}/h", lambda m: cell(
            m, lambda p: sig(p.cost_per_million(price)))),
    ), f"{model.name} in bf16 serving {sig(demand.rate_rps)} requests/s of {demand.prompt_len} + "
       f"{demand.output_len} tokens: the largest batch (a power of two) within the targets and "
       "the KV memory, from datasheet floors")
    h100 = plans.get(H100.name)
    batch = h100.batch if h100 is not None and h100.feasible else 32
    rows = [(str(r.gpus), sig(r.tpot_ms), sig(1000 * r.allreduce_ms), f"{r.max_batch:,}",
             f"{r.tp_tok_s:,.0f}", f"{r.replicas_tok_s:,.0f}")
            for r in tp_against_replicas(model, H100, batch, demand)]
    tp = html_table(
        f"{model.name} on H100s at batch {batch}: t GPUs in tensor parallel (one replica) or "
        "t replicas of one GPU, from datasheet floors",
        ("GPUs (t)", "TPOT floor, tensor parallel (ms)", "all-reduce floor per step (µs)",
         "sequences whose KV fits", "tokens/s, tensor parallel", "tokens/s, t replicas"),
        rows, (False, True, True, True, True, True), css_class="plain capacity-tp")
    sources = "".join(f"<li>{html.escape(s)}.</li>" for s in NVLINK_SOURCES)
    return (GPU_TEXT + table + TP_TEXT + tp
            + f'<p class="source">NVLink, quoted, not measured here: </p><ul class="source">'
            f"{sources}</ul>")


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
