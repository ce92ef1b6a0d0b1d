"""Engine-service jobs of lessons 1 to 4 beyond serve_run, sweep_point and generate.

- `two_clocks` (lesson 1): the reader's prompt served in real time next to N background
  requests that are already decoding, so that the reader's inter-token gaps are paid in steps
  shared with them. Streams a "token" event per token of the reader's answer (only theirs) and
  returns that request's timeline and metrics. Not cacheable: it is the reader's own text.
- `load_test` (lesson 2): Poisson arrivals of a mix of short and long requests, served in real
  time under continuous batching; "progress" events as requests finish; the result is the `run`
  JSON (every request's timeline, every step, the metrics) with each request's size class.

Both go through the real-time serving loop (engine.serve.loop.run). Registered through
jobs.JOB_MODULES; torch and numpy are imported inside the functions only.
"""

from __future__ import annotations

from ..errors import ConfigError
from .jobs import (
    ENGINE_DEFAULTS,
    Cancelled,
    Emit,
    engine_from_params,
    float_param,
    int_param,
    job,
)

MAX_CONTEXT_TOKENS = 1536
MAX_BACKGROUND = 32
MAX_PROMPT_CHARS = 4000

TWO_CLOCKS_DEFAULTS = {
    **ENGINE_DEFAULTS,
    "prompt": "", "context_tokens": 0, "max_new_tokens": 48, "background": 0,
    "background_prompt_len": 32, "arrive_after_ms": 300.0, "stream": True,
    "temperature": 0.0, "seed": 0,
}


def _bool_param(params: dict, name: str) -> bool:
    if not isinstance(params[name], bool):
        raise ConfigError(f"{name} must be true or false (got {params[name]!r})")
    return params[name]


def _reader_metrics(trace, summarize, ttft_ms, tpot_ms, itl_ms, e2e_ms) -> dict:
    """The reader's request alone: TTFT split into queue and prefill, TPOT, ITL, E2E."""
    ttft = ttft_ms(trace)
    tpot = tpot_ms(trace)
    gaps = itl_ms(trace)
    itl = summarize(gaps).to_json()
    return {
        "ttft_ms": ttft,
        "queue_ms": 1000 * (trace.admitted_s - trace.arrival_s),
        "prefill_ms": 1000 * (trace.first_token_s - trace.admitted_s),
        "tpot_ms": tpot,
        "itl_ms": itl,
        "e2e_ms": e2e_ms(trace),
        "user_tokens_per_s": None if not itl["p50"] else 1000.0 / itl["p50"],
        "output_tokens": len(trace.token_s),
    }


