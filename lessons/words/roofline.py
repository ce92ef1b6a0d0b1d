"""Lesson 5's words: prefill versus decode, and the memory wall (roofline). The view is
lessons.roofline; the cache's floors are engine.calc.cache_fit."""

from __future__ import annotations

from engine.calc.gpu_scaling import A100, H100, LLAMA_3_8B, compute_bound_prompt
from engine.calc.prefill_fit import attention_crossover
from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

INTRO = """
<p>A model answers in two kinds of work. <strong>Prefill</strong> reads your whole prompt in one
pass: every weight matrix multiplies hundreds of token vectors at once. <strong>Decode</strong>
then makes one token per step: every weight matrix is read again (from memory, for a model
larger than the processor's caches) to multiply a single vector per sequence.</p>
<p>The same weights, the same machine, yet the two run into different walls. To see which, we
need this machine's two limits: how fast it can move bytes from memory, and how fast it can
multiply.</p>
"""

LIMITS_TEXT = """
<p>Both limits are measured here by the engine, once per machine: <strong>memory
bandwidth</strong> by summing a 1 GiB array (every byte read once), <strong>compute
peak</strong> by multiplying two large square matrices. A third is measured the same way as the
first: the <strong>cache bandwidth</strong>, summing over and over an array small enough to stay
in the processor's last-level cache.</p>
"""

# Prompt length below which a bf16 prefill is memory-bound on each datasheet GPU, to the nearest 50.
A100_PROMPT, H100_PROMPT = (round(compute_bound_prompt(LLAMA_3_8B, gpu) / 50) * 50
                             for gpu in (A100, H100))

ROOFLINE_TEXT = f"""
<h2>The roofline</h2>
<p>A step does some number of floating-point operations (FLOPs) and moves some number of bytes.
Their ratio, <a href="app?page=vocabulary#arithmetic-intensity">arithmetic intensity</a> =
FLOPs / bytes, decides which limit binds:</p>
<ul>
<li>a step can go no faster than <strong>bandwidth &times; intensity</strong> FLOP/s (the
slanted roof: memory is the bottleneck),</li>
<li>nor faster than the <strong>compute peak</strong> (the flat roof).</li>
</ul>
<p>The roofs meet at the <a href="app?page=vocabulary#ridge-point">ridge point</a>, peak /
bandwidth. For a decode step at batch B on a model of P parameters, each weight does about 2
FLOPs per sequence (a multiply and an add), and every weight is read once: <strong>intensity
&asymp; 2&middot;B&middot;P FLOPs / (P &times; bytes per weight + KV cache bytes)</strong>. In
32-bit floats that is about B/2: one sequence gets half a FLOP per byte, far left of the ridge.
The KV cache bytes are each sequence's own, so they grow with B and keep the intensity from
growing quite as fast as the batch. A prefill pass of L tokens reuses each weight L times, so
its intensity is about L/2 here: long prompts sit far to the right. A short prompt does not:
below the ridge it is memory-bound too. On a GPU, whose ridge is much further right (see the
box below), that takes in more prompts: in bf16 a prefill of L tokens does about L FLOPs per byte
of weights, so it stays memory-bound up to about {A100_PROMPT} tokens on an A100 and
{H100_PROMPT} on an H100 (their ridge points from the datasheets).</p>
<p>The points below are the engine's own steps: FLOPs and bytes counted from the preset's shape
(the formulas are in the engine's <code>step_cost</code> module), divided by the time the step
really took.</p>
"""

FLOOR_TEXT = """
<h2>The floor under every token</h2>
<p>A decode step cannot finish before it has read its bytes. When the weights are too large to
stay in the processor's caches between steps (the default preset here is several times this
machine's last-level cache) they come from memory every step, so <strong>TPOT &ge; bytes moved
per step / memory bandwidth</strong>. The dashed line is that floor for each batch size,
computed from the measured bandwidth; the solid line is the engine's measured time per decode
step (the median of its timed steps; the whiskers, that median's 95% interval, and the table
beside gives how many steps were timed). At these short contexts batching adds few bytes (each
sequence's own cached keys and values), so the floor rises slowly while the tokens per step
multiply; at long contexts those bytes can outgrow the weights (64 sequences of 4,096 tokens of
Llama-3-8B hold 32 GiB of keys and values, twice its weights).</p>
"""

