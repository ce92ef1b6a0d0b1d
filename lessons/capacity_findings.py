"""What the capacity lesson (lessons/capacity.py) says of its plan and its measurements: the
prediction the plan supports, the plan in words with the formula behind each figure, what the
SLO lesson's rate sweep says of the plan's replica, the load test's verdict, the reader's
Little's-law question, the batch points' table and the "On a GPU" box's plans.
"""

from __future__ import annotations

import html
import math

from engine.calc.deployment import (
    ATTAINMENT,
    NVLINK_SOURCES,
    BatchPoint,
    Demand,
    Plan,
    check_load,
    e2e_ms,
    gpu_points,
    next_batch_misses,
    plan,
    replica_rps,
    sweep_points,
    tp_against_replicas,
)
from engine.calc.gpu_scaling import H100, LLAMA_3_8B, Machine
from engine.calc.kv_math import format_bytes
from engine.calc.slo_math import Targets
from engine.lab.results import LoadTestResult, SweepPointResult
from widgets.checkpoint import Question, numeric_question
from widgets.tables import html_table, sig

from .on_a_gpu import machine_table
from .teaching import Cached
from .words.capacity import BY_TPOT, BY_TTFT, GPU_TEXT, NEITHER, NONE, TP_TEXT

PRESET = "tiny"  # the model the lesson's batch points and load test run


# ---- the plan in words and tables ----------------------------------------------------------------
def outcome(p: Plan, points: list[BatchPoint]) -> str:
    """The prediction's choice the plan supports: which target the next larger batch measured
    misses (neither, when the plan took the largest; none, when no batch meets both)."""
    if not p.feasible:
        return NONE
    return {"TPOT": BY_TPOT, "TTFT": BY_TTFT, None: NEITHER}[next_batch_misses(p, points)]


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


def check_verdict(run: LoadTestResult, targets: Targets) -> tuple[bool, str]:
    """Whether the load test met the plan's bar (ATTAINMENT of requests within both targets),
    and the sentence that says so with the run's P95s."""
    check = check_load(run, targets)
    m = run.metrics
    verdict = "**The plan holds**" if check.held else "**The plan does not hold**"
    return check.held, (
        f"{verdict}: at {sig(run.workload.rate)} requests/s on one replica (batch limit "
        f"{run.config.max_batch}), {check.good} of {check.finished} requests "
        f"({100 * check.share:.0f}%) met both "
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
