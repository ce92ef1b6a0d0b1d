"""The words of lesson 10, speculative decoding (lessons/speculative.py draws them): its prose,
objectives, prediction, takeaway, checkpoint questions and instructor notes, and the figures it
quotes with their sources.

GPU_TEXT opens the lesson's "On a GPU" box, above its table of floors."""

from __future__ import annotations

from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

INTRO = """
<p>At small batch sizes a decode step is memory-bound (<a href="app?lesson=roofline">lesson
5</a>): it reads every weight to produce one token per sequence, and the arithmetic units mostly
wait. Checking several tokens in one step costs about as much as checking one. (The target
here is the trained tiny model, whose weights fit in this machine's last-level cache: its step
is set by fixed per-step costs rather than by memory, which makes extra rows cheap for the same
reason; lesson 5 shows both regimes.)</p>
<p><strong>Speculative decoding</strong> uses that. A cheap <em>draft</em> guesses the next k
tokens; the model (the <em>target</em>) runs one step over its last token and the k guesses
(k + 1 positions, each a row of the step's matrix products, where plain decoding has one),
which gives its own choice after each of them. The guesses it agrees with are kept, plus its own
token at the first disagreement: between 1 and k + 1 tokens for one target step. With greedy
acceptance, as here, the text is in exact arithmetic what plain decoding writes; only the
number of target steps changes. In floating point a step over k + 1 positions may sum in
another order than a step over one, and a near-tie between two tokens can flip, so real engines
promise the same output only "up to the precision limits of hardware numerics" (vLLM's
documentation); this page compares every run's text with plain decoding's, token for token, and
says so (<a href="app?lesson=batch-invariance">lesson 13</a> measures how far a batch moves the
logits here, and what a batch-invariant mode costs).</p>
<p>Two drafts: <strong>prompt lookup</strong> finds the last few tokens earlier in the text and
proposes what followed them there (no model at all; it shines when the answer repeats the
prompt), and a <strong>draft model</strong>, 0.9 million parameters trained by this repository's
script on the same corpus as the tiny target.</p>
"""


SETUP = """
<h2>The experiment</h2>
<p>The engine generates 64 tokens for each of a batch of 48-token prompts from the corpus,
greedily, three times: plainly, with prompt lookup and with the draft model, both proposing k
tokens a step. If each guess is accepted independently with probability a, a target step yields
on average (1 - a<sup>k+1</sup>) / (1 - a) tokens (Leviathan et al., 2023). The table puts the
measured tokens per step beside that formula. It shows two acceptance figures, because they
differ: <strong>a</strong>, the formula's input, is the chance that a guess is accepted given
that the ones before it were (accepted guesses / (accepted guesses + rejections), where a
rejection is a sequence's check in a step that refused a guess), and the <strong>share of guesses kept</strong> is
accepted / proposed, lower because a guess after a rejected one is never even checked. The
formula column is the formula at that a averaged over the steps' actual proposal lengths:
prompt lookup proposes fewer than k tokens when it finds no match, and near the end of the
answer fewer are left to guess.</p>
"""


BATCH_SETUP = """
<h2>As the batch grows</h2>
<p>The same generation at batch 1, 4 and 16, plain and with prompt lookup (same k). At these
short contexts a bigger batch fills the step with useful arithmetic, so the k extra rows per
sequence are no longer free once the step is compute-bound, and every rejected guess is work
thrown away. At long contexts it is otherwise: each sequence reads its own cached keys and
values, the step stays memory-bound at any batch, and speculation keeps paying (see the box on
GPUs).</p>
"""


QUOTE = """
<blockquote class="quoted">
<p><strong>Quoted, not measured here.</strong> Speculative decoding was introduced by Leviathan,
Kalman and Matias ("Fast Inference from Transformers via Speculative Decoding", ICML 2023,
arXiv:2211.17192) and by Chen et al. ("Accelerating Large Language Model Decoding with
Speculative Sampling", arXiv:2302.01318, 2023); both accept draft tokens so that the output
distribution equals the target's, also when sampling. The expected number of tokens per target
step, (1 - a<sup>k+1</sup>) / (1 - a), is Leviathan et al.'s. Prompt lookup decoding is Apoorv
Saxena's (github.com/apoorvumang/prompt-lookup-decoding, 2023), available in vLLM as its n-gram
speculator.</p>
<p>On exactness, vLLM's documentation ("Speculative Decoding", lossless guarantees) says its
speculative decoding is lossless "up to the precision limits of hardware numerics", and that
batch size and numerics can change outputs; Thinking Machines Lab (H. He, "Defeating
Nondeterminism in LLM Inference", 2025) shows why a serving engine's outputs depend on the
batch and how to make kernels batch-invariant.</p>
<p>On large batches, MagicDec (Chen, Sadhukhan et al., arXiv:2408.11049, ICLR 2025) reports
speculation speeding up Llama-3.1-8B decoding 1.84x at batch sizes of 32 to 256 on 8 A100s, at
long contexts, where the KV reads keep each step memory-bound.</p>
<p class="source">Sources: the papers, repository and documentation named above.</p>
</blockquote>
"""


OBJECTIVES = (
    "explain how a target can check k guessed tokens in one step and keep its exact output",
    "predict tokens per target step from the acceptance rate with (1 - a^(k+1)) / (1 - a)",
    "say why speculation helps while a step is memory-bound and fades once it is compute-bound",
)


