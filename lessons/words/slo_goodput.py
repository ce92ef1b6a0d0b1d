"""The words of lesson 8, targets, goodput and cost (lessons/slo_goodput.py draws them): its prose,
objectives, prediction, takeaway, checkpoint questions and instructor notes, and the figures it
quotes with their sources."""

from __future__ import annotations

import html

from engine.calc.slo_math import CHAT_SOURCES
from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

INTRO = """
<p>Before tuning anything, decide what "fast enough" means for the people using it. A chat user
watches the first token arrive and the text flow: they live on <strong>TTFT</strong> and
<strong>TPOT</strong>. An overnight job that summarizes a million documents has no one watching:
only <strong>throughput</strong>, and so the cost of each token, matters. The same engine serves
both; they want different settings.</p>
<p>A target written down is an <a href="app?page=vocabulary#slo">SLO</a> (service level
objective). <a href="app?page=vocabulary#goodput">Goodput</a> counts, per second, only the
requests that met it. Throughput can look splendid while goodput is zero: a server that answers
everything late has served nobody well.</p>
<p>Goodput has two definitions in use. This page counts it per run, as vLLM's benchmark does:
requests per second that met every limit. The DistServe paper (Zhong et al., OSDI 2024) defines
a machine's goodput as the highest request rate it can be offered while a set share of requests
(say 90%) still meets the SLO: read off the sweep below, it is the highest rate whose SLO
attainment reaches that share. Lesson 12 plans replicas with that second one.</p>
"""


TARGETS_TEXT = """
<h2>The SLO, request by request</h2>
<p>Goodput needs a yes or no for every request, so the SLO is a set of per-request limits, as
vLLM's benchmark takes them (<code>--goodput ttft:X tpot:Y e2el:Z</code>): a request counts when
its TTFT is within X, its TPOT (its average gap after the first token) within Y and, if you set
one, its whole answer within Z. The share of requests that meet every limit is the
<a href="app?page=vocabulary#slo-attainment">SLO attainment</a>. Beside it, the table checks the
run's P50 and P99 of each metric against the same limits: a P99 TTFT within the limit means 99%
of requests met <em>that</em> limit; attainment counts those that met all of them at once, so it
can be lower than every percentile suggests.</p>
<p>A limit on TPOT, the average gap, lets a stall through: a request with one 500 ms pause and
quick tokens otherwise can still meet it, though its reader saw the text stop (the stall of
<a href="app?lesson=chunked-prefill">lesson 7</a>). A stricter SLO also limits the tail of each
request's gaps (a P99 inter-token latency, also called time between tokens, TBT), as Wang et
al., "Revisiting SLO and Goodput Metrics in LLM Serving" (arXiv:2410.14257, 2024) argue.</p>
"""


QUOTE = """
<blockquote class="quoted">
<p><strong>Quoted, not measured here.</strong> The default limits come from two published
examples, not from an industry standard:</p>
<ul>
""" + "".join(f"<li>{what}: {html.escape(source)}.</li>" for what, source in CHAT_SOURCES) + """
</ul>
<p>And why attainment is the yardstick: DistServe (Zhong et al., OSDI 2024, arXiv:2401.09670)
reports that it "can serve 7.4x more requests or 12.6x tighter SLO, compared to state-of-the-art
systems, while staying within latency constraints for > 90% of requests".</p>
</blockquote>
"""


SWEEP_TEXT = """
<h2>Raising the request rate</h2>
<p>The engine serves the same set of requests (prompts of 32 to 128 tokens, answers of 16 to 64)
at several arrival rates, with arrivals at random moments (a
<a href="app?page=vocabulary#poisson">Poisson process</a>) as real users send them: open-loop
load, whatever the server's pace. At low rates every request is served at once; past the
engine's capacity a queue builds and TTFT grows with the length of the test (in a steady
state it would grow without bound; a real server caps how many requests it admits, as vLLM's
<code>max_num_seqs</code> caps its batch, and the rest wait in its queue), and goodput falls away
from throughput.</p>
<p>Each rate is run several times, each run with other requests arriving at other moments: a
point is all its runs' tokens (or requests) over all their time, and its whiskers the 95%
interval of that figure from how much the runs differ (wide with few runs: two or three runs
say little about their own spread). The runs, not the requests, are the samples here: the
requests of one run share its queue, and what moves a rate's figure (when requests happened to
come, what else the machine was doing) shows only from one run to the next.</p>
"""


PARETO_TEXT = """
<h2>Throughput against each user's speed</h2>
<p>The chart load-testing reports put first: up, the output tokens per second of the whole
server; right, the tokens per second each user gets (1000 divided by the median request's time
per output token, with its 95% interval). Each point is one offered rate. Raising the rate buys
throughput with each user's speed until the engine is full; past that, points stop moving up and
only move left. The line joins the rates no other rate beats on both axes.</p>
"""