@job("two_clocks", cacheable=False, defaults=TWO_CLOCKS_DEFAULTS)
def two_clocks_job(params: dict, emit: Emit, cancelled: Cancelled) -> dict | None:
    """The reader's prompt streamed beside N background requests that are already decoding."""
    import numpy as np

    from ..sampler import SamplingParams
    from ..scheduler import SchedulerConfig
    from ..serve.loop import run
    from ..serve.metrics import e2e_ms, itl_ms, summarize, tpot_ms, ttft_ms
    from ..serve.trace import RequestEvent, TokenEvent
    from ..serve.workload import PromptSource, Request

    prompt = params["prompt"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError("the prompt is empty: give some text")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ConfigError(f"the prompt is longer than {MAX_PROMPT_CHARS} characters")
    context = int_param(params, "context_tokens", 0, MAX_CONTEXT_TOKENS)
    max_new = int_param(params, "max_new_tokens", 2, 512)
    background = int_param(params, "background", 0, MAX_BACKGROUND)
    bg_prompt = int_param(params, "background_prompt_len", 1, 512)
    delay_s = float_param(params, "arrive_after_ms", 0.0, 5000.0) / 1000 if background else 0.0
    stream = _bool_param(params, "stream")
    temperature = float_param(params, "temperature", 0.0, 2.0)
    seed = int_param(params, "seed", 0)
    engine = engine_from_params(params)

    rng = np.random.default_rng(seed)
    source = PromptSource(engine.tokenizer)
    text_ids = engine.tokenizer.encode(prompt)
    context_ids = source.prompt(context, rng) if context else []
    reader_ids = context_ids + text_ids
    limit = engine.model_config.context
    if len(reader_ids) + max_new > limit:
        raise ConfigError(f"a prompt of {len(reader_ids)} tokens plus {max_new} new tokens "
                            f"exceeds the {engine.model_config.name} context of {limit} positions")
    # Background requests decode for as long as the reader's answer takes (the run stops when
    # the reader's request finishes), so their output is long; they all arrive at t = 0.
    bg_output = max(1, min(limit - bg_prompt, max_new + 1024))
    requests = [Request(id=0, prompt_ids=reader_ids, output_len=max_new, arrival_s=delay_s,
                        sampling=SamplingParams(temperature=temperature, top_k=40 if temperature
                                                else 0, seed=seed))]
    requests += [Request(id=i, prompt_ids=source.prompt(bg_prompt, rng), output_len=bg_output,
                         arrival_s=0.0) for i in range(1, background + 1)]
    config = SchedulerConfig(policy="continuous", max_batch=background + 1, chunk_size=0)
    reader_done = False

    def on_event(event) -> None:
        nonlocal reader_done
        if isinstance(event, TokenEvent):
            if event.request_id == 0 and stream:
                emit("token", {"index": event.index, "text": event.text or "",
                               "t_s": event.t_s, "t_ms": 1000 * (event.t_s - delay_s)})
        elif isinstance(event, RequestEvent) and event.request_id == 0:
            emit("request", {"kind": event.kind, "t_s": event.t_s,
                             "t_ms": 1000 * (event.t_s - delay_s)})
            reader_done = reader_done or event.kind == "finished"

    result = run(engine, requests, config, on_event=on_event,
                 cancelled=lambda: cancelled() or reader_done, stream_text=True)
    if cancelled():
        return None
    reader = result.requests[0]
    if reader.finish_s is None:
        raise ConfigError("the run ended before your answer was finished")
    decode_steps = [s for s in result.steps
                    if reader.first_token_s < s.end_s <= reader.finish_s]
    shared = [len(s.decode_ids) for s in decode_steps]
    text = engine.tokenizer.decode(reader.output_ids)
    pieces = _pieces(engine.tokenizer, reader.output_ids)
    return {
        "device": engine.device,
        "preset": params["preset"],
        "weights": "random" if params["random_weights"] else engine.model_config.weights,
        "stream": stream,
        "prompt_tokens": len(reader_ids),
        "text_tokens": len(text_ids),
        "context_tokens": len(context_ids),
        "max_new_tokens": max_new,
        "background": background,
        "text": text,
        "tokens": [{"text": piece, "t_ms": 1000 * (t - reader.arrival_s)}
                   for piece, t in zip(pieces, reader.token_s, strict=True)],
        "arrival_ms": 0.0,
        "admitted_ms": 1000 * (reader.admitted_s - reader.arrival_s),
        "first_token_ms": 1000 * (reader.first_token_s - reader.arrival_s),
        "finish_ms": 1000 * (reader.finish_s - reader.arrival_s),
        "metrics": _reader_metrics(reader, summarize, ttft_ms, tpot_ms, itl_ms, e2e_ms),
        "sequences_per_step": (sum(shared) / len(shared)) if shared else 1.0,
    }


def _pieces(tokenizer, ids: list[int]) -> list[str]:
    from ..tokenizer import IncrementalDecoder

    decoder = IncrementalDecoder(tokenizer)
    return [decoder.push(t) for t in ids]


# ---- lesson 2: a load test with a mix of short and long requests -----------------------------
LOAD_TEST_DEFAULTS = {
    **ENGINE_DEFAULTS,
    "rate": 4.0, "requests": 80, "long_share": 0.2,
    "short_prompt": [16, 64], "short_output": [8, 32],
    "long_prompt": [256, 512], "long_output": [64, 160],
    "max_batch": 8, "chunk_size": 128, "seed": 0,
}


def _range(params: dict, name: str, hi: int) -> tuple[int, int]:
    value = params[name]
    if not (isinstance(value, (list, tuple)) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise ConfigError(f"{name.replace('_', ' ')} must be [A, B] in tokens")
    low, high = value
    if not 1 <= low <= high <= hi:
        raise ConfigError(f"{name.replace('_', ' ')} range {low}:{high} must satisfy "
                            f"1 <= A <= B <= {hi}")
    return low, high


def mixed_workload(tokenizer, rate: float, count: int, long_share: float,
                   short: tuple[tuple[int, int], tuple[int, int]],
                   long: tuple[tuple[int, int], tuple[int, int]], seed: int):
    """Poisson arrivals at `rate`; each request long with probability long_share, else short;
    prompt and output lengths uniform in the class's ranges. Returns (requests, sizes)."""
    import numpy as np

    from ..serve.workload import PromptSource, Request, poisson_arrivals

    rng = np.random.default_rng(seed)
    arrivals = poisson_arrivals(count, rate, rng)
    is_long = (rng.random(count) < long_share).tolist()
    source = PromptSource(tokenizer)
    requests, sizes = [], []
    for i, (arrival, big) in enumerate(zip(arrivals, is_long)):
        (p_lo, p_hi), (o_lo, o_hi) = long if big else short
        prompt_len = int(rng.integers(p_lo, p_hi + 1))
        output_len = int(rng.integers(o_lo, o_hi + 1))
        requests.append(Request(id=i, prompt_ids=source.prompt(prompt_len, rng),
                                output_len=output_len, arrival_s=float(arrival)))
        sizes.append("long" if big else "short")
    return requests, sizes


@job("load_test", defaults=LOAD_TEST_DEFAULTS)
def load_test_job(params: dict, emit: Emit, cancelled: Cancelled) -> dict | None:
    """Poisson arrivals of short and long requests under continuous batching: the tail."""
    from ..scheduler import SchedulerConfig
    from ..serve.loop import run
    from ..serve.trace import RequestEvent

    rate = float_param(params, "rate", 0.05, 1000.0)
    count = int_param(params, "requests", 1, 2000)
    long_share = float_param(params, "long_share", 0.0, 1.0)
    short = (_range(params, "short_prompt", 1536), _range(params, "short_output", 512))
    long = (_range(params, "long_prompt", 1536), _range(params, "long_output", 512))
    config = SchedulerConfig(policy="continuous",
                             max_batch=int_param(params, "max_batch", 1, 256),
                             chunk_size=int_param(params, "chunk_size", 0, 2048))
    seed = int_param(params, "seed", 0)
    engine = engine_from_params(params)
    requests, sizes = mixed_workload(engine.tokenizer, rate, count, long_share, short, long, seed)
    finished = 0

    def on_event(event) -> None:
        nonlocal finished
        if isinstance(event, RequestEvent) and event.kind == "finished":
            finished += 1
            emit("progress", {"done": finished, "total": count,
                              "message": "requests answered"})

    emit("progress", {"done": 0, "total": count, "message": "requests answered"})
    result = run(engine, requests, config, on_event=on_event, cancelled=cancelled)
    if result.cancelled:
        return None
    out = result.to_json()
    for request, size in zip(out["requests"], sizes):
        request["size"] = size
    out["workload"] = {"kind": "poisson mix", "rate": rate, "requests": count,
                       "long_share": long_share, "short_prompt": list(short[0]),
                       "short_output": list(short[1]), "long_prompt": list(long[0]),
                       "long_output": list(long[1]), "seed": seed}
    return out
