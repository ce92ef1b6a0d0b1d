"""The words of lesson 15, prefill/decode disaggregation: its prose, objectives, prediction,
takeaway, checkpoint questions and instructor notes, and the figures it quotes with their
sources.

GPU_TEXT opens the lesson's "On a GPU" box; its transfer times are computed by
engine.calc.disaggregation.transfer_ms from the figures it names."""

from __future__ import annotations

from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

INTRO = """
<p>A request has two phases that want different things. Its <strong>prefill</strong> runs the
whole prompt through the model in one pass: many rows per step, arithmetic-heavy, and its time
is what the reader waits for before the first token. Its <strong>decode</strong> runs one token
per step for as long as the answer lasts: one row per sequence, memory-bound at small batch, and
its steady rhythm is the gap between tokens (<a href="app?lesson=chunked-prefill">lesson 7</a>).
On one engine (<strong>colocated</strong> serving) the two share every step: a long prompt's
prefill stalls every running answer, and chunked prefill only spreads the stall thinner.</p>
<p><strong>Disaggregation</strong> gives each phase a worker of its own. Requests arrive at a
prefill worker, which runs the prompt and produces the first token; the prompt's KV blocks, every
layer's keys and values, are then copied to a decode worker (the <strong>KV handover</strong>),
which maps them into its own block table and decodes. A long prompt no longer stalls anyone's
decode, and each worker can be sized and parallelized for its own phase. The price is the
handover: bytes to copy for every request, and a second token that waits for them.</p>
"""

SETUP = """
<h2>The experiment</h2>
<p>One workload, a Poisson mix of short and long prompts, is served three ways on the same
model: colocated with whole-prompt prefill, colocated with chunked prefill (both measured live),
and disaggregated: a prefill worker and a decode worker, each an engine of its own, the KV of each
finished prefill handed over through shared memory and timed (<code>python -m engine run
--disaggregate</code>). Two workers measured honestly need a core each, apart from the web server:
where the engine has fewer than two cores of its own, as on a 2-core server, the disaggregated
row is <strong>computed from measured step costs (replay)</strong>: each worker's step costs (prefill by prompt
length, a decode step by batch) and the handover are measured on this engine, and the workload's
arrivals replayed on two simulated workers by the live workers' rules. It is labelled so
wherever it shows. The table gives each arm's TTFT, the ITL tail (P99) and DistServe's goodput:
requests per second that met both the TTFT and the TPOT target.</p>
"""

QUOTE = """
<blockquote class="quoted">
<p><strong>Quoted, not measured here.</strong> DistServe (Zhong et al., "DistServe:
Disaggregating Prefill and Decoding for Goodput-optimized Large Language Model Serving", OSDI
2024, arXiv:2401.09670) places prefill and decode on different GPUs, chooses each phase's
parallelism on its own, and judges a system by its goodput under both a TTFT and a TPOT target;
its abstract reports serving 7.4x more requests or a 12.6x tighter SLO than the systems it
compares with, with over 90% of requests within their latency targets. Splitwise (Patel et al.,
"Splitwise: Efficient Generative LLM Inference Using Phase Splitting", ISCA 2024,
arXiv:2311.18677) runs the two phases on separate machines, even of different GPU generations,
and reports 1.4x the throughput at 20% lower cost. Mooncake (Qin et al., "Mooncake: Trading More
Storage for Less Computation: A KVCache-centric Architecture for Serving LLM Chatbot", FAST 2025,
arXiv:2407.00079), Moonshot AI's serving system for Kimi, builds its design around a
disaggregated KV cache pool.</p>
<p>NVIDIA Dynamo and llm-d (a Kubernetes-native stack built on vLLM) ship disaggregated serving
as open source; both move KV blocks between GPUs with NVIDIA's NIXL library, over NVLink within
a node and RDMA (InfiniBand or RoCE) between nodes, so the copy bypasses the CPU.</p>
<p class="source">Sources: the papers named above; the NVIDIA Dynamo documentation
(docs.nvidia.com/dynamo) and the llm-d documentation (llm-d.ai).</p>
</blockquote>
"""

OBJECTIVES = (
    "explain why prefill and decode interfere on one engine, and what disaggregation changes",
    "say what the KV handover moves, and estimate its size from the KV bytes per token",
    "read TTFT, the ITL tail and goodput to decide when splitting the phases pays",
)

PREDICTION = PredictionQuestion(
    "With the same mix of short and long prompts, the P99 gap between tokens (ITL) "
    "disaggregated, compared with colocated serving with chunked prefill, will be ...",
    ("Lower: no prefill shares the decode worker's steps", "About the same",
     "Higher: every request waits for its handover"))

