"""Lesson 6's words: the KV cache. The view is lessons.kv_cache; its formulas are
engine.calc.kv_math."""

from __future__ import annotations

from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

INTRO = """
<p>To make each new token, attention looks back at every token before it. Recomputing their keys
and values every step would repeat the whole prefill, so the engine keeps them: for every layer,
for every KV head, one key vector and one value vector per token. That store is the
<a href="app?page=vocabulary#kv-cache">KV cache</a>, and it grows by the same amount with every
token of every sequence being served:</p>
<p><strong>KV bytes per token = 2 (a key and a value) &times; layers &times; KV heads &times; head
dim &times; bytes per element</strong></p>
<p>Two design choices shrink it. <a href="app?page=vocabulary#gqa">Grouped-query attention</a>
(GQA) lets several query heads share one KV head (multi-query attention, MQA, shares a single
one). <strong>Low-precision storage</strong> keeps each number in 8 bits (fp8) instead of 16,
halving the cache again.</p>
"""

CALC_TEXT = """
<h2>The calculator</h2>
<p>The shapes of three public models, as their published configurations give them, and the
engine's own presets (from the engine's <code>info</code> job), with the formula applied.</p>
"""

CHECK_TEXT = """
<h2>Checked against the engine</h2>
<p>The formula is only worth trusting if it matches what a real cache takes. Here the engine
built its paged KV cache for each preset (a few blocks only: the large preset's model is never
built) and counted the bytes its tensors occupy.</p>
"""

BLOCKS_TEXT = """
<h2>Pages of memory: blocks and block tables</h2>
<p>The engine never reserves a sequence's whole possible length. Its cache is one pool of
fixed-size <strong>blocks</strong> (16 tokens each); a sequence gets a new block only when its
last one is full, and gives all of them back when it finishes. Each sequence keeps a
<a href="app?page=vocabulary#block-table">block table</a>: the list of physical blocks holding
its tokens, in order. Attention follows the table, so the blocks need not sit next to each
other, and a block freed by one request is reused by the next. This is the idea of
<a href="app?page=vocabulary#paged-attention">PagedAttention</a>, the vLLM paper's.</p>
<p>Two things come with it. <strong>Sharing</strong>: two sequences that start with the same
tokens (samples of one prompt, or a shared system prompt) can point their tables at the same
blocks, stored once. <strong>Preemption</strong>: a pool can still run dry when every running
answer keeps growing. Then this engine takes the newest running request out of the batch, frees
its blocks, and puts it back at the front of the queue; when it is readmitted its cache is
recomputed (a prefill over its prompt and what it had written). Nobody crashes; one request
waits.</p>
<p>Below, a real run of the tiny model on a small pool: ten requests arriving at random, at most
four running at once. Move through the run step by step (or press play) and watch blocks being
taken, filled (darker means fuller) and handed on.</p>
"""

FIT_TEXT = """
<h2>How many sequences fit?</h2>
<p>Once the weights are loaded, the memory left over is the KV budget, and it, not the
arithmetic, caps how many requests can run at once. Before paging, a server kept each sequence
in one contiguous slab, which cannot grow in place once a neighbour sits after it, so it had to
reserve room up front: the model's <strong>full context</strong>, or at best the request's
<strong>prompt + max_tokens</strong> (the longest answer the request allows). Most answers stop
well short of that. A <strong>paged</strong> cache holds only what each sequence has used,
rounded up to whole blocks.</p>
"""

QUOTE = """
<blockquote class="quoted">
<p><strong>Quoted, not measured here.</strong> The vLLM paper profiled the serving systems of
its day and found that "only 20.4% - 38.2% of the KV cache memory is used to store the actual
token states in the existing systems"; with paged blocks, "vLLM improves the throughput of
popular LLMs by 2-4x with the same level of latency compared to the state-of-the-art systems,
such as FasterTransformer and Orca".</p>
<p class="source">Source: Kwon et al., "Efficient Memory Management for Large Language Model
Serving with PagedAttention", SOSP 2023 (arXiv:2309.06180).</p>
</blockquote>
"""

