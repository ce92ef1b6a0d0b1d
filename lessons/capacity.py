"""Lesson 12: Planning a deployment. /app?lesson=capacity

The capstone: the reader types a demand (arrival rate, prompt and output lengths), latency
targets and a price, and the page plans a deployment of this machine from the reader's own
measurements: lesson 4's batch points (`sweep_point` at the knob's settings, so the measurement
cache gives the points lesson 4 already measured) give each batch size's TTFT and TPOT; the plan
(engine.calc.deployment) picks the batch that meets the targets and serves the most requests per
second, and Little's law gives the replicas and the cost per million tokens. Then it checks the
plan: a `load_test` at the planned rate per replica, with the planned batch, on this machine, and
the share of requests that met both targets. The "On a GPU" box plans the same demand for
Llama-3-8B on an A100 and an H100 from their datasheets, with tensor parallelism against
replicas. Worked problems end the page, with an answer key computed by the same formulas.

URL: rate, prompt_len, output_len, ttft_target_ms, tpot_target_ms, price_per_hour,
gpu_price_per_hour: /app?lesson=capacity&rate=10&output_len=16
"""

from __future__ import annotations

import html
import math

import panel as pn
import param

from engine.calc.batch_ladder import LADDER
from engine.calc.deployment import (
    ATTAINMENT,
    FILL,
    NVLINK_SOURCES,
    BatchPoint,
    Demand,
    LoadPoint,
    MeasuredRate,
    Plan,
    allreduce_bytes,
    e2e_ms,
    gpu_points,
    highest_rate_within,
    in_flight,
    kv_bytes_per_sequence,
    plan,
    replica_rps,
    replicas_needed,
    tp_against_replicas,
)
from engine.calc.gpu_scaling import H100, LLAMA_3_8B, Machine
from engine.calc.kv_math import format_bytes
from engine.calc.slo_math import CHAT, CHAT_SOURCES, Targets, cost_per_million_tokens
from engine.lab.results import LoadTestResult, RateSweepResult, SweepPointResult
from widgets.checkpoint import Choice, MeasuredQuestion, Question, numeric_question
from widgets.data_download import DataDownload
from widgets.html import html_pane
from widgets.prediction import PredictionQuestion
from widgets.tables import html_table, sig, table_pane

from .base import LessonPage
from .data_record import Run, runs_header
from .on_a_gpu import GpuBox, machine_table
from .slo_goodput import SLOGoodputLesson, pool_runs
from .teaching import Cached, InstructorNotes, Lookup, check_takeaway, service_lookup

PRESET = "tiny"
CHECK_SECONDS = 10.0  # the check's arrivals span about this long (within its request limits)
CHECK_REQUESTS = (24, 96)

INTRO = """
<p>Every lesson so far measured one thing. A team that puts a model in front of users has to
answer them all at once: <em>how many machines, set up how, for what money?</em> This page
answers it for this machine, from measurements the engine makes here: the batch-size points of
<a href="app?lesson=knob">lesson 4</a>, the KV cache they hold (<a href="app?lesson=kv-cache">lesson
6</a>), and the rate sweep of <a href="app?lesson=slo-goodput">lesson 8</a> where you have run it,
judged against targets as lesson 8 judges them; then it checks the answer with a load test. The
plan says which lesson each of its numbers came from.</p>
"""

METHOD = f"""
<h2>From a demand to a plan</h2>
<p>A <a href="app?page=vocabulary#replica">replica</a> is one copy of the server: here, one
machine like this one running the engine. Three steps turn the demand into replicas, and a
fourth uses a load test where one was run:</p>
<ol>
<li><strong>Pick the batch.</strong> Each batch size measured gives a TTFT (the prefill of that
many prompts at once, the worst case when they arrive together) and a TPOT. The plan keeps the
batch sizes within both targets, and of those the one that completes the most requests per
second: usually the largest, because a bigger batch serves more users with each step (lesson
4).</li>
<li><strong><a href="app?page=vocabulary#littles-law">Little's law</a>.</strong> In any system
that is not piling up work, <em>requests in flight = arrival rate &times; time each spends in
the system</em>. A request spends E2E = TTFT + (output tokens &minus; 1) &times; TPOT. So a
replica holding a batch of B requests completes B / E2E requests per second, and the whole service holds arrival rate &times; E2E requests at
once.</li>
<li><strong>Leave headroom.</strong> As arrivals approach what a server completes, its queue
and its TTFT grow without bound (the rate sweep of lesson 8). The plan fills each replica to
{FILL:.0%} of what it completes: replicas = ceil(arrival rate / ({FILL:g} &times; one replica's
requests per second)). Cost per million output tokens = replicas &times; price per hour / 3600
&times; 1,000,000 / (arrival rate &times; output tokens).</li>
<li><strong>Measured under load.</strong> Where lesson 8's rate sweep has measured a replica with
the planned batch limit, its highest rate at which {ATTAINMENT:.0%} of requests met your targets
is what one replica carries with random arrivals and its queue included, so no headroom is added
to it. Its requests have other lengths than yours, so it counts in output tokens per second:
requests of yours a replica carries = its output tokens/s there / your output tokens. The plan
takes the larger count of replicas, this one or Little's law's.</li>
</ol>
"""