TAKEAWAY = check_takeaway((
    "Splitting prefill and decode onto workers of their own removes the stalls a long prompt "
    "puts into everyone's decode, at the cost of a KV handover per request.",
    "The handover moves prompt length x KV bytes per token: small beside the prefill on one "
    "machine's memory or NVLink, and a real cost over a slower network.",
    "Disaggregate when the ITL tail or TTFT misses its target under mixed prompts and each "
    "phase can have hardware of its own; with one small machine, chunked prefill is the "
    "cheaper fix.",
))

INSTRUCTOR = InstructorNotes(
    minutes=20,
    timing="One job serves the workload three times (colocated, chunked, disaggregated); on a "
           "2-core server the disaggregated arm is computed from costs measured in the same "
           "job. How long it took here is in the numbers below.",
    misconceptions=(
        "\"Disaggregation makes each request faster\": a request does the same work plus a "
        "handover; what improves is the interference between requests, and with it the tail "
        "and the goodput at a target.",
        "\"The handover is free on one machine\": it is a copy of every layer's K and V for "
        "the whole prompt; here it is small beside the prefill, over a network it need not "
        "be.",
        "\"The computed row is a measurement\": where the engine has one core it is a replay "
        "on measured costs, and it assumes each worker has a core like the one measured.",
    ),
    prompts=(
        "Which phase would you give more GPUs to for a chat service with long system prompts? "
        "For one that writes long answers?",
        "Why does DistServe count goodput at a TTFT and a TPOT target instead of throughput?",
        "When would you keep colocated serving with chunked prefill rather than split?",
    ),
)

QUESTIONS = (
    Question("What does the prefill worker hand to the decode worker?", (
        Choice("The prompt's KV blocks (every layer) and its first token",
               True, "The decode worker needs every earlier token's K and V to attend over, "
                     "and the first token to feed into its first step."),
        Choice("The prompt's text, which the decode worker then prefills again", False,
               "Then the decode worker would repeat the prefill; the point of the handover is "
               "that it does not."),
        Choice("The weights of the model layers that the prompt went through", False,
               "Each worker holds the whole model; only per-request state moves."))),
    Question("Why can a long prompt raise the gap between tokens of other requests on a "
             "colocated engine?", (
        Choice("Its prefill shares their steps, so those steps take longer", True,
               "Every running sequence gets its next token only when the step ends; a step "
               "with a long prefill in it ends late."),
        Choice("It takes KV blocks away, which makes their attention slower", False,
               "Free blocks do not change another sequence's attention time."),
        Choice("The tokenizer slows down for long texts", False,
               "Tokenizing is done before the request reaches the engine's steps."))),
    Question("A model keeps 128 KiB of KV per token. About how much does a 2,000-token prompt "
             "hand over?", (
        Choice("About 262 MB: 2,000 x 131,072 bytes", True,
               "The handover is the prompt's KV: tokens times KV bytes per token."),
        Choice("About 128 KiB: one token's worth", False,
               "Every prompt token's K and V are needed, not only the last one's."),
        Choice("Nothing: the decode worker reads the prefill worker's memory", False,
               "On separate GPUs or machines the blocks must be copied; even here they are "
               "copied into the decode worker's own pool."))),
    Question("Why does DistServe measure goodput rather than throughput?", (
        Choice("A request that misses a target counts for nothing", True,
               "Goodput counts only requests that met both targets, so a system cannot "
               "look good by running full and late."),
        Choice("Throughput cannot be measured on a disaggregated system", False,
               "It can; it just rewards batching that makes requests late."),
        Choice("Goodput counts the KV bytes moved per second", False,
               "Goodput counts requests that met their targets, per second."))),
    MeasuredQuestion("disaggregation", "Once the three runs above have finished, a question on "
                                       "your own numbers appears here."),
)

GPU_TEXT = """
<p>On GPUs the handover is a copy between devices. A Llama-3-8B prompt keeps 32 layers x 8 KV
heads x 128 dimensions x 2 (keys and values) x 2 bytes (bf16) = 131,072 bytes of KV per token
(Meta's model configuration), so a 2,000-token prompt moves 262 MB. At the 900 GB/s of NVLink on
an H100 (NVIDIA's H100 datasheet) that is about 0.3 ms; at the 50 GB/s of one 400 Gb/s
InfiniBand NDR port (NVIDIA ConnectX-7 datasheet) about 5.2 ms, bandwidth alone
(engine.calc.disaggregation.transfer_ms). Systems overlap the copy with the prefill layer by
layer. Prefill and decode also want different parallelism: prefill is compute-bound and gains
from splitting its matrix products over GPUs (tensor parallelism) to cut TTFT, while decode is
memory-bound and wants large batches and room for KV (DistServe chooses each phase's
parallelism on its own).</p>
"""
