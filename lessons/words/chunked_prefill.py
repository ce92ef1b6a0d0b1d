"""The words of lesson 7, chunked prefill (lessons/chunked_prefill.py draws them): its prose,
objectives, prediction, takeaway, checkpoint questions and instructor notes, and the figures it
quotes with their sources."""

from __future__ import annotations

from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

INTRO = """
<p>Continuous batching (lesson 3) lets a new request join the running batch at the next step.
But what happens in that step? A new request first needs its <strong>prefill</strong>: its whole
prompt pushed through the model. If the prompt is long, that single step is long, and every
request already streaming its answer waits for it. Their readers see the text stop, then
resume: a <strong>stall</strong>. A scheduler that runs prefills in steps of their own, before
any decode (vLLM's first scheduler did, to get first tokens out sooner), stalls the streams the
same way.</p>
<p><a href="app?page=vocabulary#chunked-prefill">Chunked prefill</a> splits the long prompt
into pieces and runs one piece per step, beside the decode tokens of everyone else. This engine
does it the way vLLM's <code>max_num_batched_tokens</code> does: each step has a
<a href="app?page=vocabulary#token-budget">token budget</a>; every running request's decode
token goes in first, and prompt chunks (at most the chunk size each) fill what is left. No step
grows much longer than a chunk, so the running requests keep their rhythm; the new request
takes a few more steps to reach its first token.</p>
<p>Chunking changes when each token is computed, not what is computed: in exact arithmetic every
answer is the same either way. In floating point it is not guaranteed: a step of another shape
can sum attention and the matrix products in another order, and a near-tie between two tokens
can flip. Real engines are not
<a href="app?page=vocabulary#batch-invariance">batch-invariant</a> unless their kernels are
built to be (Thinking Machines Lab, H. He, "Defeating Nondeterminism in LLM Inference", 2025,
names chunked prefill as one cause); this page does not compare the two runs' texts, and
<a href="app?lesson=batch-invariance">lesson 13</a> measures, on this engine, how far chunking
moves a prompt's logits, how often its text changes, and what a batch-invariant mode costs.</p>
"""


SETUP = """
<h2>The experiment</h2>
<p>A few requests start together and decode their answers; at 0.2 s a long prompt arrives. The
engine serves the same requests twice, with continuous batching both times: once prefilling the
long prompt in one step, once in chunks. Each dot below is one gap between two consecutive
tokens of a running request, drawn when the later token arrived.</p>
"""


QUOTE = """
<blockquote class="quoted">
<p><strong>Quoted, not measured here.</strong> Splitting prefills into chunks and filling each
step with decodes beside one chunk was introduced by SARATHI (Agrawal et al., "SARATHI: Efficient
LLM Inference by Piggybacking Decodes with Chunked Prefills", arXiv:2308.16369, 2023).
Sarathi-Serve (Agrawal et al., "Taming Throughput-Latency Tradeoff in LLM Inference with
Sarathi-Serve", OSDI 2024) added stall-free scheduling: new requests join without pausing the
running decodes. Its OSDI paper reports 2.6x higher serving capacity for Mistral-7B on one A100
and up to 3.7x for Yi-34B on two A100s against vLLM, and up to 5.6x for Falcon-180B with
pipeline parallelism (the earlier arXiv version, 2403.02310, gave 6.9x for Falcon-180B on 8
A100s).</p>
<p>vLLM's documentation of its first engine (V0): "By default, vLLM scheduler prioritizes
prefills and doesn't batch prefill and decode to the same batch"; with chunked prefill "the
policy is changed to prioritize decode requests" within the <code>max_num_batched_tokens</code>
budget. Its documentation of the current engine (V1): "In vLLM V1, chunked prefill is always
enabled by default".</p>
<p class="source">Sources: the papers named above; vLLM documentation, "Optimization and Tuning",
chunked prefill (docs.vllm.ai), in its V0 and V1 versions.</p>
</blockquote>
"""


OBJECTIVES = (
    "explain why one long prefill stalls every running stream",
    "read the stall, and its cure, off a chart of gaps over time",
    "weigh a chunk size: smoother gaps for everyone against a later first token for the long "
    "request",
)


PREDICTION = PredictionQuestion(
    "With the long prompt in chunks instead of whole, what will happen to the running "
    "requests' worst gap, and to the long request's TTFT?",
    ("Worst gap shorter, its TTFT longer", "Worst gap shorter, its TTFT shorter too",
     "Worst gap about the same or longer"))