CHECK_TEXT = f"""
<h2>Checking the plan</h2>
<p>The plan is arithmetic on points measured one batch at a time. Real traffic arrives at random
moments, new prompts' prefill shares steps with running requests' decode, and the queue
fluctuates. So the engine serves one replica's share of the demand for real: requests of the
planned lengths arriving at random (a Poisson process) at the planned rate per replica, with the
planned batch as its limit, on this machine. The plan holds when at least {ATTAINMENT:.0%} of
requests meet both targets.</p>
"""

TP_TEXT = """
<h2>Tensor parallelism or replicas?</h2>
<p>A model too large for one GPU must be split.
<a href="app?page=vocabulary#tensor-parallelism">Tensor parallelism</a> splits every
layer's weight matrices across t GPUs: each reads 1/t of the weights per step, so the step can
be up to t times shorter, and the group has t times the memory for the KV cache. The price: after
attention and after the MLP of every layer, the GPUs sum their partial results with an
<a href="app?page=vocabulary#all-reduce">all-reduce</a>, two per layer per step. A ring
all-reduce of S bytes sends 2 (t &minus; 1) / t &times; S bytes from each GPU, and in a
decode step S = batch &times; hidden size
&times; 2 bytes. Each all-reduce also pays a fixed start-up time, which no datasheet states; with
64 of them in every step of an 8B model, that time can outweigh the bytes, and only a measurement
on the real GPUs says by how much. The floors below count the bytes alone.</p>
<p>When the model fits on one GPU, t separate replicas give t times the throughput with no
all-reduce at all; tensor parallelism buys a shorter TPOT (a tighter target within reach) and
more room for the KV cache. The table below sets the two side by side on the datasheet's
floors.</p>
"""

OBJECTIVES = (
    "turn an arrival rate and latency targets into a batch size and a number of replicas",
    "use Little's law to relate requests in flight, the arrival rate and the end-to-end time",
    "price a million tokens from a plan, and say when tensor parallelism beats more replicas",
)

ONE, FEW, MANY, NONE = ("One", "Two to four", "Five or more",
                        "None: a target is out of reach on this machine")
PREDICTION = PredictionQuestion(
    "For the demand and targets below, how many replicas of this machine will the plan need?",
    (ONE, FEW, MANY, NONE))

TAKEAWAY = check_takeaway((
    "A plan is arithmetic on measured numbers: the batch within the latency targets sets each "
    "replica's requests per second, and the arrival rate sets how many replicas.",
    "Little's law ties them: a replica holding B requests for E2E seconds each completes B / "
    "E2E per second; replicas add requests per second, never speed per request.",
    "Measure on the real hardware, leave headroom below full, and check the plan with a load "
    "test at the planned rate before buying machines.",
))

INSTRUCTOR = InstructorNotes(
    minutes=20,
    timing="The batch points come from lesson 4's cache when the class has done it (seconds); "
           "otherwise seven points of a few seconds each. The check is one load test of up to "
           f"{CHECK_REQUESTS[1]} requests. Changing the rate or targets re-plans at once and "
           "re-runs only the check. Lesson 8's rate sweep joins the plan only where it was run "
           "with the plan's batch as its max batch (the plan links to it): run that once before "
           "class to show a plan checked by both.",
    misconceptions=(
        "\"More replicas make each request faster\": they add requests per second; TPOT is "
        "set by the batch and the machine.",
        "\"Plan to 100%\": near full, queues grow without bound and TTFT with them.",
        "\"Tensor parallelism is always better for big GPUs\": for a model that fits, replicas "
        "give more tokens per GPU; TP buys latency and KV room.",
    ),
    prompts=(
        "Halve the TPOT target. What happens to the batch, the replicas and the cost, and why?",
        "Which of the page's numbers would you re-measure before signing a contract?",
        "Where does the 80% fill come from, and what would a bursty workload need instead?",
    ),
)