CPU_NOTE = """
<p><em>On this CPU the presets run in 32-bit floats: it has no fast 16-bit (bf16) arithmetic,
so a 16-bit model would be slower here, not faster. On a GPU the engine uses bf16 (2 bytes per
weight), which halves the bytes of every step.</em></p>
"""

OBJECTIVES = (
    "place a step on this machine's roofline from its FLOPs, its bytes and its time",
    "say why decode at a small batch is memory-bound and a long prefill compute-bound",
    "work out the least time a decode step can take from the bytes it reads",
)

CACHE_TEXT = """
<h2>A model that fits in the cache beats the floor</h2>
<p>The floor assumes the weights come from memory. The tiny preset's 22 MB of weights are small
enough to stay in a server CPU's last-level cache between steps (the numbers below say whether
they fit in this one's). Then its decode steps read them at the cache's bandwidth, several times
the memory's: the second set of decode points sits above the
memory roof, under the dashed cache roof, and its steps take less than the memory floor says.
What then sets their pace is the fixed cost of a step: dozens of small operations launched one
after another and the Python between them (<em>overhead-bound</em>; CUDA graphs cut it on a GPU).
A GPU's cache is tens of MB (50 MB of L2 on an H100), so any model worth serving there streams
from memory, as the default preset does here.</p>
"""

LLAMA_CROSSOVER = attention_crossover(LLAMA_3_8B.params, LLAMA_3_8B.heads, LLAMA_3_8B.head_dim,
                                      LLAMA_3_8B.layers)

PREFILL_CURVE_TEXT = f"""
<h2>The quadratic part of a long prompt</h2>
<p>A prefill pass multiplies every weight by every prompt token: work in proportion to the
prompt's length L. Causal attention adds a second kind of work: each token's query meets the
keys of every token before it, L(L+1)/2 pairs in every head of every layer, which grows as
L&sup2;. So the pass should take t = a + b&times;L + c&times;L&sup2;: a fixed cost a, a
<strong>weight term</strong> b&times;L and an <strong>attention term</strong> c&times;L&sup2;.
The passes below go up to the model's whole context, far enough for the attention term to show;
the fit (least squares, each coefficient with its 95% interval) draws the two terms apart.</p>
<p>Where does attention take over? Counting arithmetic (engine.calc.step_cost), a pass does
about 2&times;L&times;P' FLOPs for the weights (P' the weights each token meets) and
4&times;L(L+1)/2&times;heads&times;head dim&times;layers for attention, so the two are equal at
L* = P' / (heads &times; head dim &times; layers) tokens. For Llama-3-8B (its published shape,
taking all 8.03 B parameters as P') that is about {LLAMA_CROSSOVER:,.0f} tokens: below it the
weights' work leads, above it attention's. That is a count of FLOPs, not of time; on a GPU,
FlashAttention (Dao et al. 2022, arXiv:2205.14135) and FlashAttention-2 (Dao 2023,
arXiv:2307.08691) run attention as tiled matrix products at a large share of the chip's peak, so
time follows the count and the attention term takes over near L*; an attention kernel slower
than the matrix products moves that point to shorter prompts. This CPU's measured crossover,
below, can sit far from its FLOP count for the same reason.</p>
"""

PREDICTION = PredictionQuestion(
    "A decode step at batch 1: what share of this machine's measured compute peak will it "
    "reach?",
    ("Under 10%", "10% to 50%", "Over 50%"))

TAKEAWAY = check_takeaway((
    "Every step is held by one of two limits, memory bandwidth or the compute peak; its "
    "arithmetic intensity (FLOPs per byte) says which.",
    "Decode at a small batch does a FLOP or two per byte of weights read: far left of the "
    "ridge, memory-bound, its time floored by bytes / memory bandwidth unless the model fits "
    "in the cache.",
    "Long prefills, and decode at large enough batches, move right toward the compute roof; "
    "short prompts stay memory-bound on a GPU.",
))