CAPACITY_TEXT = """
<h2>How many users does this machine hold?</h2>
<p>The sweep above is <strong>open-loop</strong> load: requests arrive at a rate, whether or not
earlier ones are answered, as from a large public audience. A team sizing a service also asks
the <strong>closed-loop</strong> question: N users, each sending their next request as soon as
their last answer ends, so N requests are always in the system (a chat product with N people
typing, or N clients of a batch pipeline). The search below raises N, doubling, until a load
misses the two targets you set below it (a P95 TTFT and the tokens per second each user gets),
then halves the gap. It tries only loads about a fifth apart (1 to 8 users, then 10, 11, 13,
16, 19, 23, 27, 32, ...): that is its step. Closer loads cannot be told apart here, as the same
load measured twice on this shared machine differs by more than one more user adds. Each load
is judged on all its requests: their P95 TTFT and median time per token, each with its 95%
interval. A load whose interval lies on one side of the targets is settled by one run; one whose
interval straddles a target is run again with other requests, up to three runs, and judged on
the requests of all of them. A run that other work on the machine disturbed is run again.</p>
"""


COST_TEXT = """
<h2>What a million tokens cost</h2>
<p>A machine costs the same per hour whether it is busy or not, so the price of a token is the
price of the time it took: <strong>cost per million tokens = (price per hour / 3600) &times;
(1,000,000 / tokens per second)</strong>. Which tokens per second? For the batch job, every token
counts: use the throughput. For the chat, only tokens of requests that met the SLO count: use
goodput.</p>
"""


OBJECTIVES = (
    "write an SLO as per-request limits, and count goodput and SLO attainment under it",
    "read where goodput falls away from throughput as the request rate rises",
    "price a million tokens from a measured throughput, for a chat and for batch work",
)


PREDICTION = PredictionQuestion(
    "The request rate doubles and doubles again, past what the engine can serve. What happens "
    "to throughput and to goodput?",
    ("Throughput levels off while goodput falls", "Both keep rising with the rate",
     "Goodput falls while throughput still rises", "Both level off together"))
# The choice a sweep supports, by (goodput fell from its best, throughput still rises):
# engine.calc.rate_sweep.sweep_trend.
TREND_CHOICES = {(True, False): PREDICTION.choices[0], (False, True): PREDICTION.choices[1],
                 (True, True): PREDICTION.choices[2], (False, False): PREDICTION.choices[3]}


TAKEAWAY = check_takeaway((
    "Decide the target first: a chat lives on TTFT and TPOT, an overnight job only on "
    "throughput and cost.",
    "Goodput counts only requests within every per-request limit; past capacity, throughput "
    "holds while goodput and SLO attainment fall.",
    "Cost per million tokens = (price per hour / 3600) x (1,000,000 / tokens per second): count "
    "goodput's tokens for a chat, all tokens for batch work.",
))


INSTRUCTOR = InstructorNotes(
    minutes=20,
    timing="The sweep serves the same requests at each rate in turn (how long each rate "
           "took here is in the numbers below). Warm both uses (interactive and batch) before "
           "class; new limits and prices are judged on the page without running anything.",
    misconceptions=(
        "\"High throughput means happy users\": throughput counts late answers too.",
        "\"SLO attainment is the percentile\": P99 TTFT within its limit says 99% met that "
        "one limit; attainment needs every limit met by the same request.",
        "\"Cost per token is set by the hardware\": it is set by the tokens per second you "
        "get out of it, and for a chat only the tokens that met the SLO count.",
    ),
    prompts=(
        "What limits would you write for a voice assistant? For an autocomplete popup?",
        "At what request rate would you stop admitting new requests here, and why there?",
        "Why price a chat with goodput but an overnight job with throughput?",
    ),
)


