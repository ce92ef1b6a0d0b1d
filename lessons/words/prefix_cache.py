"""The words of lesson 9, prefix caching (lessons/prefix_cache.py draws them): its prose,
objectives, prediction, takeaway, checkpoint questions and instructor notes, and the figures it
quotes with their sources.

GPU_TEXT opens the lesson's "On a GPU" box, above its table of floors."""

from __future__ import annotations

from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

INTRO = """
<p>Many requests to one service start the same way: a system prompt of instructions, a few
examples, a long document everyone asks about. The engine turns every prompt token into keys
and values (the KV cache of <a href="app?lesson=kv-cache">lesson 6</a>) during prefill, and for
a shared prompt it computes the same keys and values again for every request. The time to first
token is mostly that prefill (<a href="app?lesson=roofline">lesson 5</a>).</p>
<p><strong>Prefix caching</strong> keeps them. As soon as one of a request's KV blocks (16
tokens each in this engine) is full, it is kept under a hash of its tokens and of every token
before them, and it stays in memory after the request ends: a request running at the same time
can already hit it. A new request whose prompt starts with the same tokens takes those blocks instead
of computing them, and its prefill starts after them. Blocks nobody holds are evicted, least
recently used first, when the pool needs room.</p>
"""


SETUP = """
<h2>The experiment</h2>
<p>The engine serves the same requests twice, one at a time (one user asking in turn, so each
request's TTFT is its own prefill), starting from an empty cache each time. Every prompt is the
shared system prompt, then 32 to 64 tokens of its own; each request asks for 4 tokens. The first
request finds nothing in the cache either way: it pays for the shared prompt, and with the cache
on it leaves it behind for the others.</p>
"""


WHEN_IT_HITS = """
<h2>When does the cache hit?</h2>
<ul>
<li><strong>Only an exact prefix.</strong> A block's hash covers its tokens and all the tokens
before it, so one different token early in the prompt (a date, a user's name placed before the
instructions) changes every block after it. Put what is shared first, what varies last.</li>
<li><strong>Only whole blocks.</strong> A block that is not full is never shared: a shared
prompt of 1,030 tokens gives 64 cached blocks (1,024 tokens) and the rest is computed.</li>
<li><strong>Never the last token.</strong> The engine computes at least the prompt's last
token itself, so that it has the logits to pick the first output token.</li>
<li><strong>While the blocks are still there.</strong> Under memory pressure cached blocks are
evicted, least recently used first; a prompt nobody asked for in a while is computed again.</li>
</ul>
"""


QUOTE = """
<blockquote class="quoted">
<p><strong>Quoted, not measured here.</strong> vLLM calls this automatic prefix caching: KV
blocks identified by a hash of their tokens and the prefix before them, kept after a request
ends and evicted least recently used. SGLang's RadixAttention (Zheng et al., "SGLang: Efficient
Execution of Structured Language Model Programs", NeurIPS 2024, arXiv:2312.07104) keeps the
cached prefixes in a radix tree over tokens, so a prompt can match a cached prefix to the token,
and orders waiting requests so that those sharing a cached prefix run while it is cached.</p>
<p class="source">Sources: vLLM documentation, "Automatic Prefix Caching" (docs.vllm.ai); the
SGLang paper named above.</p>
</blockquote>
"""


OBJECTIVES = (
    "explain why a shared system prompt makes every request pay the same prefill",
    "measure what a prefix cache saves on the time to first token",
    "say when a cache hits: an exact token prefix, whole blocks, blocks not yet evicted",
)


PREDICTION = PredictionQuestion(
    "Requests share a long system prompt. With the prefix cache on, the TTFT of the requests "
    "after the first will be ...",
    ("Several times shorter (3x or more)", "Somewhat shorter (up to 3x)", "About the same"))