FORMATS_TEXT = """
<h2>Fewer bytes a token: FP8 storage and hybrid attention</h2>
<p><strong>FP8 KV.</strong> The engine can store keys and values as
<a href="app?page=vocabulary#fp8">FP8</a> (<code>--kv-dtype fp8</code>): the
<a href="app?page=vocabulary#e4m3">e4m3</a> format, one byte a number with 3 mantissa bits, and a
float32 <a href="app?page=vocabulary#scale">scale</a> per block and KV head (scale = the block's
largest |value| / 448, e4m3's largest number). Each value is divided by its scale and rounded as it
is written, and multiplied back as attention reads it, so each moves by at most 1/16 of itself
(the tiniest values, below e4m3's smallest normal number, by at most 1/1024 of the scale).
Against this CPU's float32 cache that is a quarter of the bytes; against the bf16 caches GPUs
serve, a half. The scales cost a little: 4 bytes per 16 tokens of each head.</p>
<p><strong>Hybrid attention.</strong> In a <a href="app?page=vocabulary#hybrid-attention">hybrid
model</a> some layers attend to the whole context and others only to a
<a href="app?page=vocabulary#sliding-window">sliding window</a> of the last W tokens: Gemma 2
alternates the two, layer by layer (a 4,096-token window); Mistral 7B windowed every layer
(4,096). A window layer never looks further back than W, so its cache keeps only the last W
tokens' blocks and gives the older ones back. The engine's <code>tiny-hybrid</code> preset (tiny's
shape, every other layer windowed to 256 tokens, random weights: memory and timing only) does
exactly this. What it costs is what the model can see: a token more than W positions back
reaches a window layer only through the full layers between.</p>
<p>The tables below are measured by the engine on this machine: the cache it builds in the same
memory in each format, the requests it admits, a decode step timed in each (the median of the
steps, with its 95% interval: unpacking fp8 as attention reads it costs time on a CPU, where no
hardware reads fp8), and the quality of the trained tiny model reading each cache. The hybrid
rows grow one sequence through each engine's own block manager to each length; the one column
worked out from the formula (the window at its fullest) says so. Try both from the command
line (<code>python -m engine run --kv-dtype fp8</code>, <code>--preset tiny-hybrid</code>).</p>
"""

FORMATS_SOURCES = """
<p class="source">Sources: the OCP 8-bit Floating Point specification (OFP8, e4m3: largest
number 448); vLLM's documentation, "Quantized KV Cache" (<code>--kv-cache-dtype fp8</code>);
Gemma Team, "Gemma 2: Improving Open Language Models at a Practical Size" (arXiv:2408.00118),
sliding window 4,096 in every other layer; Jiang et al., "Mistral 7B" (arXiv:2310.06825),
sliding window 4,096.</p>
"""

GPU_TEXT = """
<p>A real model's cache from its published shape: Llama-3-8B has 32 layers and 8 KV heads of
128, so in bf16 it takes 2 &times; 32 &times; 8 &times; 128 &times; 2 = 131,072 bytes (128 KiB)
per token, and in FP8 half that. An 8,192-token conversation is 1 GiB of cache in bf16. Beside
the 16 GB of bf16 weights, the memory left on each GPU holds this many tokens and conversations
(all of the rest given to the cache: a ceiling, since activations and the runtime take some).
FP8 halves the bytes, so the same memory holds twice the conversations; on the GPUs the bytes a
decode step reads of the cache halve too, which is where FP8 KV pays on a long context.</p>
"""

OBJECTIVES = (
    "work out a model's KV bytes per token from its shape, and what GQA and an 8-bit cache do "
    "to it",
    "say why the KV cache, not the weights, caps how many requests run at once",
    "explain how paged blocks fit more sequences than reserved slabs, and what happens when the "
    "pool runs dry",
    "say what an FP8 cache and a sliding window save, and what each costs",
)

PREDICTION = PredictionQuestion(
    "The engine will serve ten requests from one small pool of blocks. Will any block be used "
    "by more than one request in turn?",
    ("Yes: blocks a request frees are taken by the next", "No: each request keeps its own "
     "blocks", "Only if two requests share a prompt"))

TAKEAWAY = check_takeaway((
    "KV bytes per token = 2 x layers x KV heads x head dim x bytes per number; GQA, MQA and an "
    "8-bit cache shrink it.",
    "Once the weights are loaded, the memory left for this cache, not the arithmetic, caps how "
    "many requests run at once.",
    "Paged blocks hold only what each sequence uses, instead of reserving its longest possible "
    "length, so more sequences fit; a full pool preempts a request rather than failing.",
))

INSTRUCTOR = InstructorNotes(
    minutes=20,
    timing="The calculator needs nothing measured. The allocation check and the block-table "
           "run are two short jobs, shown at once when warmed; the formats' measurement (fp8 "
           "and hybrid) takes under a minute on a quiet 2-core machine.",
    misconceptions=(
        "\"The weights are what run out of memory as users grow\": they are loaded once and "
        "shared; the cache grows with every user's every token.",
        "\"Paging compresses the cache\": the numbers are the same; only the reservation "
        "changes.",
        "\"GQA cuts the number of query heads\": it cuts the key-and-value heads; queries "
        "keep theirs.",
        "\"A full KV cache crashes the server\": a paged engine preempts a request and "
        "recomputes it later.",
    ),
    prompts=(
        "How many 8,000-token conversations fit in 64 GB of KV budget with Llama-3-8B? With "
        "Llama-2-7B?",
        "A request asks for max_tokens 4,096 and stops after 200: what did a pre-paging server "
        "waste on it?",
        "When can two requests share KV blocks, and what must stay true for it to be safe?",
        "A hybrid model windows half its layers to 4,096 tokens: at 128,000 tokens of context, "
        "what share of a full model's cache does it keep? What can it no longer do?",
    ),
)