TAKEAWAY = check_takeaway((
    "A long prompt prefilled in one step stalls every running stream for that whole step: a "
    "spike in everyone's gap.",
    "Chunked prefill caps each step's prompt work with a token budget, decodes first, so the "
    "gaps stay near normal (SARATHI; Sarathi-Serve made it stall-free).",
    "The price is a later first token for the long request: smaller chunks smooth more and "
    "cost more.",
))


INSTRUCTOR = InstructorNotes(
    minutes=15,
    timing="Two runs, the prompt whole and in chunks (how long each took here is in the "
           "numbers below). A new chunk size re-runs only the chunked one; the whole-prompt run "
           "comes from the cache.",
    misconceptions=(
        "\"Chunking makes the long prompt faster\": its first token comes later; everyone "
        "else's rhythm is what improves.",
        "\"The stall is the scheduler pausing decodes on purpose\": prefill-first schedulers "
        "did pause them; here they share the step and still wait for it to end.",
        "\"Smaller chunks are always better\": each extra step costs the long request time, "
        "and small chunks use the hardware less well.",
    ),
    prompts=(
        "How long would a whole 8,000-token prefill stall the streams on an A100 (see the box on "
        "GPUs)? Would a reader notice?",
        "Why does a token budget serve decodes first?",
        "What else could keep prefills away from decodes? (Separate machines for each, as "
        "DistServe does.)",
    ),
)


QUESTIONS = (
    Question("A long prompt arrives while others are streaming. In this engine, without "
             "chunking, why do their answers stall?", (
        Choice("Its prefill runs in one long step; their next tokens wait for it", True,
               "A step ends when all its work is done; one huge prefill makes one huge step, "
               "and every decode in it waits."),
        Choice("The long prompt takes over their KV cache blocks", False,
               "Their caches stay; here the pool has room for everyone. The wait is for the "
               "step to finish."),
        Choice("The scheduler runs the prefill alone, pausing all decodes", False,
               "Prefill-first schedulers did exactly that (vLLM's first default), and they "
               "stall too; this engine puts the decodes in the same step, which still has to "
               "end before they get their tokens."))),
    Question("What does chunking cost?", (
        Choice("The long request's first token comes later: its prompt takes many steps", True,
               "That is the trade: a rise in one request's TTFT for a steady rhythm for "
               "everyone else."),
        Choice("The running requests wait longer: their decodes queue behind the chunks",
               False,
               "A token budget puts every running decode in first; the chunks fill what is "
               "left, so the running requests' gaps shrink, not grow."),
        Choice("Nothing: the long prompt's prefill does the same work", False,
               "Each chunk is a step of its own that reads all the weights again, and each "
               "re-reads the keys and values of the chunks before it, so the prefill takes "
               "longer in total. On a GPU only chunks too small to reach the ridge point "
               "(a few hundred tokens on an H100) pay a full weight read for little "
               "arithmetic, which is why engines budget thousands of tokens a step."))),
    Question("You shrink the chunk size from 512 to 32 tokens. What happens?", (
        Choice("Shorter worst gaps, but many more steps, so the long TTFT grows", True,
               "Small chunks bound each step tightly but use the machine less well on small "
               "matrices; engines pick hundreds to a few thousand tokens."),
        Choice("Nothing: the prompt has the same length, so the work is the same", False,
               "The chunk size sets how long each step can be: try it above."),
        Choice("Longer worst gaps, since small chunks run less efficiently", False,
               "Smaller pieces make shorter steps, so the running requests wait less."))),
    Question("A step's token budget is 256 and 8 requests are decoding. How many prompt tokens "
             "can that step prefill?", (
        Choice("248: the 8 decode tokens go in first", True,
               "Every running decode takes its one token of the budget before any chunk; the "
               "prompt gets the rest."),
        Choice("256: the budget counts prompt tokens only", False,
               "The budget counts every token the step processes, decodes included."),
        Choice("32: the budget is split evenly between requests", False,
               "It is not split evenly; decodes need one token each, the chunk takes the "
               "rest."))),
    MeasuredQuestion("ttft", "Once both runs above have finished, a question on your own "
                             "numbers appears here."),
)

GPU_TEXT = """
<p>On a GPU the stall is shorter but the same shape. A prefill step of L tokens takes at least
max(2 &times; parameters &times; L / peak, weight bytes / bandwidth); while it runs, every stream
waits. A whole long document on an A100 holds every reader for hundreds of milliseconds, dozens
of times a normal gap; a chunk caps the extra at about one chunk's time per step.</p>
"""
