"""Lesson 4's words: the knob (batch size). The view is lessons.knob; the analysis of its curve
is engine.calc.batch_curve."""

from __future__ import annotations

from engine.calc.batch_curve import GROWTH_CHOICES
from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

SMALL_GAIN = 0.20  # "less than 20% more tokens/s" in the measured question

INTRO = """
<p>Decoding writes one token per request per step, and for a dense model every step has to
read all of the model's weights. A model several times larger than the processor's last-level
cache (this page's default, the mini preset: 130 MB of weights in 32-bit floats) streams them
from memory at every step. That read is the same whether the step serves one request or
sixty-four. So putting more requests into the same step is the cheapest speed-up a server has:
N requests get N tokens for one sweep of the weights.</p>
<p>A mixture-of-experts model is different: each token uses only a few of its experts, so batch
1 reads only those, and a larger batch reads more of them until all are read. DeepSeek-V3, for
one, activates 37 B of its 671 B parameters per token (DeepSeek-AI, arXiv:2412.19437, 2024). The
tiny preset is different too: its 22 MB of weights fit in a server CPU's last-level cache (tens
of MB), so its steps need not wait for memory, and their fixed per-step costs set the pace
(lesson 5 measures both on this machine).</p>
<p>Cheap is not free. Each request in the step still brings its own arithmetic, and its own
cached keys and values to read, which nobody else shares. Move the slider and release it: the
engine measures that batch size on this machine (or takes the point from its cache, and says
so). The points build the curve.</p>
"""

PROSE = """
<h2>Two lines, one knob</h2>
<p>The solid line is the server's total output, in tokens per second for all users together.
At small batches it climbs almost in proportion: the step is memory-bound, paced by the weight
read (for a model that fits in the cache, by the step's fixed costs), and extra requests ride along at the cost of their own arithmetic and cache reads. Then it
bends over: as the batch grows, the arithmetic and the per-request cache reads, not the shared
weight read, set the step's pace, and more requests mostly make the step longer. The dashed line
is what each user feels, the time between two of their tokens: flat at first, then rising with
the batch.</p>

<h2>Picking a point on the curve</h2>
<p>A batch size is a trade. An overnight job that summarizes a million documents wants the
right-hand end: most tokens per second, per dollar. A chat wants the largest batch whose time
per token still meets its latency target: a smaller batch than the overnight job's, but not
batch 1. There is no best batch size, only the best one for a target; the
<a href="app?lesson=slo-goodput">last lesson</a> turns that into numbers. Why the bend comes
where it does on this machine is the subject of <a href="app?lesson=roofline">lesson 5</a>.</p>
"""

PARETO = """
<h2>The chart serving teams compare</h2>
<p>The same points, drawn the way load-testing reports draw them: up, the server's total tokens
per second; right, the tokens per second each user gets (1000 divided by their ms per token).
Each point is a batch size. Moving right costs throughput, moving up costs each user's speed. The
line joins the points that no other point beats on both: the <em>Pareto frontier</em>. A setting
below it wastes something; choosing among the points on it is choosing a target.</p>
"""

OBJECTIVES = (
    "explain why one decode step can serve many requests for little more than the cost of one",
    "read total throughput and each user's time per token off a measured curve",
    "pick a batch size for a latency target",
)

PREDICTION = PredictionQuestion(
    "Going from batch 1 to batch 8, how will the total tokens per second change?",
    GROWTH_CHOICES)

TAKEAWAY = check_takeaway((
    "For a dense model a decode step reads all the weights once, whatever the batch: more "
    "requests per step get more tokens from that one read.",
    "Total throughput climbs almost in proportion, then bends as each request's own arithmetic "
    "and KV reads take over; each user's time per token rises with the batch.",
    "Picking a batch size is picking a point on that curve: the largest batch whose time per "
    "token still meets your target.",
))

INSTRUCTOR = InstructorNotes(
    minutes=15,
    timing="One measurement per new batch size (of the mini preset by default; small takes "
           "longer, tiny less). Warm the ladder 1 to 64 before class: readers still predict "
           "first, and the points then appear at once.",
    misconceptions=(
        "\"Batching makes each request faster\": it makes the server faster; each user's "
        "time per token rises.",
        "\"Batching is free because the weights are shared\": each request adds its own "
        "arithmetic and its own KV cache reads.",
        "\"The best batch size is the largest\": only for work nobody waits for.",
        "\"Every model's weights are read once per step whatever the batch\": true for a "
        "dense model; a mixture-of-experts model reads more experts as the batch grows.",
    ),
    prompts=(
        "From your curve: at which batch does a doubling first give less than 20% more total "
        "tokens per second?",
        "A chat needs at most 50 ms per token: which batch would you run on this machine?",
        "Why does the bend come at a batch of hundreds on a GPU, and sooner when contexts are "
        "long? (See the box on GPUs.)",
    ),
)

QUESTIONS = (
    Question("Why does serving one request at a time waste the hardware during decode?",
             (Choice("Each step reads every weight to make a single token", True,
                     "For a dense model the weight traffic of a step is the same for 1 or 32 "
                     "requests; with one request the arithmetic units mostly wait for memory "
                     "(a mixture-of-experts model reads more experts as the batch grows)."),
              Choice("The prompt has to be read again at every step", False,
                     "The KV cache keeps the prompt's keys and values; decode reads them, it "
                     "does not push the prompt through the model again."),
              Choice("One request cannot use more than one core at a time", False,
                     "A step's matrix multiplications use every core; the limit is how fast "
                     "the weights arrive from memory."))),
    Question("Going from batch 1 to batch 32, what happens to each user's time per token?",
             (Choice("It rises: slowly at first, then faster", True,
                     "Each step does work for everyone in it, so it takes longer; while the "
                     "shared weight read sets the pace, the rise is small."),
              Choice("It falls, because batching is efficient", False,
                     "The server's total rises; each user waits a longer step for their next "
                     "token."),
              Choice("It stays the same: the weights are read once", False,
                     "The weight read is shared, but each request adds its own arithmetic and "
                     "KV reads: measure batch 1 and batch 32 here."))),
    Question("Why does the total tokens/s curve flatten out?",
             (Choice("Per-request work, not the shared weight read, starts to set the pace",
                     True,
                     "Arithmetic and KV reads grow with every request while the weight read "
                     "does not; past the crossover, more requests mostly make the step longer."),
              Choice("Each new request adds another copy of the weights for the step to read",
                     False,
                     "The weights are read once per step for the whole batch; what each request "
                     "adds is its own arithmetic and its own cached keys and values."),
              Choice("The engine caps how many tokens one step may hold", False,
                     "Every request in the batch gets its token each step here; the curve "
                     "bends by itself."))),
    Question("A chat product must keep each user's time per token under a limit. Which batch "
             "size should it run?",
             (Choice("The largest one whose time per token stays under the limit", True,
                     "That buys the most total throughput the target allows: read the dashed "
                     "line up to the limit."),
              Choice("Batch 1, so each user gets the fastest possible tokens", False,
                     "That wastes most of the machine; many users can share a step before "
                     "anyone notices."),
              Choice("The largest batch the memory allows, to get the most throughput", False,
                     "Past some point each user's tokens come too slowly: throughput is not "
                     "the target of a chat."))),
    MeasuredQuestion("doubling", "Measure batch 1, 2, 4 and 8 (slide to 8, then to 2): a "
                                 "question on your own curve appears here."),
)
