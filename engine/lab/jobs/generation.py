"""Jobs that stream a reader's own text, token by token (not cached: the point is watching it
arrive, and a reader's text is not kept).

- `generate`: one prompt, generated alone (engine.generate); a "token" event per token with its
  text and engine time.
- `two_clocks`: the reader's prompt served in real time (engine.serve.loop) next to N background
  requests that are already decoding, so that the reader's inter-token gaps are paid in steps
  shared with them. Streams a "token" event per token of the reader's answer (only theirs) and
  returns that request's timeline and metrics.
"""

from __future__ import annotations

import numpy as np

from ...calc.slo_math import per_user_tokens_per_s
from ...errors import ConfigError
from ...generate import generate
from ...sampler import SamplingParams
from ...scheduler import SchedulerConfig
from ...serve.loop import run
from ...serve.metrics import e2e_ms, itl_ms, summarize, tpot_ms, ttft_ms
from ...serve.phases import RequestPhases
from ...serve.trace import RequestEvent, RequestTrace, TokenEvent
from ...serve.workload import PromptSource, Request
from ...tokenizer import IncrementalDecoder
from ..control import Control
from ..quality import spread
from ..registry import Emit
from .engines import engine_from_params, fit_kv, resident_lengths


def generate_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """One prompt, streamed: a "token" event per token with its text and engine time."""
    prompt = params["prompt"]
    sampling = SamplingParams(params["temperature"], params["top_k"], params["top_p"],
                              params["seed"])
    sampling.validate()
    engine = engine_from_params(params)
    ids = engine.tokenizer.encode(prompt)
    fit_kv(engine, [len(ids) + params["max_new_tokens"]])

    def on_token(event) -> None:
        emit("token", {"index": event.index, "text": event.text, "t_s": event.t_s})

    [gen] = generate(engine, [ids], params["max_new_tokens"], sampling, on_token=on_token,
                     cancelled=control)
    if control.cancelled():
        return None
    return {
        "device": engine.device,
        "preset": params["preset"],
        "weights": engine.model_config.weights,
        "prompt": prompt,
        "prompt_tokens": len(ids),
        "text": gen.text,
        "tokens": [{"text": piece, "t_s": t} for piece, t in zip(gen.pieces, gen.token_times, strict=True)],
        "ttft_ms": gen.ttft_ms,
        "tpot_ms": gen.tpot_ms,
        "spread": spread(gaps_ms(gen.token_times), "token gap"),
    }


def gaps_ms(times_s: list[float]) -> list[float]:
    """The gaps between consecutive token times (ms): what TPOT averages."""
    return [1000 * (b - a) for a, b in zip(times_s, times_s[1:])]


# ---- the reader's prompt among requests already decoding ----------------------------------------
def reader_metrics(trace: RequestTrace) -> dict:
    """The reader's request alone: TTFT split into queue and prefill, TPOT, ITL, E2E."""
    itl = summarize(itl_ms(trace)).to_json()
    return {
        "ttft_ms": ttft_ms(trace),
        "queue_ms": 1000 * (trace.admitted_s - trace.arrival_s),
        "prefill_ms": 1000 * (trace.first_token_s - trace.admitted_s),
        "tpot_ms": tpot_ms(trace),
        "itl_ms": itl,
        "e2e_ms": e2e_ms(trace),
        "user_tokens_per_s": per_user_tokens_per_s(tpot_ms(trace)),
        "output_tokens": len(trace.token_s),
    }


def two_clocks_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """The reader's prompt streamed beside N background requests that are already decoding."""
    prompt, context, max_new = params["prompt"], params["context_tokens"], params["max_new_tokens"]
    background, bg_prompt = params["background"], params["background_prompt_len"]
    delay_s = params["arrive_after_ms"] / 1000 if background else 0.0
    stream, temperature, seed = params["stream"], params["temperature"], params["seed"]
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
    # The reader's text is tokenized when it reaches the engine (the tokenize phase); a document
    # whose text would tokenize differently at the seam keeps its ids, tokenized here.
    reader_text = source.text_of(reader_ids) if context_ids else prompt
    if reader_text is not None and engine.tokenizer.encode(reader_text) != reader_ids:
        reader_text = None
    requests = [Request(id=0, prompt_ids=reader_ids, output_len=max_new, arrival_s=delay_s,
                        sampling=SamplingParams(temperature=temperature, top_k=40 if temperature
                                                else 0, seed=seed), prompt_text=reader_text)]
    requests += [Request(id=i, prompt_ids=source.prompt(bg_prompt, rng), output_len=bg_output,
                         arrival_s=0.0) for i in range(1, background + 1)]
    config = SchedulerConfig(policy="continuous", max_batch=background + 1, chunk_size=0)
    fit_kv(engine, resident_lengths(requests, config.max_batch))
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
                 cancelled=lambda: control.cancelled() or reader_done, stream_text=True)
    if control.cancelled():
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
        "metrics": reader_metrics(reader),
        "sequences_per_step": (sum(shared) / len(shared)) if shared else 1.0,
        "spread": spread(gaps_ms(reader.token_s), "your token gap"),
        "phases": phase_times(result.phases().get(0)),
    }


def phase_times(phases: RequestPhases | None) -> dict | None:
    """A request's phases in ms, as the PhaseTimes record has them."""
    if phases is None:
        return None
    return {f"{name}_ms": 1000 * getattr(phases, f"{name}_s") for name in
            ("tokenize", "queue", "prefill", "decode", "detokenize", "other", "e2e")}


def _pieces(tokenizer, ids: list[int]) -> list[str]:
    decoder = IncrementalDecoder(tokenizer)
    return [decoder.push(t) for t in ids]
