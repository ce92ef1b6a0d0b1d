"""Lesson 2's words: the average lies (tail latency). The view is lessons.average_lies."""

from __future__ import annotations

from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

INTRO = """
<p>"The average response takes 300 ms" sounds like a promise. It is not one. Response times of a
busy server are lopsided: most requests are quick, a few are very slow, and those few drag the
average up while hiding behind it. The people who got the slow answers remember them.</p>
<p>Below, the engine serves a real load test: requests arrive at random moments (a Poisson
process at the rate you choose), most of them short, some long, all sharing one server. Every
request's timeline is recorded; the charts show how the latencies spread out.</p>
<p>Load testers drive a server in one of two ways, and you can choose either. <strong>Open
loop</strong> (<a href="app?page=vocabulary#open-loop">glossary</a>): requests arrive at a rate,
whether or not earlier ones are answered, as from a large public audience; past the server's
capacity the queue, and the tail, grow without bound. <strong>Closed loop</strong>
(<a href="app?page=vocabulary#closed-loop">glossary</a>): a fixed number of users, each sending
their next request as soon as their last answer ends, so that many requests are always in the
system and the queue can never outgrow them.</p>
"""

PROSE = """
<h2>Reading the shape</h2>
<p>Both histograms lean to the left with a long tail to the right: the spread is
<a href="app?page=vocabulary#right-skew">right-skewed</a>. The median (P50) is the latency half
the requests beat; the mean is pulled to the right of it by the slow tail. P90, P95 and P99 are
the latencies that 90, 95 and 99 percent of requests beat: they describe the answers people
complain about. Here percentiles interpolate linearly between the nearest ranks, as numpy and
vLLM's benchmark do.</p>

<h2>Why engineers quote P99</h2>
<p>If a page makes ten requests, the chance that at least one of them lands in the slowest 1%
is 1 &minus; 0.99<sup>10</sup>, almost 10%. Tail latency is what a user meets on a normal day,
so targets (SLOs) are usually written on P95 or P99, rarely on the mean. A benchmark that sends
one request at a time on an empty server shows only the spread of the requests' own lengths.
With this page's mix (most answers short, one request in five long) that spread is already
two-humped and several-fold wide, and it is most of the skew in the E2E histogram; the TTFT
histogram, or a long share of 0, shows what load adds. The tail that queueing and shared steps
cause only appears with realistic concurrency, requests arriving while others run. Raise the
rate and run again: the tail grows much faster than P50. Read P95 at the default 40 requests:
their P99 is little more than the slowest one (the table marks it &dagger;); 100 requests or
more give a P99 of its own.</p>
"""

QUOTED = """
<blockquote class="quoted">
<p><strong>Quoted, not measured here.</strong> What is fast enough depends on the use: "a chatbot
may require a fast initial response (e.g., under 0.2 seconds) but moderate speed in decoding
which only needs to match human reading speed, whereas code completion requires a fast
end-to-end generation time."</p>
<p class="source">Source: the DistServe authors' blog post (Hao AI Lab, UC San Diego, 2024,
hao-ai-lab.github.io/blogs/distserve).</p>
<p>And reading speed: "a TPOT of 100 milliseconds per token would be 10 tokens per second, or
~450 words per minute, which is faster than a typical person can read."</p>
<p class="source">Source: Databricks documentation, "Conduct your own LLM endpoint
benchmarking".</p>
</blockquote>
"""

GPU_TEXT = """
<p>On a GPU every latency here shrinks; the shape of the spread does not. A decode step of
Llama-3-8B in bf16 still reads all its weights whatever the batch, so an answer's time is still
its prefill plus one step per token: a long answer still takes many times a short one, and
requests still arrive behind other requests' prefills. The table puts that through
engine.calc.gpu_scaling's floors (bytes / bandwidth or FLOPs / peak, whichever is larger;
real steps take longer): a short and a long answer at batch 8, and the prefill a newcomer waits
behind. A target written in milliseconds does not carry over from this CPU to a GPU; the
habit of writing it on P95 or P99 does.</p>
"""

OBJECTIVES = (
    "read a latency histogram and say why its mean sits to the right of its median",
    "say what P50, P90, P95 and P99 mean, and why targets are written on the tail",
    "explain from a run's trace why its slowest requests were slow",
)

