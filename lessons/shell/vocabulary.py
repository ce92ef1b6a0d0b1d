"""The vocabulary every lesson uses, defined once; pages link here (app?page=vocabulary)."""

from __future__ import annotations

import html
from dataclasses import dataclass

from widgets.html import html_pane


@dataclass(frozen=True)
class Term:
    term: str
    anchor: str
    meaning: str
    measured: str  # how the engine measures it; "" when it is derived or a convention
    group: str  # one of GROUPS: the table is read group by group


TIME, LOAD, BATCH, MEMORY, LIMITS, LATER = (
    "Time and speed", "Load and targets", "Batching and scheduling", "Memory",
    "The machine's two limits", "Techniques of the later lessons")
GROUPS = (TIME, LOAD, BATCH, MEMORY, LIMITS, LATER)

TERMS: tuple[Term, ...] = (
    # ---- time and speed
    Term("TTFT (time to first token)", "ttft",
         "How long a request waits, from the moment it arrives, until its first output token "
         "appears. It covers waiting in the queue and reading the whole prompt (prefill).",
         "Timestamp of the first token minus the arrival time.", TIME),
    Term("TPOT (time per output token)", "tpot",
         "The average gap between the tokens of one answer after the first: (E2E - TTFT) / "
         "(N - 1) for an answer of N tokens, which has N - 1 such gaps. The first token is left "
         "out because it carries the prompt's cost.",
         "Per request, from its N token timestamps.", TIME),
    Term("ITL (inter-token latency)", "itl",
         "Every single gap between two tokens of the same answer. TPOT is their average; the "
         "ITLs show the hiccups an average hides.",
         "Every gap, pooled over all requests.", TIME),
    Term("E2E (end to end), also TTLT (time to last token)", "e2e",
         "From arrival to the last token: TTFT + (N - 1) x TPOT. It is all a caller feels when "
         "the answer is not streamed, for example a program waiting for a whole JSON reply.",
         "Timestamp of the last token minus the arrival time.", TIME),
    Term("Queue time", "queue",
         "From arrival until the server takes the request into a running batch.",
         "Admission timestamp minus the arrival time.", TIME),
    Term("Throughput", "throughput",
         "Output tokens per second produced by the whole server, for everyone together, over "
         "wall-clock time.",
         "All output tokens divided by the run's wall time.", TIME),
    Term("Per-user speed", "per-user-speed",
         "How fast one reader sees text appear: 1000 / TPOT in milliseconds. A TPOT of 10 ms is "
         "100 tokens per second for that reader, whatever the server's total. It is taken from "
         "TPOT, the mean gap, so a stall in the middle of an answer counts; the median gap "
         "would hide it.", "", TIME),
    Term("P50, P90, P95, P99 (percentiles)", "percentiles",
         "The latency that 50, 90, 95 or 99 percent of requests beat. P50 is the median, the "
         "typical case; P99 is one request in a hundred, the one users remember.",
         "Linear interpolation between the two nearest ranks (the pages say when another rule "
         "is used).", TIME),
    Term("Right skew", "right-skew",
         "A spread with a long tail on the right: most requests are quick, a few are much "
         "slower. The slow few pull the mean above the median, so the mean describes almost "
         "nobody's request.", "", TIME),
    # ---- load and targets
    Term("Poisson arrivals", "poisson",
         "Requests arriving independently, at random moments, at an average rate: the gaps "
         "between arrivals are random (exponentially distributed) with a mean of 1 / rate. A "
         "common model of many users who do not know about each other.",
         "The load tests draw arrival times this way from a seed.", LOAD),
    Term("Open-loop load", "open-loop",
         "Requests are sent at their own times whatever happens to earlier ones, as many "
         "independent users do. If the server falls behind, the queue grows without limit and "
         "so does TTFT. Lessons 2, 3 and 8 load the engine open-loop (an arrival rate).", "",
         LOAD),
    Term("Closed-loop load", "closed-loop",
         "A fixed number of users, each sending a new request only when the previous answer "
         "has arrived. A slow server slows the arrivals down too, so the queue never exceeds the "
         "number of users: a benchmark run this way (a fixed 'concurrency') can hide the queue "
         "that open-loop traffic would build. Lessons 2 and 3 offer it (concurrent users), "
         "and lesson 8's capacity search counts the users a machine holds this way.",
         "", LOAD),
    Term("SLO (service-level objective)", "slo",
         "A latency target, for example \"TTFT at most 200 ms and TPOT at most 100 ms\". "
         "Choosing it comes before tuning: a chat lives on TTFT and TPOT, an overnight batch job "
         "on throughput.", "", LOAD),
    Term("SLO attainment", "slo-attainment",
         "The share of requests that met every per-request limit of the SLO, in percent. It "
         "says how many users were served well; a percentile of one metric says how slow one "
         "kind of wait got.", "Requests meeting every limit / completed requests.", LOAD),
    Term("Goodput", "goodput",
         "Two definitions are in use. Per run: requests per second that met every per-request "
         "limit (TTFT at most X, TPOT at most Y, and E2E at most Z if one is set), as vLLM's "
         "benchmark counts it with --goodput; the rest count for nothing, however fast the "
         "server was on average. Per GPU, as the DistServe paper (Zhong et al., OSDI 2024) "
         "defines it: the highest request rate a GPU can be offered while a set share of "
         "requests (say 90%) still meets the SLO. Lesson 8 counts the first; lesson 12 plans "
         "with the second.",
         "Per run: requests meeting every limit / the run's wall time. Per GPU: the highest "
         "rate of a rate sweep whose SLO attainment reaches the share.", LOAD),
    Term("Cost per million tokens", "cost",
         "What a million output tokens cost on a machine rented by the hour: (price per hour / "
         "3600) x (1,000,000 / tokens per second). Count all tokens (throughput) for batch "
         "work, only tokens of requests within the SLO (goodput) for a chat.", "", LOAD),
    Term("Replica", "replica",
         "One whole copy of the server: one machine, or one group of GPUs holding one copy of "
         "the model, with its own batch and queue. Replicas add requests per second, never "
         "speed per request: a request is served by one of them, as fast as that one goes.",
         "Lesson 12 counts the replicas a demand needs and load-tests one of them.", LOAD),
    Term("Little's law", "littles-law",
         "In any system that is not piling up work, the average number of requests inside it = "
         "the arrival rate x the average time each spends there (L = lambda W; J. D. C. Little, "
         "1961). 10 requests/s that each take 2 s keep 20 in flight; a server holding a batch "
         "of B requests for E2E seconds each completes B / E2E per second.", "", LOAD),
    # ---- batching and scheduling
    Term("Static batching", "static-batching",
         "Wait until a batch is full (or no more requests are coming), run it until its longest "
         "member has finished, then take the next batch. The first arrival waits for the last, "
         "and a short answer waits for the longest one in its batch.", "", BATCH),
    Term("Dynamic batching", "dynamic-batching",
         "Like static batching, but a batch also leaves when its oldest request has waited a "
         "timeout (the batching window). The wait for a batch to fill is bounded; the wait for "
         "the running batch to end is not.", "", BATCH),
    Term("Batching window", "batching-window",
         "How long a dynamic batcher lets the first request of a batch wait for others before it "
         "launches a batch that is not full.", "", BATCH),
    Term("Continuous batching (in-flight batching)", "continuous-batching",
         "The batch is re-formed at every step: a finished request leaves at once and a waiting "
         "one takes its slot in the next step. Used by vLLM, SGLang and TGI; TensorRT-LLM calls "
         "it in-flight batching.", "", BATCH),
    Term("Iteration-level scheduling", "iteration-level",
         "Deciding which requests run at every step (iteration) of the model instead of once "
         "per batch; introduced by Orca (OSDI 2022), it is what makes continuous batching "
         "possible.", "", BATCH),
    Term("Chunked prefill", "chunked-prefill",
         "Splitting a long prompt's prefill into pieces processed over several steps, each "
         "beside the running requests' decode tokens, so no step grows long enough to stall "
         "them (SARATHI, 2023; Sarathi-Serve, OSDI 2024).", "", BATCH),
    Term("Token budget", "token-budget",
         "The most tokens one step may process (vLLM's max_num_batched_tokens). Running decodes "
         "take one token each first; prefill chunks fill what is left.", "", BATCH),
    Term("Preemption", "preemption",
         "Taking a running request out of the batch when the KV cache is full, so others can "
         "go on: its blocks are freed and it waits again. This engine preempts the newest "
         "request and recomputes its cache (as a prefill) when it is readmitted, as vLLM V1 does "
         "(vLLM's V0 could also swap the cache to CPU memory).", "", BATCH),
    # ---- memory
    Term("KV cache", "kv-cache",
         "The keys and values of every token seen so far, kept so decode need not recompute "
         "them. Its size per token is 2 x layers x KV heads x head size x bytes per number.",
         "The engine reports the bytes its cache tensors really take.", MEMORY),
    Term("PagedAttention", "paged-attention",
         "Keeping the KV cache in fixed-size blocks allocated as a sequence grows, with "
         "attention reading them through a block table, instead of one slab reserved per "
         "sequence (Kwon et al., SOSP 2023, the vLLM paper).", "", MEMORY),
    Term("Block table", "block-table",
         "A sequence's list of the physical KV blocks that hold its tokens, in order. The "
         "blocks need not be next to each other, and two sequences with the same prefix can "
         "point at the same blocks.", "", MEMORY),
    Term("GQA and MQA (grouped-query, multi-query attention)", "gqa",
         "Several query heads share one key-and-value head (GQA), or all share a single one "
         "(MQA), which divides the KV cache by the group size.", "", MEMORY),
    # ---- the machine's two limits
    Term("Compute-bound", "compute-bound",
         "Work whose speed is set by the arithmetic units: the data would arrive faster than "
         "the processor can do the sums with it. A prefill over a long prompt is compute-bound.",
         "", LIMITS),
    Term("Memory-bound", "memory-bound",
         "Work whose speed is set by how fast bytes come from memory: the sums would be quick, "
         "but the processor waits for the data. A decode step at a small batch is "
         "memory-bound: for a dense model it reads every weight to make one token per sequence.",
         "", LIMITS),
    Term("Prefill", "prefill",
         "Reading the prompt: the model processes all its tokens in one pass (or in chunks) "
         "and sets most of TTFT. Compute-bound for long prompts; a short prompt on a GPU is "
         "memory-bound, like a decode step.", "", LIMITS),
    Term("Decode", "decode",
         "Writing the answer: one step per new token. For a dense model each step reads all "
         "the model's weights from memory, and requests sharing a step share that read; each "
         "still reads its own KV cache. In a mixture-of-experts model each token uses only a "
         "few experts, so a step reads the experts its batch's tokens chose: more of them as "
         "the batch grows, until all are read.", "", LIMITS),
    Term("Mixture of experts (MoE)", "moe",
         "A model whose MLP layers are many experts, of which a router sends each token to a "
         "few: DeepSeek-V3 has 671 B parameters, 37 B of them active per token "
         "(arXiv:2412.19437). A step's weight bytes then grow with the batch, as more experts "
         "are chosen, instead of staying those of the whole model.",
         "Lesson 14: the distinct experts each decode step reads, its bytes and its time "
         "against the batch size.", LIMITS),
    Term("Arithmetic intensity", "arithmetic-intensity",
         "FLOPs done per byte moved from memory. Low intensity: memory-bound; high: "
         "compute-bound.", "Counted from the model's shape (engine.calc.step_cost).", LIMITS),
    Term("Roofline", "roofline",
         "A chart of attainable FLOP/s against arithmetic intensity: a slanted roof (bandwidth "
         "x intensity) and a flat one (the compute peak). A step can sit under the roofs, never "
         "above.", "", LIMITS),
    Term("Ridge point", "ridge-point",
         "The intensity where the two roofs meet: compute peak / memory bandwidth, in FLOP per "
         "byte. Below it a step waits on memory, above it on arithmetic.",
         "From the engine's measured bandwidth and matrix-multiply peak.", LIMITS),
    # ---- techniques of the later lessons
    Term("Prefix caching", "prefix-caching",
         "Keeping the KV cache of a prompt's beginning (a shared system prompt) so a later "
         "request that starts the same way skips that part of its prefill.", "", LATER),
    Term("Quantization", "quantization",
         "Storing weights (or the KV cache) in fewer bits. GPUs serve in 16-bit bf16, so int8 "
         "or FP8 weights halve the bytes and 4-bit weights quarter them (this CPU's baseline "
         "is 32-bit float32, so there int8 is a quarter). Fewer bytes per step lower the decode "
         "floor, which is faster only where reading those bytes sets the pace; FP8 with 8-bit "
         "activations too (W8A8) also runs the arithmetic faster on GPUs that have FP8 units. "
         "Its cost in quality has to be measured.",
         "Lesson 11: time per token with float32 and int8 weights, held-out loss and "
         "next-token agreement.", LATER),
    Term("Speculative decoding", "speculative-decoding",
         "A small, fast draft proposes several next tokens; the large model checks them all in "
         "one step and keeps those it agrees with, so one step can yield several tokens. It "
         "helps while the step is memory-bound: most at batch 1, and it fades once the step "
         "becomes compute-bound (short contexts at large batches). At long contexts the KV "
         "reads keep a step memory-bound at any batch, and speculation still pays there "
         "(MagicDec, Chen, Sadhukhan et al., arXiv:2408.11049).", "", LATER),
    Term("Batch invariance", "batch-invariance",
         "An engine is batch-invariant when a request's output does not depend on what else "
         "is in its batch. Real serving engines usually are not: kernels sum in a different "
         "order for other batch sizes, chunkings and cache layouts, and in floating point a "
         "different order can flip a near-tie between two tokens (Thinking Machines Lab, H. "
         "He, \"Defeating Nondeterminism in LLM Inference\", 2025). Chunked prefill and "
         "speculative decoding are exact in exact arithmetic; the pages say where this engine's "
         "outputs are checked equal. This engine's --batch-invariant mode computes every row "
         "of a step alone, so its outputs are the same bits at any batch, at a cost per step.",
         "Lesson 13: a greedy prompt alone and inside batches of up to 64 others, with and "
         "without chunked prefill: the largest logit difference, where the text first differs, "
         "how often across prompts; then the invariant mode and its cost per step.", LATER),
    Term("ULP (unit in the last place)", "ulp",
         "The gap between a floating-point number and the next one: the smallest change its "
         "bits can show. Two float32 values are n ULP apart when n - 1 other float32 values lie "
         "between them; 0 ULP means the same bits. A float32 has 24 significant bits, so near "
         "1.0 one ULP is about 1.2e-7, and near 0 far less: a tiny absolute difference near 0 "
         "can be many ULP.",
         "Lesson 13: the largest difference between a prompt's logits alone and in a batch, "
         "counted in ULP (the floats between them) and absolute.", LATER),
    Term("Nondeterminism", "nondeterminism",
         "The same request giving different outputs on different runs. At temperature 0 there "
         "is no sampling randomness, yet served outputs can still differ, mostly because the "
         "batch around a request changes from run to run and the kernels sum in another order "
         "for another batch (batch invariance, above). Run alone twice, this engine gives "
         "the same bits (lesson 13 checks it).",
         "Lesson 13: the same prompt alone twice (the same bits), then in other company.",
         LATER),
    Term("Router", "router",
         "In a mixture of experts, the small linear layer that scores every expert for each "
         "token; the token goes to its top-k experts.", "", LATER),
    Term("Top-k routing", "top-k",
         "Each token goes to the k experts its router scores highest (Mixtral: 2 of 8), their "
         "outputs weighed by a softmax over those k scores.", "", LATER),
    Term("Active parameters", "active-parameters",
         "The parameters one token is multiplied by: in a mixture of experts, everything but "
         "the experts it did not pick. A batch-1 decode step reads about these; a large batch "
         "reads nearly all the experts.",
         "Lesson 14: the weight bytes a step reads, from the experts it read.", LATER),
    Term("Expert parallelism", "expert-parallelism",
         "Spreading the experts of each layer over several GPUs, each token's hidden state "
         "sent to the GPUs of its experts and back: room for all experts, paid for in "
         "communication, worth it when each expert gets enough tokens per step.", "", LATER),
    Term("Tensor parallelism", "tensor-parallelism",
         "Splitting every weight matrix across several GPUs, each computing its share of every "
         "layer and exchanging results after it: more memory bandwidth and room for one model, "
         "paid for in communication at every layer.", "", LATER),
    Term("All-reduce", "all-reduce",
         "A collective operation among several GPUs: each holds a partial result, and each ends "
         "with the sum of all of them. Tensor parallelism needs two per layer of every step. In "
         "the ring algorithm each GPU sends 2 (t - 1) / t times the data for t GPUs, and each "
         "all-reduce also pays a fixed start-up time.", "", LATER),
    # ---- traffic classes (lesson 16)
    Term("Traffic class", "traffic-class",
         "A kind of work a server keeps in a queue of its own (interactive chat, batch jobs, "
         "offline work), with its own limits and a rule for which queue is served next.",
         "Lesson 16 serves one mix in one queue and in an interactive and a batch lane.", BATCH),
    Term("Admission control", "admission-control",
         "The rules that decide whether and when a request enters the running batch: a cap on "
         "running requests, on queue length, on prompt and output tokens, a rate limit. A "
         "request over a cap is refused with a reason, or made to wait.",
         "Each refusal is kept in the run's record with its reason.", BATCH),
    Term("Head-of-line blocking", "head-of-line-blocking",
         "A short request waiting behind long ones only because they came first: one "
         "first-come-first-served queue for all kinds of work.",
         "Lesson 16: the chat requests' TTFT tail in one queue against separate lanes.", BATCH),
    Term("Tenant", "tenant",
         "A customer, team or application whose requests share one server with others'; "
         "quotas are set per tenant.", "", LOAD),
    Term("Quota", "quota",
         "How much of the server one tenant may use: requests or tokens per second (or per "
         "minute, as the hosted APIs state them), enforced by a rate limiter.", "", LOAD),
    Term("Token bucket", "token-bucket",
         "A rate limiter: a bucket fills at a steady rate up to a burst size, and a request "
         "goes only when the bucket holds its cost. Over any window of w seconds it lets "
         "through at most rate x w + burst.",
         "Lesson 16 charges prompt plus new tokens to each tenant's bucket at admission.", LOAD),
    # ---- KV formats (lesson 6)
    Term("FP8", "fp8",
         "An 8-bit floating-point number: one byte where bf16 takes two and float32 four. Its "
         "two common formats are e4m3 and e5m2 (the OCP 8-bit floating point specification); "
         "serving engines store the KV cache in it to fit twice the tokens of bf16.",
         "--kv-dtype fp8 stores keys and values as e4m3 with a scale per block and KV head; "
         "lesson 6 counts the blocks a budget holds.", MEMORY),
    Term("e4m3", "e4m3",
         "The FP8 format with 4 exponent bits and 3 mantissa bits: numbers up to 448, each "
         "rounded to within 1/16 of itself (e5m2 trades a mantissa bit for range).", "", MEMORY),
    Term("Scale (quantization)", "scale",
         "The float a group of low-precision numbers is multiplied by to get their real values "
         "back: chosen as the group's largest magnitude over the format's largest number, so "
         "the group uses the format's whole range.", "", MEMORY),
    Term("Sliding-window attention", "sliding-window",
         "Attention in which each token looks back at only the last W tokens (itself "
         "included), so a layer's KV cache keeps only W tokens however long the context "
         "(Mistral 7B; Gemma 2's local layers).", "", MEMORY),
    Term("Hybrid attention", "hybrid-attention",
         "A model whose layers mix full attention with sliding-window attention (Gemma 2 "
         "alternates them): the window layers' cache stops growing at W tokens, the full "
         "layers keep every token, and a token beyond the window reaches a window layer only "
         "through the full layers.",
         "The tiny-hybrid preset frees its window layers' blocks behind the window; lesson 6 "
         "counts them.", MEMORY),
    Term("Colocated serving", "colocated",
         "Prefill and decode on the same engine, sharing every step: the usual way to serve, "
         "in which a long prompt's prefill slows the steps of every answer being decoded "
         "(chunked prefill spreads that stall thinner).", "", LATER),
    Term("Disaggregation (prefill/decode)", "disaggregation",
         "Prefill on one worker, decode on another, each sized and parallelized for its own "
         "phase; the prompt's KV moves from the first to the second (DistServe, OSDI 2024; "
         "Splitwise, ISCA 2024). It removes the interference between the phases at the cost "
         "of a KV handover per request.",
         "Lesson 15: TTFT, the ITL tail and goodput colocated and disaggregated (live where "
         "the engine has two cores, else computed from measured step costs: a replay).", LATER),
    Term("KV handover (KV transfer)", "kv-handover",
         "Copying a finished prefill's KV blocks, every layer's keys and values for the whole "
         "prompt, from the prefill worker to the decode worker, which maps them into its own "
         "block table: prompt tokens x KV bytes per token, over shared memory here, over "
         "NVLink or RDMA between GPUs.",
         "Lesson 15: from the first token to the decode worker holding the KV, per request.",
         LATER),
)

NOTES = """
<h2>Two habits of these pages</h2>
<ul>
<li>A request's E2E is the sum of its parts: queue + waiting for a batch to form + prefill +
decode + post-processing + network.</li>
<li>"Tokens per second" can mean the speed one reader sees or the total the server produces;
the pages always say which.</li>
</ul>
"""


def vocabulary_table() -> str:
    body = []
    for group in GROUPS:
        body.append(f'<tr class="term-group"><th colspan="3" scope="colgroup">'
                    f"{html.escape(group)}</th></tr>")
        body += [f'<tr id="{t.anchor}"><th scope="row">{html.escape(t.term)}</th>'
                 f"<td>{html.escape(t.meaning)}</td>"
                 f"<td>{html.escape(t.measured) or '&ndash;'}</td></tr>"
                 for t in TERMS if t.group == group]
    rows = "".join(body)
    return (
        '<table class="plain"><caption>Terms used on every page</caption>'
        '<thead><tr><th scope="col">Term</th><th scope="col">What it means</th>'
        f'<th scope="col">How the engine measures it</th></tr></thead><tbody>{rows}</tbody>'
        "</table>")


def vocabulary_content() -> list:
    return [html_pane("<h1>Vocabulary</h1>" + vocabulary_table() + NOTES)]
