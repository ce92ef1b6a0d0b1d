"""The words of lesson 16, traffic classes (lessons/traffic_classes.py draws them): its prose,
objectives, prediction, takeaway, checkpoint questions, instructor notes, and the "On a GPU" box
with the servers' and providers' documentation it names."""

from __future__ import annotations

from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

INTRO = """
<p>One server rarely serves one kind of work. A chat user is waiting for the first word; an
overnight job that summarizes a pile of documents only cares when the pile is done. Put both in
one first-come-first-served queue and the chat request that arrives behind twenty long
summaries waits for all of them to be admitted: <strong>head-of-line blocking</strong>.</p>
<p>Servers answer with <strong>traffic classes</strong>: a queue per kind of work, each with its
own limits (how many slots it may hold, how long a prompt it takes, how many tokens a request
may ask for), and a rule for which queue goes next. Here the rule is strict priority: a waiting
interactive request is always admitted before a waiting batch request; the batch lane also
holds at most a few slots, so chat requests find one free soon. A prompt too long for the
interactive lane moves to the batch lane instead of holding a chat slot for its whole prefill.</p>
<p>Lanes protect one class from another, not one user from another. If one tenant floods the
interactive lane (a script in a retry loop), everyone in that lane waits behind it. A
<strong>quota</strong> per tenant fixes that: a <strong>token bucket</strong> fills at a steady
rate of tokens per second up to a burst size, and a request is admitted only when its tenant's
bucket holds its tokens (prompt plus the new tokens it asks for). Over the flooding tenant's
quota, its requests wait; the other users go past them.</p>
"""


SETUP = """
<h2>The experiment</h2>
<p>One mixed workload on the engine, under continuous batching: chat requests (short prompts,
short answers) arriving at random from a few users, while a batch job of long summaries (long
prompts) is submitted all at once at the start. It is served four times, each a real run on
this machine:</p>
<ol>
<li><strong>One queue</strong>: first come, first served.</li>
<li><strong>Lanes</strong>: an interactive lane over a batch lane (strict priority; the batch
lane holds at most a few of the slots).</li>
<li><strong>Lanes, flooded</strong>: the same, plus one tenant sending many chat requests at
once.</li>
<li><strong>Lanes, flooded, with a quota</strong>: the same flood, with a token bucket per tenant
in the interactive lane.</li>
</ol>
<p>For each run the table gives each group's TTFT at the median and at P99 (with the count and
a 95% interval), and the batch job's throughput: its output tokens divided by the time from its
submission to its last token. The flooding tenant is counted apart from the other chat users.
A P99 from fewer than 100 requests is only the slowest of a few, and the table says so.</p>
"""


OBJECTIVES = (
    "explain head-of-line blocking, and how separate lanes with a priority avoid it",
    "read what interactive users gain and what a batch job pays when lanes are added",
    "say what a per-tenant token bucket protects, and compute how much it admits over a window",
)


PREDICTION = PredictionQuestion(
    "With an interactive lane over the batch lane, the batch job's throughput compared with "
    "one shared queue will be ...",
    ("Much lower: it waits behind every chat request",
     "About the same: chat requests are small",
     "Higher: it no longer competes with chat"))


TAKEAWAY = check_takeaway((
    "In one FIFO queue, short interactive requests wait behind long batch work: head-of-line "
    "blocking sets their TTFT tail.",
    "Lanes with a priority and a slot limit for batch cut the interactive tail; the batch job "
    "pays little, since chat requests are small, but it does pay.",
    "Lanes protect classes, not users: a per-tenant token bucket keeps one flooding tenant "
    "from taking everyone else's share.",
))


INSTRUCTOR = InstructorNotes(
    minutes=20,
    timing="Four real runs of one mixed workload (chat requests beside a batch job of long "
           "summaries, then a flooding tenant), one after the other in one job; each run lasts "
           "at least as long as its arrivals (the chat requests over the chat rate). Warm the "
           "cache before class (python -m lessons.warm).",
    misconceptions=(
        "\"Priority makes the batch job much slower\": chat requests are short; the batch job "
        "loses only the slots and steps they take, and the lanes' limit on batch slots.",
        "\"A queue per class is enough for fairness\": within a class it is still first come, "
        "first served; one tenant can fill the lane.",
        "\"A rate limit refuses requests\": a token bucket can also make them wait; which one a "
        "server does is a choice it states (here: wait, and refuse only what could never fit).",
    ),
    prompts=(
        "Where would you put a voice agent, an agent's tool call, a nightly evaluation run?",
        "Why measure a quota in tokens rather than requests?",
        "What would strict priority do to the batch job if chat traffic never let up?",
    ),
)


