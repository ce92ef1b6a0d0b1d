"""The words of lesson 11, quantization (lessons/quantization.py draws them): its prose,
objectives, prediction, takeaway, checkpoint questions and instructor notes, and the figures it
quotes with their sources.

GPU_TEXT opens the lesson's "On a GPU" box, above its table of floors."""

from __future__ import annotations

from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

INTRO = """
<p>A decode step at a small batch reads every weight of the model once to produce one token per
sequence (<a href="app?lesson=roofline">lesson 5</a>): on most hardware it waits for memory, and
its time follows the bytes it reads. Store the weights in fewer bytes and there are fewer bytes
to wait for.</p>
<p>GPUs serve models in 16-bit <strong>bf16</strong>: two bytes a weight. There, int8 or FP8
weights halve the bytes and 4-bit weights quarter them; the story usually told stops at the
bytes: half the bytes, so up to twice as fast at small batches. This engine on a CPU computes in
32-bit <strong>float32</strong>, four bytes a weight, and that is the baseline measured here:
against it, int8 is a quarter of the bytes.</p>
<p><strong>Weight-only int8 quantization</strong> keeps each weight as a whole number from -127
to 127 and one float32 scale per row of a weight matrix: w &asymp; q &times; scale, with the
scale = the row's largest |w| / 127. One byte a weight instead of float32's four. The
activations stay float32, so the engine's int8 kernel turns each int8 weight back into a float
as it multiplies (<em>dequantisation</em>). The cost is rounding: each weight moves by up to half
a scale step.</p>
<p>A quarter of the bytes, so up to four times faster? This page measures whether that happens
here.</p>
"""


SETUP = """
<h2>The experiment</h2>
<p>The engine decodes 32 tokens after 128-token prompts, at batch 1, 4 and 16, once with float32
weights and once with int8 weights, and times every decode step (TPOT is their median). Each step
is placed on this machine's roofline: its arithmetic intensity is the FLOPs it does per byte it
reads, its height the FLOPs per second it achieved. Int8 does the same arithmetic on a quarter of
float32's weight bytes, so its points sit further right, where the memory roof is higher. Whether a
point also rises, whether the step ran faster, depends on what it waited for.</p>
"""


KERNEL = """
<h2>What the int8 kernel does for every weight</h2>
<p><strong>In one line:</strong> int8 saves bytes but adds instructions per weight, so it is
faster only where the bytes, not the instructions, set a step's pace.</p>
<details class="details"><summary>The instructions, step by step</summary>
<p>For float32 weights, a product loads 8 weights (32 bytes) and does a multiply-add with each
input row. The engine's int8 kernel (engine/model/csrc/int8_linear.cpp, AVX2) loads 8 weights (8
bytes), then widens them to 32-bit integers, converts those to floats, and only then does the
same multiply-add; the row's scale is applied once at the end. A quarter of the bytes, but more
instructions per weight. A step ends when both the bytes have arrived and the instructions are
done: saving bytes helps only while the bytes are what the step waits for.</p>
<p>What would make int8 faster here: integer dot products that consume the int8 weights without
widening them (quantising the activations to int8 too, as llama.cpp's Q8_0 path does with AVX2's
byte multiply-adds, or AVX-512 VNNI where a CPU has it). A GPU is another case: its arithmetic
outruns its memory by far more than this CPU's, so the widening should hide behind the memory
reads and the byte saving show as speed. On CUDA the engine runs int8 weights through a Triton
kernel of its own (engine/model/triton_int8.py) that reads the int8 tiles and widens them in
registers the same way. That kernel is tested for correctness in Triton's interpreter on this
CPU and has not been timed on a GPU here: how much faster it makes a GPU step is not measured in
this course.</p>
</details>
"""


QUALITY_SETUP = """
<h2>What the rounding costs</h2>
<p>The trained tiny model, loaded twice (float32 and int8 weights), reads every held-out window
of the corpus (text its training never saw). For each position it predicts the next token: the
loss is the average of -log(probability of the true next token), lower is better, and the
agreement is how often both versions put the same token first.</p>
"""


QUOTE = """
<blockquote class="quoted">
<p><strong>Quoted, not measured here.</strong> Weights are easy to quantize, activations are
not: weight-only int8, as measured here (8-bit weights, 16- or 32-bit activations), is close to
lossless. Quantizing the activations too, for an integer matrix product (W8A8), meets outliers:
LLM.int8() (Dettmers et al., "LLM.int8(): 8-bit Matrix Multiplication for Transformers at
Scale", NeurIPS 2022, arXiv:2208.07339) found that from about 6.7 billion parameters a few
hidden-state features of the activations need to stay in 16 bits; SmoothQuant (Xiao et al.,
ICML 2023, arXiv:2211.10438) moves that difficulty from the activations into the weights with a
per-channel scale.</p>
<p>On GPUs today the common 8-bit choice is <strong>FP8</strong> (Micikevicius et al., "FP8
Formats for Deep Learning", arXiv:2209.05433, 2022), usually W8A8: weights and activations both
in FP8, so a GPU with FP8 tensor cores (an H100) halves the bytes <em>and</em> runs the matrix
products at twice its bf16 rate. At <strong>4 bits</strong>, GPTQ (Frantar et al.,
arXiv:2210.17323, 2022) chooses each weight's rounding to cancel the error of the ones before it,
using a little calibration data; AWQ (Lin et al., MLSys 2024, arXiv:2306.00978) instead scales up
the weight channels that the activations show to matter most, then rounds to nearest. MARLIN
(Frantar et al., PPoPP 2025, arXiv:2408.11743), a GPU kernel for 4-bit weights with 16-bit
activations, reports close to the ideal 4x speed-up over 16-bit (FP16) weights up to batch
sizes of about 16 to 32.</p>
<p class="source">Sources: the papers named above.</p>
</blockquote>
"""


