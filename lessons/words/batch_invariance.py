"""The words of lesson 13, batch invariance (lessons/batch_invariance.py draws them): its prose,
objectives, prediction, takeaway, checkpoint questions and instructor notes, and the figures it
quotes with their sources.

GPU_TEXT is the lesson's part of its "On a GPU" box."""

from __future__ import annotations

from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

INTRO = """
<p>Greedy decoding has no dice: at every step it takes the token with the largest logit. Send the
same prompt twice and you expect the same answer. Pages before this one said so in exact
arithmetic (<a href="app?lesson=chunked-prefill">chunked prefill</a> changes when a token is
computed, not what; <a href="app?lesson=speculative">speculative decoding</a> keeps the
model's own choice). A server, though, never runs your prompt alone: it runs it inside a batch
of whoever else is asking, and that batch is different every time.</p>
<p>A computer adds floating-point numbers with rounding, so the order of a sum matters:
(a + b) + c and a + (b + c) can differ in the last bit. A matrix product sums hundreds of terms
for every output, and the library picks how to split and order those sums by the shape it is
given, that is, by how many rows the batch has. Attention sums over the context, and a prefill
cut into chunks sums it in other pieces. So a prompt's logits inside a batch can differ from its
logits alone in the last bits, and where two tokens are nearly tied, a last bit is enough to
pick the other one. From there the answer goes its own way.</p>
<p>An engine is <a href="app?page=vocabulary#batch-invariance">batch-invariant</a> when this
cannot happen: a request's numbers do not depend on its company. This page measures how far
from that this engine is, and what being invariant costs.</p>
"""


SETUP = """
<h2>The experiment</h2>
<p>The engine runs one 48-token prompt from the corpus alone and decodes 32 tokens greedily,
keeping its logits (4,096 of them, one per vocabulary entry) at every token. Then it runs the
same prompt again inside a batch: the prompt plus 1, 7, 31 or 63 other requests of other
lengths, prefilled together and decoded together. It compares the two runs bit by bit:</p>
<ul>
<li>the <strong>largest logit difference</strong>, absolute and in
<a href="app?page=vocabulary#ulp">ULP</a> (how many float32 values lie between the two: 0 is
the same bits), over the tokens computed on the same context (up to the first token that
differs: after it, the two runs read different texts and their logits are no longer
comparable);</li>
<li>the <strong>first output token that differs</strong>, if any;</li>
<li>over 4 prompts (seeds), <strong>how many texts differ</strong> from the prompt's text alone,
with a 95% interval on that share.</li>
</ul>
<p>A second run does the same with <strong>chunked prefill</strong>: the others are already
decoding when the prompt arrives, and its prefill goes in 16-token chunks beside their decode
rows, as a continuous-batching server does it.</p>
"""


WHY = """
<h2>Where the bits move</h2>
<p><strong>In one line:</strong> the engine computes a batch's rows together, and the way it
lays out each sum depends on how many rows there are.</p>
<details class="details"><summary>The sums that change order here</summary>
<ul>
<li><strong>Matrix products.</strong> Every layer multiplies the step's rows by its weight
matrices. The engine picks, per row count, the layout its measured plan found fastest
(engine/model/matmul_plan.py), and the BLAS library under torch blocks the sum over the inner
dimension by the shape too; a prefill's many rows take the library's own choice.</li>
<li><strong>The one-call decode step.</strong> Where the engine's C++ kernels are built, a
decode-only step of up to 64 rows is one C++ call whose products follow the same per-row-count
plan.</li>
<li><strong>Attention.</strong> A prompt's prefill attends over its fresh keys in one call; a
later chunk reads the earlier keys back from the cache and attends over them with a mask, in
other pieces.</li>
</ul>
<p>Run alone twice, the prompt gets the same bits: the same shapes give the same order. The
differences come only from the company.</p>
</details>
"""