QUESTIONS = (
    Question("What is head-of-line blocking in an LLM server?", (
        Choice("A short request waits behind long ones that arrived before it", True,
               "In one first-come-first-served queue a chat request is admitted only after "
               "every earlier request, however long their prompts."),
        Choice("The first token of a request waits for its whole answer", False,
               "Streaming sends each token as it is made; that is a different wait."),
        Choice("The first request in a batch slows the others down", False,
               "Requests in a step share it; none is ahead of the others there."))),
    Question("A tenant's bucket fills at 100 tokens per second up to 400 tokens. At most how "
             "many tokens can that tenant have admitted in any 10 seconds?", (
        Choice("1,400: a burst of 400, then 100 a second", True,
               "A full bucket gives its burst at once, then refills at the rate: rate x window "
               "+ burst."),
        Choice("1,000: 100 a second for the 10 seconds", False,
               "That forgets the burst: a full bucket can be spent at once."),
        Choice("4,000: a burst of 400 every second", False,
               "The bucket refills at its rate, 100 a second, not by its burst size."))),
    Question("Why does a prompt over the interactive lane's size limit move to the batch lane?",
             (
        Choice("Its long prefill would hold a chat slot and delay chat requests", True,
               "A long prompt takes many steps of prefill; in the batch lane it waits "
               "with the other long work instead of in front of chat."),
        Choice("The interactive lane's model cannot read long prompts", False,
               "Both lanes run the same model; the limit is the lane's policy."),
        Choice("Long prompts are cheaper to serve in a batch lane", False,
               "The work is the same; what changes is whom it delays."))),
    Question("The lanes are strict: interactive always first. What is the risk?", (
        Choice("Under endless chat load, batch work may never be admitted", True,
               "Strict priority can starve the lower class; weighted shares, or a slot "
               "reserved for batch, bound how long it waits."),
        Choice("Interactive requests can be preempted by batch ones", False,
               "Strict priority never admits batch while interactive waits."),
        Choice("Interactive requests lose their streaming output", False,
               "Lanes change when a request is admitted, not how it streams."))),
    MeasuredQuestion("gain", "Once the runs above have finished, a question on your own numbers "
                             "appears here."),
)


GPU_TEXT = """
<p><strong>How servers do this (quoted, not measured here).</strong> vLLM's scheduler has a
scheduling policy, <code>fcfs</code> or <code>priority</code> (<code>--scheduling-policy</code>;
vLLM's documentation, "vllm.config.scheduler", SchedulerConfig); with <code>priority</code>
each request carries a priority, ties fall back to arrival order, and a waiting request of
higher priority can preempt a running one of lower priority (vLLM pull request 5958, "Adding
Priority Scheduling"). Hugging Face's Text Generation Inference caps what its router accepts:
<code>--max-concurrent-requests</code> (beyond it, clients are refused rather than queued),
<code>--max-input-tokens</code> and <code>--max-total-tokens</code> per request, and
<code>--waiting-served-ratio</code> for how long waiting requests may be held back
(TGI documentation, "Text-generation-launcher arguments"). SGLang's server arguments include
<code>--max-running-requests</code> and <code>--schedule-policy</code> (SGLang documentation,
"Server Arguments").</p>
<p>The hosted APIs put quotas on tenants: Anthropic's documentation ("Rate limits") says its API
uses the token bucket algorithm, with limits in requests per minute and input and output tokens
per minute per organization; OpenAI's guide ("Rate limits") measures limits in requests and
tokens per minute and per day. A request over the limit is refused with HTTP status 429, and
the client waits and retries: the waiting this page does inside the server happens in the
client there.</p>
<p>On a GPU the same mechanism holds; what changes is scale. A step serves far more requests at
once, so the batch lane's slot limit and the chat rate that saturates the server are larger,
but a FIFO queue still puts a chat request behind every long prompt ahead of it.</p>
"""