QUESTIONS = (
    Question("Arrivals double while each request's E2E time stays the same. The requests in "
             "flight ...", (
                 Choice("Double: in flight = arrival rate x E2E", True,
                        "Little's law: the time each request spends is unchanged, twice as "
                        "many arrive per second, so twice as many are in the system."),
                 Choice("Stay the same: the E2E time is unchanged", False,
                        "E2E is how long each stays; how many are there at once also depends "
                        "on how many arrive."),
                 Choice("Halve: each replica is busier with them", False,
                        "More arrivals never mean fewer in flight; if E2E held, they double."))),
    Question("Batch 1 on this machine already misses the TPOT target. What can meet it?", (
        Choice("A faster machine or a smaller model", True,
               "TPOT is the time of one step; replicas share requests out but each replica's "
               "steps are as slow as before."),
        Choice("More replicas, so each one has fewer requests", False,
               "At batch 1 a replica already has one request; its steps cannot get shorter by "
               "adding machines."),
        Choice("A larger batch, so each step does more work", False,
               "A larger batch makes each step longer, so each user's TPOT grows."))),
    Question(f"Why does the plan fill each replica to {FILL:.0%} of what it completes?", (
        Choice("Near full, queues grow and TTFT climbs", True,
               "Random arrivals bunch up; at a rate close to what a server completes, the queue "
               "(and the wait before the first token) grows without bound."),
        Choice("The engine refuses work above 80% of capacity", False,
               "Nothing refuses work: it queues, and the wait is what the headroom prevents."),
        Choice("Each machine's price drops by a fifth", False,
               "Headroom costs money (more replicas); it buys latency under bursts."))),
    Question("An 8B model fits on one GPU. For the most tokens per second per GPU, use ...", (
        Choice("Replicas: no all-reduces at all", True,
               "Each GPU serves its own batch with no communication; tensor parallelism adds "
               "two all-reduces per layer per step."),
        Choice("Tensor parallelism across all the GPUs", False,
               "It shortens each step but adds all-reduces; per GPU it delivers fewer tokens "
               "when the model already fits."),
        Choice("Neither: it depends only on the price", False,
               "The price sets the cost of a token, not how many tokens a GPU delivers."))),
    MeasuredQuestion("replica", "Once the batch points are measured, a question on your own "
                                "plan appears here."),
)

# ---- worked problems: the answer key is computed by the same formulas the page uses ----------
W1_RATE, W1_E2E_S = 12.0, 2.5
W2 = BatchPoint(16, ttft_ms=150.0, tpot_ms=25.0)
W2_OUTPUT, W2_RATE = 200, 12.0
W3_PRICE = 2.5
W4_BATCH, W4_GPUS = 32, 2
W5_CONTEXT = 2048