INVARIANT = """
<h2>The batch-invariant mode, and its price</h2>
<p>The engine has a batch-invariant mode (<code>--batch-invariant</code>; engine/model/
batch_invariant.py). It computes every row of a step alone: each product, norm and activation
gets one row, the same shape whatever the batch, and attention for the token at position p is
always the same call, its query against the p + 1 cached keys and values, in a prefill chunk and
in a decode step alike. Every sum then runs in the same order whatever the company, so the bits
are the same. The C++ one-call decode step is not taken in this mode (it lays products out by
the row count); the rows go through the model's layer-by-layer path.</p>
<p>The price is batching itself: a step of B rows costs about B batch-1 steps, where a batched
step costs far less than that (<a href="app?lesson=knob">lesson 4</a>). The table shows the
measured decode step at each batch in both modes, with chunked prefill (the prompt's chunks beside
the others' decode rows), 1 prompt at each batch in the batch-invariant mode (every row of its
steps runs alone, so this run takes the longest of the three).</p>
"""


QUOTE = """
<blockquote class="quoted">
<p><strong>Quoted, not measured here.</strong> Thinking Machines Lab (H. He, "Defeating
Nondeterminism in LLM Inference", September 2025) sent the same prompt 1,000 times at
temperature 0 to a vLLM server and got 80 different completions; with batch-invariant kernels for
RMSNorm, the matrix products and attention, all 1,000 were identical. The post argues that the
cause is not the GPU's concurrency as such (each kernel there is deterministic run to run) but
the load: the batch a request lands in changes, and with it how the kernels reduce. It names
chunked prefill and prefix caching as two things that change attention's reduction order.</p>
<p class="source">Source: thinkingmachines.ai/blog/defeating-nondeterminism-in-llm-inference
(the kernels: github.com/thinking-machines-lab/batch_invariant_ops).</p>
</blockquote>
"""


GPU_TEXT = """
<h3>Why GPUs are not batch-invariant by default</h3>
<p>A GPU matrix-product library chooses a kernel per shape. With few rows (a small decode
batch) there are too few output tiles to keep every streaming multiprocessor busy, so it may use
<strong>split-K</strong>: each of several blocks sums part of the inner dimension, and the parts
are added at the end. With many rows it does not split. Tile sizes, and whether tensor-core
instructions of one width or another are used, also follow the shape. Each choice is a different
order of the same sum. Attention kernels split long contexts across blocks the same way
(split-KV, FlashDecoding), by the number of queries and the context length.</p>
<p>A batch-invariant GPU engine keeps its batches (unlike this CPU's row-by-row mode) and fixes
the strategy instead: one tile configuration and no split-K for every batch size, RMSNorm with
one row per block, attention split at fixed KV sizes rather than into a fixed number of parts.
It costs speed, since the kernel is no longer the fastest for each shape; how much depends on
the model and the kernels, and is measured in the sources, not here.</p>
<ul>
<li><strong>vLLM</strong>: batch invariance, enabled with the environment variable
<code>VLLM_BATCH_INVARIANT=1</code> (docs.vllm.ai, Features &rarr; Batch Invariance; in beta,
on recent NVIDIA GPUs).</li>
<li><strong>SGLang</strong>: deterministic inference, built on Thinking Machines Lab's
batch-invariant operators and compatible with chunked prefill, CUDA graphs and the radix cache,
with the FlashInfer, FlashAttention 3 and Triton attention backends (docs.sglang.io, Advanced
Features &rarr; Deterministic Inference).</li>
</ul>
<p class="source">Sources: the two documentation pages named; Thinking Machines Lab, "Defeating
Nondeterminism in LLM Inference" (2025). No speed figure is quoted: none is measured here.</p>
"""


OBJECTIVES = (
    "explain why the same greedy prompt can give other logits, and sometimes another text, "
    "inside a batch",
    "read a logit difference in ULP and absolute, and tell when it can change a token",
    "say what a batch-invariant mode does and measure what it costs per step",
)