TAKEAWAY = check_takeaway((
    "A prompt that starts like earlier ones can skip their prefill: its TTFT shrinks to the "
    "prefill of what is new.",
    "The engine keeps full KV blocks under a hash of their tokens and everything before them, "
    "so only an exact prefix, in whole blocks, hits.",
    "Put shared text first and what varies last, and give the cache memory to keep it.",
))


INSTRUCTOR = InstructorNotes(
    minutes=15,
    timing="Two runs of a few requests each, cache off and on (how long each took here is in "
           "the numbers below). A new shared length re-runs both.",
    misconceptions=(
        "\"The cache stores answers\": it stores keys and values of prompt tokens; every answer "
        "is still generated.",
        "\"Similar prompts hit too\": only an exact token prefix does; one changed token early "
        "on misses everything after it.",
        "\"It makes decoding faster\": it shortens prefill, so TTFT; the time per output token "
        "stays.",
    ),
    prompts=(
        "A chat app puts the date at the start of its system prompt. What does that do to the "
        "cache, and what would you change?",
        "Which workloads share long prefixes? (Few-shot examples, a document many ask about, a "
        "multi-turn chat's history.)",
        "What does keeping cached blocks cost, and who pays when memory runs short?",
    ),
)


QUESTIONS = (
    Question("What does a prefix cache let a new request skip?", (
        Choice("Computing keys and values for prompt tokens already computed", True,
               "Its prefill starts after the cached blocks; the rest of the prompt and every "
               "output token are computed as usual."),
        Choice("Generating answer tokens that an earlier request already produced", False,
               "Only prompt keys and values are kept; every answer is generated afresh."),
        Choice("Waiting in the queue behind other requests that share its prompt", False,
               "The queue is unchanged; the saving is in the request's own prefill."))),
    Question("A system prompt starts with today's date and time to the second. What happens?", (
        Choice("Nothing hits: the first block differs, so all later ones do", True,
               "A block's hash covers every token before it; a changed first block changes "
               "them all. Move the date to the end."),
        Choice("Everything hits except the one block holding the date and time", False,
               "Later blocks are keyed by their whole prefix, date included, so they miss "
               "too."),
        Choice("Everything hits: the cache compares what the prompts mean", False,
               "The cache compares token ids exactly; it knows nothing of meaning."))),
    Question("The shared prompt is 100 tokens long and blocks hold 16. How many of a later "
             "request's tokens come from the cache?", (
        Choice("96: six full blocks; the partial seventh is computed", True,
               "Only full blocks are hashed and shared; 100 = 6 x 16 + 4."),
        Choice("100: the whole shared prompt, each of its tokens counted", False,
               "That is what a token-granular radix tree (SGLang) could reuse; a block cache "
               "reuses whole blocks."),
        Choice("112: the shared prompt rounded up to whole blocks", False,
               "The seventh block holds 4 shared tokens and 12 of the request's own, so it "
               "differs from request to request."))),
    Question("The cache is on, but each request's TTFT stays the same. What is the likeliest "
             "cause?", (
        Choice("The prompts differ early on, or their blocks were evicted", True,
               "A hit needs an exact prefix still in memory; check where the prompts first "
               "differ and how much KV memory is left over."),
        Choice("Prefix caching only speeds up decoding, and TTFT is prefill work", False,
               "It is the other way round: the cache skips prefill, so TTFT is where it shows."),
        Choice("The cache only works with batches of more than one request", False,
               "Here requests come one at a time and the later ones still hit."))),
    MeasuredQuestion("cached", "Once the run with the cache has finished, a question on your "
                               "own numbers appears here."),
)

GPU_TEXT = """
<p>On a GPU the prefill is much faster, and the cache still removes most of it. A prefill of L
tokens takes at least max(2 &times; parameters &times; L / peak, weight bytes / bandwidth). What a
hit saves is the difference between prefilling the whole prompt and prefilling only the
request's own part: floor(shared + own) &minus; floor(own). The own part is short, so its prefill
still reads every weight once: the saving is less than the shared prompt's floor alone, which is
its upper bound. Each hit also frees the GPU for other requests' work.</p>
"""