OBJECTIVES = (
    "explain how weight-only int8 stores a weight in one byte with a per-row scale",
    "tell from a step's bytes, time and the machine's bandwidth whether it waits on memory",
    "say why a quarter of the bytes does not always make a step faster, and measure the "
    "quality it costs",
)


PREDICTION = PredictionQuestion(
    "At batch 1 on this CPU, with int8 weights (a quarter of float32's bytes), the time per "
    "output token compared with float32 weights will be ...",
    ("About 4 times shorter", "Shorter, but far from 4 times", "About the same, or longer"))


SPEED_CHOICES = PREDICTION.choices


TAKEAWAY = check_takeaway((
    "Int8 weights take half of bf16's bytes (what GPUs serve) and a quarter of float32's (this "
    "CPU's baseline); scaled per row, they barely change the trained model's loss or its choice "
    "of next token.",
    "Fewer bytes shorten only a step that waits on memory: a kernel that widens every weight "
    "back to float can spend the time the bytes saved.",
    "Measure time per token with your own kernel and hardware: quantization always saves "
    "memory, speed only where reading weights sets the pace.",
))


INSTRUCTOR = InstructorNotes(
    minutes=20,
    timing="The machine's limits (read from disk once measured), then six decode points (float32 "
           "and int8 at batch 1, 4 and 16; the small preset takes seconds each), then the "
           "quality check on the tiny model (a few seconds).",
    misconceptions=(
        "\"Fewer bytes, so proportionally faster\" (half of bf16's bytes, twice as fast; a "
        "quarter of float32's, four times): only while reading weights is all the step waits "
        "for, and only with a kernel that keeps up with memory.",
        "\"Int8 means integer arithmetic\": here only the storage is int8 (weight-only, W8A16 "
        "on a GPU); the sums are float32 after the kernel widens each weight. W8A8 formats "
        "(int8 or FP8 activations too) also change the arithmetic.",
        "\"Quantization ruins quality\": measure it; per-row int8 is usually close to float32 "
        "(the quality check shows how close here), 4-bit needs more care.",
    ),
    prompts=(
        "At which batch did int8 gain most in your runs? Compare the GB/s each format reached "
        "there with the machine's bandwidth.",
        "What would you measure before buying int8 for speed on a GPU? On this CPU?",
        "Int8 frees three quarters of the weight memory. What could a server do with it even "
        "where it is not faster? (More KV cache, bigger batches: lesson 6.)",
    ),
)


QUESTIONS = (
    Question("How does weight-only int8 store a weight here?", (
        Choice("One signed byte per weight, and one float scale per row", True,
               "w is about q x scale, q from -127 to 127, scale = the row's largest |w| / 127."),
        Choice("One byte per weight, with no scale and the same range", False,
               "Without a scale the weights (mostly well under 1) would all round to 0."),
        Choice("Two bytes per weight, as a float with a shorter exponent", False,
               "That is bf16 or fp16, what GPUs serve unquantized: half of float32's bytes, not "
               "a quarter."))),
    Question("A step reads a quarter of the bytes with int8, yet takes as long. Why?", (
        Choice("It was waiting on the kernel's work per weight, not on memory", True,
               "Its achieved bandwidth falls well below the machine's: the widening and the "
               "multiply-adds set its pace, and fewer bytes do not shorten that."),
        Choice("Int8 weights take four times as long to read from memory", False,
               "A byte is a byte: memory delivers int8 bytes as fast as float32 bytes."),
        Choice("The model does four times the arithmetic when weights are int8", False,
               "The arithmetic is the same; only the extra widening per weight is added."))),
    Question("How can you tell from measurements that a decode step waits on memory?", (
        Choice("Bytes read / its time is close to the measured bandwidth", True,
               "If it moves bytes about as fast as the memory can deliver them, memory sets "
               "the pace (lesson 5's floor)."),
        Choice("Its time per token is longer than a prefill pass's time", False,
               "A prefill does far more work; the comparison says nothing about what a decode "
               "step waits for."),
        Choice("Its FLOPs per second reach the machine's compute peak", False,
               "That is a compute-bound step: the arithmetic, not memory, sets its pace."))),
    Question("How does this page measure what int8 costs in quality?", (
        Choice("Held-out loss and next-token agreement of both models", True,
               "On text the training never saw: the loss of each, and how often both pick "
               "the same next token."),
        Choice("The loss of each model on the text it was trained on", False,
               "Training text flatters a model; the held-out windows are the fair test."),
        Choice("The largest rounding error among all the model's weights", False,
               "That bounds each weight's change, not what the model then predicts."))),
    MeasuredQuestion("best-batch", "Once the six decode points have been measured, a question "
                                   "on your own numbers appears here."),
)

GPU_TEXT = """
<p>On a GPU the baseline is bf16, so the byte saving is a half for int8 or FP8 and three
quarters for 4-bit weights. While a decode step waits on memory, its time is at least its bytes
/ bandwidth, so its floor falls with the weights: Llama-3-8B's 16 GB of bf16 weights become 8
GB and 4 GB. Whether a real kernel reaches the lower floor is the question this page's CPU
answers for itself; on GPUs, MARLIN reports close to 4x for 4-bit weights at small batches, and
FP8 W8A8 halves the arithmetic's time as well.</p>
"""