PREDICTION = PredictionQuestion(
    "At batch 1, with prompt lookup guessing 4 tokens a step, the time per output token "
    "compared with plain decoding will be ...",
    ("Lower: fewer target steps per token", "About the same", "Higher: the checks cost more"))


TAKEAWAY = check_takeaway((
    "A memory-bound step can check several guessed tokens for about the price of one, so a "
    "good draft cuts the target steps per token.",
    "Tokens per step follow (1 - a^(k+1)) / (1 - a): the acceptance rate a matters more than "
    "k, and the draft's own time is paid every step.",
    "Use it where steps are memory-bound (small batches, or long contexts at any batch); once "
    "a step is compute-bound (short contexts, large batches) the extra rows are no longer "
    "free.",
))


INSTRUCTOR = InstructorNotes(
    minutes=20,
    timing="Three runs at the reader's batch size (plain, prompt lookup, draft model), then "
           "plain and prompt lookup at batch 1, 4 and 16; each run is 64 tokens (how long they "
           "took here is in the numbers below).",
    misconceptions=(
        "\"The draft writes the answer\": the target checks every token; with greedy "
        "acceptance the text is the target's (in exact arithmetic; this page checks it).",
        "\"More guesses are always better\": each extra guess is accepted only if all before "
        "it were, and every guess costs a row of the step.",
        "\"It never pays at large batches\": it pays while a step is memory-bound. At short "
        "contexts a large batch is compute-bound and has no idle arithmetic to spend; at long "
        "contexts the KV reads keep it memory-bound, and it raises throughput there too "
        "(MagicDec).",
    ),
    prompts=(
        "Why does prompt lookup do well on code edits and summaries that quote the input?",
        "The draft model here is nearly as good as the target. Why not serve the draft "
        "instead? (Acceptance measures agreement with the target, not quality.)",
        "What would make the draft model pay off on this CPU, where both models are small?",
    ),
)


QUESTIONS = (
    Question("Why can the target check k guessed tokens in about the time of one step?", (
        Choice("The step is memory-bound: extra rows reuse weights it reads anyway", True,
               "The step reads every weight once whatever the rows; while it is memory-bound "
               "the extra rows' arithmetic is nearly free."),
        Choice("The target skips its attention layers for the tokens the draft proposed", False,
               "Every guessed token goes through every layer, attention included; that is what "
               "makes the check exact."),
        Choice("The draft's guesses are already checked by the draft model itself", False,
               "The draft cannot check itself; only the target's own choice decides."))),
    Question("With greedy acceptance, how does the text compare with plain decoding?", (
        Choice("The same in exact arithmetic: only the number of target steps changes",
               True, "A guess is kept only if it equals the target's own greedy choice there. "
                     "In floating point a step over k + 1 positions can round differently and "
                     "flip a near-tie, which real engines allow for; this page checks its runs' "
                     "texts token for token (lesson 13 measures such flips)."),
        Choice("It is close, with small differences where the draft model guessed", False,
               "Every kept token is the target's own choice; the draft only saves steps."),
        Choice("It follows the draft's text wherever the draft was confident enough", False,
               "Confidence plays no part: a guess is kept only if it equals the target's."))),
    Question("Each guess is accepted with probability a = 0.5, and k = 4. About how many tokens "
             "does a target step give?", (
        Choice("About 1.9: (1 - 0.5^5) / (1 - 0.5) = 1.94", True,
               "Each extra guess counts only if all before it were accepted: 1 + 0.5 + 0.25 + "
               "0.125 + 0.0625."),
        Choice("About 3: half of the four guesses, plus its own token", False,
               "A guess after a rejected one never counts, so the sum falls off geometrically."),
        Choice("About 2.5: half of the five tokens the step could yield", False,
               "The tokens are accepted in order and stop at the first rejection."))),
    Question("At short contexts, why does speculation stop helping as the batch grows?", (
        Choice("The step is no longer memory-bound: extra rows cost real time", True,
               "A large batch of short contexts fills the step with arithmetic until it is "
               "compute-bound; then extra rows take time and rejected guesses waste it. At "
               "long contexts the KV reads keep the step memory-bound at any batch, and "
               "speculation keeps paying."),
        Choice("The draft's guesses are less often right when many requests run", False,
               "Each sequence's acceptance does not depend on the others in the batch."),
        Choice("Greedy acceptance only works for one sequence at a time", False,
               "Each sequence in the batch is checked on its own rows; it works at any batch."))),
    MeasuredQuestion("drafts", "Once the three runs above have finished, a question on your own "
                               "numbers appears here."),
)

GPU_TEXT = """
<p>Whether the extra rows are free on a GPU depends on the step's arithmetic intensity. A decode
step of Llama-3-8B reads its weights once for the whole batch and each sequence's cached keys
and values for that sequence alone; it is memory-bound until its intensity reaches the GPU's
ridge point. The table gives the smallest batch at which a whole step does, by
engine.calc.gpu_scaling's formulas (the weight matrix products alone reach it somewhat sooner,
attention never). Below that batch speculation's extra rows ride on the weight read; at long
contexts no batch reaches it, which is where MagicDec finds speculation paying at batch 256.</p>
"""