def worked_problems() -> tuple[list[str], list[str]]:
    """(problems, answers), each HTML; the numbers in the answers come from
    engine.calc.deployment, so the key agrees with what the page computes."""
    w1 = in_flight(W1_RATE, 1000 * W1_E2E_S)
    e2 = e2e_ms(W2.ttft_ms, W2.tpot_ms, W2_OUTPUT)
    rps2 = replica_rps(W2.batch, e2)
    reps2 = replicas_needed(W2_RATE, rps2)
    tokens3 = W2_RATE * W2_OUTPUT
    cost3 = cost_per_million_tokens(reps2 * W3_PRICE, tokens3)
    size4 = W4_BATCH * LLAMA_3_8B.heads * LLAMA_3_8B.head_dim * 2
    step4 = allreduce_bytes(LLAMA_3_8B, W4_BATCH, W4_GPUS)
    link4 = 900.0 / 2
    seq5 = kv_bytes_per_sequence(LLAMA_3_8B, W5_CONTEXT)
    fit5 = int((H100.memory_gb * 1e9 - LLAMA_3_8B.weight_bytes) // seq5)
    problems = [
        f"A chat service receives {W1_RATE:g} requests per second, and a request spends "
        f"{W1_E2E_S:g} s from arrival to its last token. How many requests are in flight?",
        f"One replica at batch {W2.batch} gives TTFT {W2.ttft_ms:g} ms and TPOT "
        f"{W2.tpot_ms:g} ms; answers are {W2_OUTPUT} tokens. How many requests per second does "
        f"it complete, and how many replicas carry {W2_RATE:g} requests/s at {FILL:.0%} fill?",
        f"Those replicas cost ${W3_PRICE:g} an hour each. What does a million output tokens "
        "cost?",
        f"Llama-3-8B (32 layers, hidden size 4,096) runs on {W4_GPUS} H100s in tensor parallel "
        f"at batch {W4_BATCH}. How many bytes is one all-reduce, how many does each GPU send "
        "per decode step, and how long does that take over NVLink at half its 900 GB/s?",
        f"How many sequences of {W5_CONTEXT:,} tokens fit in the bf16 KV cache of one H100 "
        f"(80 GB) beside Llama-3-8B's weights ({LLAMA_3_8B.weight_bytes / 1e9:.1f} GB)?",
    ]
    answers = [
        f"Little's law: {W1_RATE:g} /s &times; {W1_E2E_S:g} s = <strong>{w1:g} requests"
        "</strong>.",
        f"E2E = {W2.ttft_ms:g} + {W2_OUTPUT - 1} &times; {W2.tpot_ms:g} = {e2:,.0f} ms; one "
        f"replica completes {W2.batch} / {e2 / 1000:g} s = <strong>{rps2:.2f} requests/s"
        f"</strong>; replicas = ceil({W2_RATE:g} / ({FILL:g} &times; {rps2:.2f})) = "
        f"ceil({W2_RATE / (FILL * rps2):.2f}) = <strong>{reps2}</strong>.",
        f"{reps2} &times; ${W3_PRICE:g} = ${reps2 * W3_PRICE:g} an hour for {W2_RATE:g} "
        f"&times; {W2_OUTPUT} = {tokens3:,.0f} tokens/s: (${reps2 * W3_PRICE:g} / 3600) "
        f"&times; (1,000,000 / {tokens3:,.0f}) = <strong>${cost3:.2f} per million</strong>.",
        f"One all-reduce: {W4_BATCH} &times; 4,096 &times; 2 bytes = {size4:,} bytes. Each GPU "
        f"sends 2 &times; ({W4_GPUS} &minus; 1) / {W4_GPUS} of it, 2 per layer, 32 layers: "
        f"<strong>{step4:,.0f} bytes</strong> a step, {1e6 * step4 / (link4 * 1e9):.0f} "
        "&micro;s at 450 GB/s: small next to reading 8 GB of weights per GPU (about 2.4 ms at "
        "3.35 TB/s). Each of the 64 all-reduces also has a start-up time that only a measurement "
        "on the GPUs gives.",
        f"KV per token: 2 &times; 32 layers &times; 8 KV heads &times; 128 &times; 2 bytes = "
        f"{LLAMA_3_8B.kv_bytes_per_token:,} bytes; a sequence {seq5 / 1e6:.0f} MB; "
        f"(80 &minus; {LLAMA_3_8B.weight_bytes / 1e9:.1f}) GB / {seq5 / 1e6:.0f} MB = "
        f"<strong>{fit5} sequences</strong> (lesson 6's arithmetic).",
    ]
    return problems, answers


def problems_html() -> str:
    problems, answers = worked_problems()
    asked = "".join(f"<li>{p}</li>" for p in problems)
    key = "".join(f"<li>{a}</li>" for a in answers)
    return (f'<section class="worked"><h2>Worked problems</h2><ol>{asked}</ol><details '
            f'class="answer-key"><summary>Answer key</summary><ol>{key}</ol></details>'
            "</section>")


# ---- the plan in words and tables ----------------------------------------------------------------
def outcome(p: Plan) -> str:
    """The prediction's choice the plan supports."""
    if not p.feasible:
        return NONE
    return ONE if p.replicas == 1 else FEW if p.replicas <= 4 else MANY


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
        f"{p.batch}: lesson 4's batch points ({PRESET} model, {d.prompt_len}-token prompts, "
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
    return (
        "<p>The same plan for a real model on data-centre GPUs. The TTFT and TPOT of each batch "
        "are floors (the longer of bytes / bandwidth and FLOPs / peak, with the datasheet's "
        "figures), so the replicas below are the fewest that could do; a real "
        "GPU reaches a fraction of either roof, and the load test is what settles it. The "
        "price is yours to type (a placeholder, not a quoted price).</p>"
        + table + TP_TEXT + tp +
        f'<p class="source">NVLink, quoted, not measured here: </p><ul class="source">{sources}'
        "</ul>")


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
        found = {b: lookup("rate_sweep", SLOGoodputLesson.default_sweep_params(b))
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
        self.prediction_box.reveal(outcome(p), (
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
