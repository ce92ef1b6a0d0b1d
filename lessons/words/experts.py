"""The words of lesson 14, mixture of experts (lessons/experts.py draws them): its prose,
objectives, prediction, takeaway, checkpoint questions and instructor notes, and the figures it
quotes with their sources.

GPU_TEXT opens the lesson's "On a GPU" box, above its table of floors."""

from __future__ import annotations

from dataclasses import dataclass

from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

INTRO = """
<p>A dense model multiplies every token by every weight. A <strong>mixture of experts</strong>
(MoE) replaces each layer's MLP by many smaller MLPs, the <em>experts</em>, and a
<strong>router</strong>: a small linear layer that scores every expert for each token. The token
goes only to its <strong>top-k</strong> experts (here 2 of 16), and their outputs are added,
weighed by a softmax over the chosen scores. So a token's work is that of its <em>active
parameters</em> (attention, the router, 2 experts a layer), while the model holds all 16.</p>
<p>At batch 1 a decode step reads the weights of the experts its one token picked, and nothing
else of the MLPs: the same bytes as a dense model of the active size (<a
href="app?lesson=roofline">lesson 5</a>: at small batches a step's time follows the bytes it
reads). But each token of a batch picks its own experts. The engine groups the batch's tokens
by expert, so each picked expert's weights are read once per step, however many tokens chose
it; a bigger batch picks more distinct experts, until every expert is read.</p>
<p>On the batch-size knob (<a href="app?lesson=knob">lesson 4</a>) a dense model's step reads
the same bytes at any batch, so a bigger batch is almost free until the arithmetic catches up.
This page measures how an MoE model's curve bends instead.</p>
"""


SETUP = """
<h2>The experiment</h2>
<p>Two models with random weights (timing only: which expert a token picks depends on the
weights, but the cost of reading an expert does not), each with mini's attention and 8
layers:</p>
<ul>
<li><strong>moe-mini</strong>: 16 experts a layer, top-2, each expert a SwiGLU MLP 512 wide:
108 million parameters, 413 MiB in float32, of which 20.0 million are active per token.</li>
<li><strong>moe-mini-dense</strong>: one MLP 1024 wide, the width of two experts: 19.9 million
parameters, the active size of moe-mini (but for its router's 8,192 a layer).</li>
</ul>
<p>At each batch size the engine prefills 64-token prompts (random tokens, so the sequences
route differently) and decodes 15 steps, the last 13 timed (two warm up). After each step every MoE layer reports how many
distinct experts its tokens picked. The weight bytes a step read follow from that count:
everything but the experts, plus layers &times; experts read &times; one expert's bytes. Beside
the count, what a router that picks uniformly at random would give: a given expert is missed by
all B tokens with probability (1 - k/E)<sup>B</sup>, so E &times; (1 - (1 - k/E)<sup>B</sup>)
experts are read on average.</p>
"""


READING = """
<h2>Why the curve bends</h2>
<p>A dense step reads all its weights once, whatever the batch, and shares them among all the
batch's tokens: at batch B each token's share of the weight bytes is 1/B. An MoE step at batch B
reads about E &times; (1 - (1 - k/E)<sup>B</sup>) experts a layer, and each of them serves only
the tokens that picked it, about B &times; k / E tokens once every expert is read. So the
weights an MoE token pays for shrink much more slowly with the batch: here, at batch 64, each
expert serves about 64 &times; 2 / 16 = 8 tokens a step, as well used as a dense weight at
batch 8.</p>
<p>Read your table for the two regimes. At small batches the MoE step reads about the dense
step's bytes, and costs about as much (plus the router and the grouping, which this CPU pays in
Python per expert). As the batch grows, its bytes grow towards all 16 experts, over five
times the dense model's (412 MiB against 76 MiB), while the dense step's stay flat. Whether the
time follows the bytes on this machine is what the step times say.</p>
"""


QUOTE = """
<blockquote class="quoted">
<p><strong>Quoted, not measured here.</strong> Mixtral 8x7B (Jiang et al., "Mixtral of
Experts", arXiv:2401.04088, 2024) has 8 experts a layer and routes each token to 2: "each token
has access to 47B parameters, but only uses 13B active parameters during inference".
DeepSeek-V3 (DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437, 2024) has 671B
parameters, 37B of them active for each token: every MoE layer has 1 shared expert and 256
routed experts, of which 8 are picked per token. Its report serves decoding with
<strong>expert parallelism</strong>: the experts of a layer are spread over many GPUs (one
expert per GPU in its decoding deployment), each token's hidden state is sent to the GPUs of
its experts and back, and a large batch gathered from many requests gives each expert enough
tokens per step to be worth reading.</p>
<p class="source">Sources: the two papers named above.</p>
</blockquote>
"""


OBJECTIVES = (
    "explain what a router, top-k and active parameters are in a mixture of experts",
    "predict from E, k and the batch size how many experts a decode step reads, and the bytes "
    "that makes",
    "say why MoE decode wants larger batches than a dense model of the same active size",
)


PREDICTION = PredictionQuestion(
    "At batch 64, the MoE model's decode step, against the dense model's of the same active "
    "size, will take ...",
    ("About the same time", "Longer, but under twice as long", "Twice as long or more"))


