"""Lesson 3's words: three schedules (static, dynamic and continuous batching). The view is
lessons.three_schedules."""

from __future__ import annotations

from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

INTRO = """
<p>A server rarely answers one request at a time: it groups requests into a batch and runs one
step for all of them together. <em>When</em> it lets requests into the batch is the
scheduling policy, and it decides how long each one waits. Below, the same requests are served
by the real engine under three policies. Choose how they come: <strong>open loop</strong>
(<a href="app?page=vocabulary#open-loop">glossary</a>), at random moments at the rate you set,
whether or not earlier ones are answered, so they arrive at the same moments under every
policy; or <strong>closed loop</strong> (<a href="app?page=vocabulary#closed-loop">glossary</a>),
a fixed number of concurrent users, each sending their next request as soon as their last
answer ends, so a slow policy also slows the arrivals. Each row is one
request: yellow while it waits in the queue, purple while its prompt is read (prefill), blue
while its answer is written (decode); the diamond is its first token.</p>
"""

PROSE = """
<h2>Static: wait for a full batch</h2>
<p>Static batching waits until the batch is full (or no more requests are coming), runs the
batch until its <em>longest</em> member is done, and only then takes the next group. The first
arrival pays for the last one's lateness, and a short request sits in its slot until the
longest answer in its batch is finished: look for blue bars that end together.</p>

<h2>Dynamic: leave on a timer</h2>
<p>Dynamic batching launches when the batch is full <em>or</em> when the oldest waiting request
has waited the timeout (the <a href="app?page=vocabulary#batching-window">batching window</a>).
That bounds the wait for a batch to <em>fill</em>, not the whole wait: a running batch still
admits no newcomer until all its members are done, so under load a request waits for the batch
ahead of it however short the timeout. Raise the rate and watch the yellow bars grow past the
timeout.</p>

<h2>Continuous: a slot frees, a slot fills</h2>
<p>Continuous batching (also called in-flight batching) decides at every decode step
(<a href="app?page=vocabulary#iteration-level">iteration-level scheduling</a>): a finished
request leaves at once and a waiting one takes its slot in the next step. The queue stays short
and the slots stay busy. Orca introduced it (Yu et al., "Orca: A Distributed Serving System for
Transformer-Based Generative Models", OSDI 2022); vLLM, SGLang and TGI do it, and TensorRT-LLM
calls it in-flight batching.</p>
"""

GPU_TEXT = """
<p>On a GPU the case for continuous batching is stronger, not weaker. A decode step of a dense
model reads all its weights once for the whole batch, so while the step is memory-bound a full
batch costs little more than one request: every slot a static or dynamic batch leaves empty (a
finished member waiting for the longest, a newcomer waiting for the batch to end) is throughput
thrown away. The table gives Llama-3-8B's decode-step floor at batch 1, 4 and 16 and the tokens
per second each gives, by engine.calc.gpu_scaling's formulas (real steps take longer). Orca,
which introduced iteration-level scheduling, reports "36.9&times; throughput improvement at the
same level of latency" over NVIDIA FasterTransformer on GPT-3 175B (Yu et al., OSDI 2022,
abstract); part of that gain is its other technique, selective batching.</p>
"""

OBJECTIVES = (
    "say when static, dynamic and continuous batching let a request into the batch",
    "read each request's wait and run off the lanes of a real run",
    "explain why continuous batching keeps the queue short under load",
)

PREDICTION = PredictionQuestion(
    "Under static batching with 4 slots, will the average request wait in the queue longer "
    "than it runs?",
    ("It waits longer than it runs", "About as long (within 25%)",
     "It runs longer than it waits"))

TAKEAWAY = check_takeaway((
    "Static batching waits for a full batch and runs it to its longest member; dynamic "
    "batching adds a timeout on the wait for the batch to fill.",
    "Neither lets anyone in while a batch runs, so under load requests queue behind the "
    "running batch, timeout or not.",
    "Continuous batching re-forms the batch at every step: a freed slot is refilled at once, "
    "the queue stays short and the slots stay busy.",
))

INSTRUCTOR = InstructorNotes(
    minutes=20,
    timing="One run of the trace per policy (how long each took here is in the numbers "
           "below); Compare all three queues the other two. Warmed, all three come from the "
           "cache at once, after each reader's prediction.",
    misconceptions=(
        "\"The dynamic timeout bounds every wait\": it bounds the wait for a batch to fill; "
        "a ready batch still waits for the running one to end.",
        "\"Continuous batching runs requests one at a time\": it runs many together, and "
        "decides at every step who they are.",
        "\"Static batching only wastes time when a batch is not full\": a finished member's "
        "slot is wasted until the longest member ends.",
    ),
    prompts=(
        "When could static batching be the right choice? (Offline work whose requests all have "
        "about the same length.)",
        "What does the dynamic timeout trade, and what happens to it as the rate rises?",
        "Find a short request held by a long one in the static lanes: how long did it wait?",
    ),
)

QUESTIONS = (
    Question("Under static batching, who pays for a batch's longest answer?",
             (Choice("Its batch-mates, and everyone queued behind the batch", True,
                     "Nobody leaves or joins until the longest member finishes: short answers "
                     "hold their slots and the queue waits."),
              Choice("Only the request that writes the longest answer", False,
                     "Its batch-mates sit in their slots until it is done, and the next group "
                     "cannot start."),
              Choice("Nobody: a finished request's slot is refilled at once", False,
                     "That is continuous batching; static batching admits only between "
                     "batches."))),
    Question("What does the dynamic policy's timeout bound?",
             (Choice("How long a batch waits to fill before it leaves", True,
                     "The batch leaves when full or when its oldest request has waited the "
                     "timeout; it still runs to its longest member."),
              Choice("How long any request waits before it starts running", False,
                     "Not under load: a batch that is ready still waits for the running batch "
                     "to finish, so a request can wait far longer than the timeout."),
              Choice("How long one request may run before it is cut off", False,
                     "Running time is set by the answer's length and the step time; nothing is "
                     "cut off."))),
    Question("Why does continuous batching keep the queue short?",
             (Choice("A finished request's slot goes to a waiting one at the next step", True,
                     "Scheduling happens every iteration, so no slot sits empty while someone "
                     "waits."),
              Choice("It runs each request on its own, so that none waits for another one", False,
                     "It runs many together, like the others; what changes is when they may "
                     "join."),
              Choice("It runs the shortest requests first, so the queue empties fast", False,
                     "Here every policy serves in arrival order (first come, first served); "
                     "continuous batching changes when a request may join a running batch, not "
                     "which request goes first."))),
    Question("Dynamic batching, a 100 ms timeout, requests arriving faster than batches finish. "
             "Can a request wait more than 100 ms?",
             (Choice("Yes: a ready batch still waits for the running batch to end", True,
                     "The timeout only decides when a batch is ready to go; it goes when the "
                     "batch before it has finished."),
              Choice("No: the timeout is an upper bound on every request's wait", False,
                     "It bounds the wait to fill a batch, not the wait for the machine."),
              Choice("Only when its batch is already full when it arrives", False,
                     "A full batch leaves at once if nothing runs; the long waits come from the "
                     "batch ahead of it."))),
    MeasuredQuestion("p95", "Press Compare all three: a question on your own table appears "
                            "here."),
)