QUESTIONS = (
    Question("Past a certain request rate, throughput holds steady but goodput falls. Why?", (
        Choice("Requests queue: all are served, but their TTFT passes the limit", True,
               "The engine keeps producing tokens at its capacity; the extra requests only wait "
               "longer, and a late request does not count."),
        Choice("The engine drops requests it cannot serve, so fewer complete", False,
               "Nothing is dropped: every request completes, so throughput holds. They complete "
               "too late to count."),
        Choice("Goodput counts tokens while throughput counts requests", False,
               "The chart shows both in the same units, requests/s and tokens/s."))),
    Question("An overnight job summarizes documents; nobody reads the answers until morning. "
             "What should you tune for?", (
        Choice("Throughput per dollar: nobody waits for these answers", True,
               "With no one waiting, the cheapest settings (large batches, full queues) are the "
               "right ones."),
        Choice("P99 TTFT, so no document waits too long to start", False,
               "No one sees the first token arrive; only the total time and its cost matter."),
        Choice("A steady TPOT, so the text flows smoothly to its reader", False,
               "No one watches the text flow."))),
    Question("A machine costs $2 per hour and produces 500 tokens per second. What does a "
             "million tokens cost?", (
        Choice("About $1.11", True,
               "(2 / 3600) x (1,000,000 / 500) = 0.000556 $/s x 2,000 s = $1.11."),
        Choice("About $0.28", False,
               "Check the formula: the price per second times the seconds a million tokens "
               "take."),
        Choice("About $0.56", False,
               "0.56 is the hours a million tokens take (2,000 s); times $2 per hour is $1.11."),
        Choice("About $4,000", False,
               "That is the price per hour times the 2,000 seconds a million tokens take: "
               "turn the price into dollars per second first ($2 / 3600), then 2,000 s of it "
               "is $1.11."))),
    Question("Why set the SLO before tuning the batch size?", (
        Choice("The best batch depends on it: bigger is cheaper but slower per user", True, "Without a target there is no way to say which point of the curve is "
                     "right."),
        Choice("The engine needs the SLO to decide how it should schedule its requests",
               False,
               "The engine runs the same either way; the SLO judges the result."),
        Choice("An SLO makes the engine faster by dropping the slow requests", False,
               "Limits measure; they do not speed anything up or drop anything."))),
    Question("95% of requests meet the TTFT limit, and 95% meet the TPOT limit. What is the SLO "
             "attainment?", (
        Choice("Between 90% and 95%: a request must meet both limits", True,
               "At most 95% (no more than either limit's share); at least 90% (at most 5% miss "
               "each, so at most 10% miss one or the other)."),
        Choice("Exactly 95%, since each limit is met by 95% of requests", False,
               "Only if the same requests miss both; usually some miss one, some the other."),
        Choice("Over 95%: meeting one limit helps a request meet the other", False,
               "Attainment can never exceed the share meeting any single limit."))),
    MeasuredQuestion("attainment", "Once the sweep above has measured a rate, a question on "
                                   "your own numbers appears here."),
)

GPU_TEXT = """
<p>What does your TPOT limit allow on a GPU? Every decode step takes at least its bytes (for a
dense model, the weights once and each sequence's cache) / bandwidth, so the largest batch whose
step stays within the limit (and whose caches fit beside the weights) is the most a GPU can serve
at that pace; batch / step time is then the most tokens per second, and the price per hour you
typed prices them. Real engines reach a fraction of these ceilings; the bigger batches of a GPU
are why its cost per token is so much lower.</p>
"""


# What the brackets and the dagger of the sweep's table mean.
INTERVAL_NOTE = (
    "In brackets: the 95% confidence interval of a percentile (a bootstrap over the requests at "
    "that rate, all its runs together, counted beside them) and of goodput (from how the rate's "
    "runs differ, counted beside it; one run gives none). The engine was warmed up before the "
    "first rate; its warm-up steps are in no figure.")
FEW_SAMPLES_NOTE = (
    "{mark} A percentile from too few samples to bound it: a P99 needs at least {p99} samples, a "
    "P50 {p50}. It is the slowest few requests measured, not a P99 to quote; send more requests "
    "per rate to bound it.")

# The sentence under the rate curve: batch use (no limits), chat use (the SLO).
BATCH_SUMMARY = (
    "With no latency limits, goodput is throughput: at the highest rate measured ({top_rate} "
    "requests/s) the engine completed {top_rps} requests/s, {top_tok_s} output tokens/s.")
CHAT_SUMMARY = (
    "Best goodput: **{best_rps} requests/s** ({best_tok_s} tokens/s of answers within the SLO) "
    "at an offered {best_rate} requests/s. At {top_rate} requests/s the engine still completed "
    "{top_rps} requests/s, but only {good} of {completed} requests met every limit: an SLO "
    "attainment of {attainment}%.")

# The columns of the sweep's download.
SWEEP_COLUMNS = (
    "rate: offered requests/s; completed_rps, goodput_rps: requests/s completed and within every "
    "limit of the SLO; *_tok_s: output tokens/s; each of those all the rate's runs' requests or "
    "tokens over all their seconds, with its 95% interval over the runs (*_lo, *_hi; none from "
    "one run); runs: how many; requests: all the runs' requests; pNN_*_ms: a percentile with its "
    "95% bootstrap interval (*_ci_lo, *_ci_hi), the samples it rests on (*_n) and whether they "
    "are enough to bound it (*_bounded; a P99 needs 100)")