PREDICTION = PredictionQuestion(
    "Requests arrive at random moments, most short, some long. Where will the mean end-to-end "
    "time sit against the median?",
    ("Above the median", "About on it (within 2%)", "Below the median"))

TAKEAWAY = check_takeaway((
    "Latency under load is right-skewed: most requests are quick, a few are slow, and the slow "
    "few pull the mean above the median.",
    "Users meet the tail, so targets are usually written on P95 or P99, measured under "
    "realistic concurrent load.",
    "A one-request-at-a-time benchmark hides the tail that queueing and shared steps cause; "
    "the trace tells why each slow request was slow.",
))

INSTRUCTOR = InstructorNotes(
    minutes=15,
    timing="One load test, started once the reader has predicted (at once when cached): its "
           "arrivals last requests / rate seconds, then the queue drains; how long it took here "
           "is in the numbers below. A higher rate means fewer seconds of arrivals but a longer "
           "queue.",
    misconceptions=(
        "\"The mean is a fair summary of latency\": it describes almost nobody's request when "
        "the spread is skewed.",
        "\"P99 is the slowest request\": it is the latency 99% of requests beat; the maximum "
        "is slower still.",
        "\"A benchmark with one request at a time predicts a busy day\": it never measures "
        "queueing or shared steps.",
        "\"All of the skew is load\": a mix of short and long answers is skewed on an empty "
        "server too; set the long share to 0 to see what load alone adds.",
        "\"The tail is random noise\": the trace usually names the cause (queued behind a long "
        "prefill, admitted late, a long answer).",
    ),
    prompts=(
        "A page makes 10 requests. How often does a reader meet a request slower than P99?",
        "Which of the five slowest requests were slow because of their own length, and which "
        "because of others?",
        "You report one number to a manager: the mean, P50 or P99? What does each hide?",
    ),
)

QUESTIONS = (
    Question("Most requests take about 200 ms and a few take 3 s. Where does the mean sit?",
             (Choice("Above the median: the slow few pull it up", True,
                     "A handful of large values move the mean a lot and the median hardly at "
                     "all: the mean ends up describing nobody's request."),
              Choice("On the median: the two agree for latencies", False,
                     "Only for a symmetric spread. Latency is right-skewed, with a long tail of "
                     "slow requests."),
              Choice("Below the median: most requests are fast", False,
                     "The many fast ones can each sit only a little below the median; a slow "
                     "one sits far above it, so the mean goes up."))),
    Question("Why are latency targets written on P99 rather than on the mean?",
             (Choice("Users meet the slow tail often, and the mean hides it", True,
                     "One request in a hundred sounds rare, but a busy user or a page making "
                     "many calls meets it often, and remembers it."),
              Choice("P99 is steadier from one run to the next than the mean", False,
                     "The tail is the noisiest part of the spread and needs many requests to "
                     "estimate; the reason is what it describes, not its stability."),
              Choice("The mean is always larger than P99 once a server is busy", False,
                     "In a right-skewed spread the mean sits well below P99; it is blind to how "
                     "bad the slow requests are, not larger."))),
    Question("A benchmark sends one request at a time and reports a P99 of 250 ms. What does it "
             "tell you about a busy day?",
             (Choice("Little: it never measures queueing or steps shared with others", True,
                     "Requests that never overlap show only the model's own speed and their own "
                     "lengths. Queueing and shared steps, the main causes of the tail, appear "
                     "only under concurrent load."),
              Choice("That P99 will stay near 250 ms whatever the arrival rate becomes", False,
                     "Run this page's load test at a higher rate: P99 climbs much faster than "
                     "P50."),
              Choice("That the mean under load will also be about 250 ms", False,
                     "A percentile from an empty server predicts neither the mean nor the tail "
                     "under load."))),
    Question("The arrival rate doubles. What usually happens?",
             (Choice("P99 grows much more than P50", True,
                     "The median request still finds a slot quickly; the unlucky ones now queue "
                     "behind more work, so the tail stretches first."),
              Choice("P50 and P99 grow by the same factor", False,
                     "Queueing hits the unlucky requests hardest, so the spread widens."),
              Choice("Nothing changes until the server is full", False,
                     "Requests start sharing steps and waiting for slots long before the server "
                     "is saturated."))),
    MeasuredQuestion("skew", "Once the load test above has run, a question on its numbers "
                             "appears here."),
)