PREDICTION = PredictionQuestion(
    "The same greedy prompt, run alone and then inside a batch of up to 64 requests: its "
    "output tokens will ...",
    ("Be identical, logits too, bit for bit",
     "Be the same text, with logits that differ in the last bits",
     "Differ in text for most prompts"))


TAKEAWAY = check_takeaway((
    "Inside a batch, the same greedy prompt's logits move in their last bits: kernels order "
    "their sums by the batch's shape, and floating-point addition is not associative.",
    "A last-bit change turns into another text only at a near-tie between two tokens: rare on "
    "any one prompt, likely somewhere across thousands of requests.",
    "Where outputs must repeat (tests, evaluations, RL rollouts), use a batch-invariant mode "
    "and measure its cost; elsewhere, promise equal outputs only up to floating point.",
))


INSTRUCTOR = InstructorNotes(
    minutes=15,
    timing="Three runs of the same measurement, one after the other: the default mode, the "
           "default with chunked prefill, then the batch-invariant mode, the longest of the "
           "three (its steps grow with the batch). A class can start with largest batch 8 "
           "and move to 64 while it discusses the first tables.",
    misconceptions=(
        "\"Temperature 0 is deterministic\": there is no sampling randomness, but the numbers "
        "that are argmaxed depend on the batch the request lands in.",
        "\"GPUs are nondeterministic because threads race\": most inference kernels give the "
        "same bits for the same inputs and shapes; what changes run to run is the batch.",
        "\"A difference of 1e-6 cannot matter\": it matters exactly where two tokens are within "
        "1e-6 of each other, and after that token the two answers read different texts.",
    ),
    prompts=(
        "At which batch did the prompt's logits first move in your runs? Why might batch 2 and "
        "batch 64 move them by the same amount?",
        "Your runs probably kept the text the same for most prompts. How many requests would a "
        "server need before some answer changes? (Think of the 80 of 1,000.)",
        "Who needs bit-identical outputs, and who would rather have the throughput?",
    ),
)


QUESTIONS = (
    Question("Why can the same greedy prompt get other logits inside a batch?", (
        Choice("Its sums run in another order for another batch shape", True,
               "(a + b) + c and a + (b + c) can differ in the last bit; another row count, "
               "another layout, another order."),
        Choice("The other requests' tokens leak into its attention", False,
               "Each sequence attends only to its own cache blocks; nothing crosses between "
               "requests."),
        Choice("Greedy decoding draws a little randomness at every token", False,
               "Greedy takes the largest logit: no random numbers are drawn."))),
    Question("When does a difference in the last bits of the logits change the text?", (
        Choice("When the two largest logits are nearly tied at some token", True,
               "Only a near-tie can be flipped by a last-bit change; after that token the two "
               "runs continue from different texts."),
        Choice("Whenever any one of its logits differs by at least one ULP", False,
               "Most logits differ in the last bits without moving the largest one from first "
               "place."),
        Choice("Never: differences that small are rounded away", False,
               "The argmax compares them as they are; a tie broken by a last bit is broken."))),
    Question("What does this engine's batch-invariant mode do?", (
        Choice("Computes each row of a step alone, in the same shapes", True,
               "One row at a time: the same calls in the same order whatever the batch, so "
               "the same bits."),
        Choice("Computes in float64, so rounding no longer matters", False,
               "More bits make differences smaller, not absent; and the mode stays in float32."),
        Choice("Rounds the logits to fewer bits before picking a token", False,
               "Rounding moves the near-tie to another place; it does not remove it."))),
    Question("Why does the batch-invariant mode cost time per step here?", (
        Choice("It gives up batching: B rows cost about B batch-1 steps", True,
               "Each row reads every weight on its own; the batch no longer shares the reads."),
        Choice("It computes every logit twice and compares the two", False,
               "Nothing is computed twice; the rows are computed one at a time."),
        Choice("It waits for the other requests to finish first", False,
               "The rows still run in the same step; only how each is computed changes."))),
    MeasuredQuestion("first-move", "Once the default runs are measured, a question on your own "
                                   "numbers appears here."),
)