INSTRUCTOR = InstructorNotes(
    minutes=20,
    timing="The page measures the machine once, then decode at 6 batch sizes and prefill at 4 "
           "prompt lengths of the mini preset, and decode of the tiny one at a few batch sizes, "
           "about fifteen jobs in a row when nothing is cached; warm it before class and they "
           "appear at once after the readers' predictions.",
    misconceptions=(
        "\"More FLOP/s makes batch-1 decode faster\": memory bandwidth does; the arithmetic "
        "units mostly wait.",
        "\"Decode is slow because attention is quadratic\": at short contexts the weight "
        "read dominates each step.",
        "\"Prefill is always compute-bound\": a short prompt sits left of the ridge, "
        "especially on a GPU.",
        "\"The floor holds for every model\": a model that fits in the cache reads its weights "
        "at the cache's bandwidth; tiny beats the memory floor here.",
    ),
    prompts=(
        "Where would a batch-1 step of an 8B model in bf16 sit on an H100's roofline?",
        "Why does the measured TPOT sit above the bandwidth floor, and by how much here? Why "
        "does tiny's sit below it?",
        "What would 8-bit weights do to a decode point's intensity and to its floor?",
    ),
)

QUESTIONS = (
    Question("A batch-1 decode step with 32-bit weights: about how many FLOPs does it do per "
             "byte it reads?", (
        Choice("About half a FLOP", True,
               "Each weight does 2 FLOPs (a multiply and an add) for the 4 bytes it takes to "
               "read it: far left of the ridge point, so the step is bound by bandwidth and the "
               "compute peak goes unused."),
        Choice("About 2 FLOPs: a multiply and an add per weight", False,
               "That is per weight; a 32-bit weight is 4 bytes, so it is half a FLOP per byte."),
        Choice("Hundreds, like a prefill: they multiply the same weights", False,
               "A prefill reuses each weight for every prompt token; a batch-1 decode step uses "
               "it once."))),
    Question("Going from batch 1 to batch 8, where does a decode step move on the roofline?", (
        Choice("Right and up: about 8 times the FLOPs for a few more bytes", True,
               "The weights are read once for all eight sequences, so intensity and achieved "
               "FLOP/s both rise until the step meets a roof."),
        Choice("Left and down: eight sequences mean more bytes per FLOP", False,
               "Only each sequence's cached keys and values are extra bytes; the weights, the "
               "bulk, are shared."),
        Choice("Straight up: the same intensity, done eight times as fast", False,
               "Intensity is FLOPs per byte; batching multiplies the FLOPs while the bytes "
               "barely grow, so the point moves right."))),
    Question("2 GB of weights, 1 TB/s of memory bandwidth: what is the least TPOT at batch 1?", (
        Choice("About 2 ms: each step reads all 2 GB at 1 TB/s", True,
               "TPOT >= bytes per step / bandwidth = 2 GB / 1000 GB/s = 2 ms, before counting "
               "the KV cache."),
        Choice("About 0.002 ms: the chip does trillions of FLOPs a second", False,
               "Fast arithmetic does not help: the step waits for the bytes."),
        Choice("Well under 1 ms: the weights stay in the chip's cache between steps", False,
               "Only a model smaller than the last-level cache can (the tiny preset here); a "
               "GPU's is tens of MB, so 2 GB come from memory at every step."))),
    Question("Which of these is compute-bound on this machine?", (
        Choice("A prefill pass over a prompt of a thousand tokens", True,
               "Each weight multiplies every prompt token, so the intensity is in the hundreds "
               "of FLOPs per byte, right of the ridge point."),
        Choice("A decode step for a single sequence", False,
               "It does about half a FLOP per byte: memory-bound."),
        Choice("Both: they multiply the same weights, so they sit at the same place", False,
               "Their intensities differ by a factor of hundreds; the chart shows them on "
               "either side of the ridge."))),
    MeasuredQuestion("roof", "Once the decode steps above are measured, a question on your "
                             "own chart appears here."),
)