TIME_CHOICES = PREDICTION.choices


TAKEAWAY = check_takeaway((
    "An MoE decode step reads the experts its tokens picked: at batch 1 about a dense model of "
    "the active size, at a large batch nearly all the experts.",
    "Each expert read serves only the tokens that chose it, so an MoE model's weight bytes per "
    "token fall more slowly with the batch than a dense model's.",
    "Serve MoE with large batches, spread over GPUs by expert parallelism, so every expert gets "
    "enough tokens per step; at batch 1 count active bytes, at scale count all the bytes.",
))


INSTRUCTOR = InstructorNotes(
    minutes=20,
    timing="Two models' engines are built once per server (moe-mini holds 413 MiB and its "
           "matrix-product plans take minutes the first time on a CPU), then seven batch "
           "sizes for each: start it before the class discusses the router.",
    misconceptions=(
        "\"An MoE model costs its active parameters\": per token's arithmetic, yes; per step's "
        "bytes only at batch 1. At a large batch a step reads nearly every expert.",
        "\"The router picks uniformly\": a router picks by the token's hidden state; with random "
        "weights here it is close to uniform, a trained router can favour some experts (hence "
        "the load-balancing losses and the redundant experts of real deployments).",
        "\"Top-2 of 16 means an eighth of the time\": an eighth of the MLP arithmetic per token; "
        "the attention, the router and the grouping are paid in full.",
    ),
    prompts=(
        "At what batch did your step read half of the experts? What does the uniform formula "
        "say?",
        "A dense model of the MoE's total size would read all its weights at every batch. "
        "Which one wins at batch 1, which at batch 64, and why?",
        "Why does expert parallelism need a large batch to pay for its communication?",
    ),
)


QUESTIONS = (
    Question("What does the router of an MoE layer do?", (
        Choice("Scores each expert for a token and keeps the top k", True,
               "A linear layer to E logits; the token goes to its k best experts, weighed by "
               "a softmax over those k."),
        Choice("Sends each request to the GPU with the least work", False,
               "That is a load balancer between replicas; the router works per token, per "
               "layer, inside the model."),
        Choice("Chooses how many layers each token goes through", False,
               "Every token goes through every layer; the router picks experts within a "
               "layer."))),
    Question("Why does a batch-1 MoE step read about a dense step's bytes of the active size?", (
        Choice("Its one token reads only the k experts it picked", True,
               "The other experts' weights are not touched: attention, router and k experts "
               "are the active parameters."),
        Choice("The experts are compressed to a dense model's size", False,
               "All experts are held in full; they are just not read when nobody picked "
               "them."),
        Choice("The engine caches the experts between steps", False,
               "A model far beyond the last-level cache reads its weights from memory each "
               "step."))),
    Question("With E = 16 experts and top-2, about how many experts does a layer read at "
             "batch 8 under a uniform router?", (
        Choice("About 11: 16 x (1 - (7/8)^8)", True,
               "Each expert is missed by all 8 tokens with probability (1 - 2/16)^8, about "
               "0.34."),
        Choice("16: every expert, from batch 8 on", False,
               "8 tokens make 16 picks, but some repeat: about a third of the experts stay "
               "unread."),
        Choice("2: the top-k do not change with batch", False,
               "Each token picks its own k experts; the batch's tokens pick different ones."))),
    Question("Why does MoE decode want larger batches than a dense model of its active size?", (
        Choice("Each expert read serves only the tokens that picked it", True,
               "Its weights are shared by about B x k / E tokens, not by all B: it takes a "
               "larger batch to use each byte read as well."),
        Choice("Its router runs slowly when the batch is small", False,
               "The router is one small product; its cost is not what batching amortizes."),
        Choice("Its KV cache takes more bytes for every token", False,
               "The KV cache depends on the attention, which an MoE model keeps as a dense "
               "one does."))),
    MeasuredQuestion("read-half", "Once the MoE model has been measured at every batch size, "
                                  "a question on your own numbers appears here."),
)


GPU_TEXT = """
<p>On a GPU the same rule holds at a larger scale. At batch 1 a decode step's floor is its
active bytes / bandwidth; once the batch is large enough to pick every expert it is all the
weights / bandwidth, and a model of DeepSeek-V3's size does not fit one GPU at all, hence
expert parallelism across many. The floors below are bytes / bandwidth for the weights alone
(two bytes a weight in bf16 for Mixtral; one byte in FP8 for DeepSeek-V3, whose weights are
released in FP8, as its model card on Hugging Face says; the parameter counts are quoted from
the papers).</p>
"""


@dataclass(frozen=True)
class QuotedModel:
    """A public MoE model's parameter counts, quoted from its paper, and the bytes per weight
    it is served in."""

    name: str
    total: float
    active: float
    bytes_per_weight: float
    source: str


GPU_MODELS = (
    QuotedModel("Mixtral 8x7B (bf16)", 47e9, 13e9, 2, "Jiang et al., arXiv:2401.04088"),
    QuotedModel("DeepSeek-V3 (FP8)", 671e9, 37e9, 1, "DeepSeek-AI, arXiv:2412.19437"),
)
