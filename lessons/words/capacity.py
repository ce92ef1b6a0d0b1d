"""The words of lesson 12, planning a deployment (lessons/capacity.py draws them): its prose,
objectives, prediction, takeaway, checkpoint questions and instructor notes, and the figures it
quotes with their sources.

The worked problems are here too: their answer key is computed by the formulas the page plans
with (engine.calc.deployment), so the key and the page cannot disagree."""

from __future__ import annotations

from engine.calc.deployment import (
    ATTAINMENT,
    CHECK_REQUESTS,
    FILL,
    BatchPoint,
    allreduce_bytes,
    e2e_ms,
    in_flight,
    kv_bytes_per_sequence,
    replica_rps,
    replicas_needed,
)
from engine.calc.gpu_scaling import H100, LLAMA_3_8B
from engine.calc.slo_math import cost_per_million_tokens
from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

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
replica holding a batch of B requests completes B / E2E requests per second, and the whole
service holds at least arrival rate &times; E2E requests at once: at least, because E2E here is
measured with no queue, and near full a request also waits before its batch takes it.</li>
<li><strong>Leave headroom.</strong> As arrivals approach what a server completes, its queue
and its TTFT grow without bound (the rate sweep of lesson 8). The plan fills each replica to
{FILL:.0%} of what it completes: replicas = ceil(arrival rate / ({FILL:g} &times; one replica's
requests per second)). Cost per million output tokens = replicas &times; price per hour / 3600
&times; 1,000,000 / (arrival rate &times; output tokens).</li>
<li><strong>Measured under load.</strong> Where lesson 8's rate sweep has measured a replica with
the planned batch limit, its highest rate at which {ATTAINMENT:.0%} of requests met your targets
(the DistServe paper's definition of <a href="app?page=vocabulary#goodput">goodput</a>, with a
share of {ATTAINMENT:.0%}; lesson 8 counts the other one, requests per second within the
targets) is what one replica carries with random arrivals and its queue included, so no headroom is added
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


BY_TPOT, BY_TTFT, NEITHER, NONE = (
    "The TPOT target: a larger batch's steps are too slow",
    "The TTFT target: a larger batch's prefill takes too long",
    "Neither: the largest batch measured meets both targets",
    "No plan: a target is out of reach even at batch 1")
PREDICTION = PredictionQuestion(
    "For the demand and targets below, what will stop the plan from using a larger batch on "
    "each replica (and so fewer replicas)?",
    (BY_TPOT, BY_TTFT, NEITHER, NONE),
    intro="Before the engine measures anything, reason it out: a larger batch makes every "
          "step longer (lesson 4), and its prompts are prefilled together.")

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
        "\"Plan to 100%\": near full, queues grow (without bound in a steady state) and TTFT "
        "with them.",
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
                 Choice("Double: in flight = arrival rate x E2E time", True,
                        "Little's law: the time each request spends is unchanged, twice as "
                        "many arrive per second, so twice as many are in the system."),
                 Choice("Stay the same: each request's E2E time is unchanged", False,
                        "E2E is how long each stays; how many are there at once also depends "
                        "on how many arrive."),
                 Choice("Halve: each replica is busier with them", False,
                        "More arrivals never mean fewer in flight; if E2E held, they double."))),
    Question("Batch 1 on this machine already misses the TPOT target. What can meet it?", (
        Choice("A shorter step: fewer weight bytes, speculation or tensor parallelism", True,
               "TPOT is the time of one step, so the step must get shorter: read fewer weight "
               "bytes (a smaller or quantized model, lesson 11), take fewer target steps per "
               "token (speculative decoding, lesson 10), split the weights over GPUs (tensor "
               "parallelism, below), or buy a faster machine. Replicas share requests out, but "
               "each replica's steps are as slow as before."),
        Choice("More replicas, so that each of them has fewer requests to serve at once", False,
               "At batch 1 a replica already has one request; its steps cannot get shorter by "
               "adding machines."),
        Choice("A larger batch, so that each step does more useful work", False,
               "A larger batch makes each step longer, so each user's TPOT grows."))),
    Question(f"Why does the plan fill each replica to {FILL:.0%} of what it completes?", (
        Choice("Near full, random arrivals queue up and TTFT climbs", True,
               "Random arrivals bunch up; at a rate close to what a server completes, the queue "
               "(and the wait before the first token) grows without bound."),
        Choice("The engine refuses work above 80% of capacity", False,
               "Nothing refuses work: it queues, and the wait is what the headroom prevents."),
        Choice("So each replica's batch is never full and TPOT stays low", False,
               "The plan's batch, and so TPOT, is chosen first; the headroom is in the arrival "
               "rate, and what it prevents is the queue in front of the batch."))),
    Question("An 8B model fits on one GPU. For the most tokens per second per GPU, use ...", (
        Choice("Replicas: each GPU serves its own batch, with no all-reduces", True,
               "Each GPU serves its own batch with no communication; tensor parallelism adds "
               "two all-reduces per layer per step."),
        Choice("Tensor parallelism across all the GPUs, for shorter steps", False,
               "It shortens each step but adds all-reduces; per GPU it delivers fewer tokens "
               "when the model already fits."),
        Choice("Neither: which is better depends only on the price", False,
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

GPU_TEXT = """
<p>The same plan for a real model on data-centre GPUs. The TTFT and TPOT of each batch are
floors (the longer of bytes / bandwidth and FLOPs / peak, with the datasheet's figures), so the
replicas below are the fewest that could do; a real GPU reaches a fraction of either roof, and the
load test is what settles it. The price is yours to type (a placeholder, not a quoted price).</p>
"""