QUESTIONS = (
    Question("Llama-3-8B and Llama-2-7B both have 32 layers and 128-wide heads. Why does "
             "Llama-3-8B need a quarter of the KV bytes per token?", (
        Choice("It keeps 8 KV heads instead of 32: four query heads share each", True,
               "KV bytes scale with KV heads, not query heads: 8 / 32 = 1/4."),
        Choice("It stores its cache in 4-bit numbers instead of 16-bit ones", False,
               "Both rows of the calculator use the same number format; the difference is "
               "the KV heads."),
        Choice("It has fewer layers, so fewer keys and values per token", False,
               "Both have 32 layers; the difference is the KV heads."))),
    Question("On a GPU with the weights loaded, what usually caps how many requests can run at "
             "once?", (
        Choice("The memory left over for their KV cache", True,
               "Every running sequence needs its cache in memory at every step; when the budget "
               "is full, new requests wait."),
        Choice("The number of arithmetic units on the chip", False,
               "Decode leaves most of them idle (lesson 5); memory runs out first."),
        Choice("A copy of the weights for each running request", False,
               "The weights are loaded once and shared by every request; what grows with each "
               "one is its cache."))),
    Question("Why does a paged cache fit more sequences than a contiguous one?", (
        Choice("It holds only the blocks in use, not the longest possible length", True,
               "Most answers stop far short of the context or of max_tokens, so most of a "
               "reservation stays empty."),
        Choice("It compresses the keys and values into fewer bytes", False,
               "Blocks hold the same numbers in the same format; they are just allocated as "
               "needed."),
        Choice("Its sequences all share one copy of their keys and values in memory", False,
               "Sharing happens only for a common prefix; the count here assumes none."))),
    Question("Switching the KV cache from fp16 to fp8 does what to the sequences that fit?", (
        Choice("About doubles them: each token's cache takes half the bytes", True,
               "One byte per number instead of two; the formula's last factor halves."),
        Choice("Leaves them unchanged: fp8 changes the accuracy, not the size", False,
               "The bytes per element are in the formula."),
        Choice("Halves them: small numbers need twice as many blocks", False,
               "Fewer bytes per token means more tokens fit in the same blocks' memory."))),
    Question("A server without paging reserves prompt + max_tokens for each request. What does "
             "it waste?", (
        Choice("The part of max_tokens the answer never writes", True,
               "An answer that stops early leaves the rest of its reservation empty for its "
               "whole life; paging allocates blocks only as tokens arrive."),
        Choice("Nothing: it knows the prompt's length in advance", False,
               "It knows the prompt, not the answer; the answer's room is reserved blind."),
        Choice("Less than paging, because it never rounds to blocks", False,
               "Paging wastes at most the unused tail of one block per sequence."))),
    Question("The block pool is full and a running answer needs a new block. What does this "
             "engine do?", (
        Choice("Preempts the newest request and recomputes its cache later", True,
               "Its blocks go back to the pool, it waits at the front of the queue, and on "
               "readmission a prefill rebuilds its cache, as vLLM V1 does (its V0 could also swap the "
               "cache to CPU memory)."),
        Choice("Stops every request until one of them has finished", False,
               "The others go on at once with the freed blocks; only the preempted one waits."),
        Choice("Ends the answer early and returns what it has so far", False,
               "Every request is finished in full; the preempted one just finishes later."))),
    Question("A hybrid model windows every other layer to W tokens. At a context far longer "
             "than W, its KV cache is about what share of a full-attention model's?", (
        Choice("About half: the window layers keep only W tokens each", True,
               "The full layers still keep every token; the window layers' share shrinks to "
               "W tokens, so the total tends to half as the context grows."),
        Choice("About W / context: every layer keeps only the window", False,
               "Only the window layers drop old tokens; the full layers keep them all."),
        Choice("The same: the window only changes which tokens attention reads", False,
               "A window layer never reads a token older than W again, so its blocks are "
               "given back."))),
    MeasuredQuestion("allocation", "Once the engine's allocation check above has run, a "
                                   "question on its numbers appears here."),
)
